"""``partitions()``: keep every partitioned entity of a database ready, daily.

One job, one durable step per partitioned entity (``partitions:<entity>``), each running
``ultimat3.entity.maintain_partitions(db, entity, now=clock.now())``: create ``ahead`` partitions
past the current one under a 5 s ``lock_timeout`` (a longer wait is ``X_DB_LOCK_TIMEOUT``,
retryable, so a long report query delays the run instead of queueing every write behind it), then
retire what ``retain`` expired (detach concurrently, drop). The job carries ``.schedule``, the
task ``<name>.schedule`` at ``cron`` in ``tz`` (default 03:17 UTC daily), which enqueues it.

Moving older rows in: enqueue it once with ``{"from": "<the oldest row's ISO instant>"}`` — that
run creates every partition back to it and drops nothing, under an idempotency key of its own (it
never folds into the schedule's run) — then run the ``backfill()``.
"""

from __future__ import annotations

from datetime import datetime
from typing import TYPE_CHECKING, Any, cast

from pydantic import BaseModel, ConfigDict, Field, field_validator

from ultimat3.core import Clock, Duration, Signal, XError
from ultimat3.jobs import Job, JobContext, Retry, Step, Task, job, task
from ultimat3.jobs.factories.entity_extra import need_entity

if TYPE_CHECKING:
    from ultimat3.entity import Database

DEFAULT_PARTITIONS_CRON = "17 3 * * *"


class PartitionsInput(BaseModel):
    """The run's input: ``{}`` (the schedule's), or ``{"from": iso}`` to create every partition
    back to that instant and drop nothing."""

    model_config = ConfigDict(extra="forbid", frozen=True, populate_by_name=True)

    from_: datetime | None = Field(default=None, alias="from")

    @field_validator("from_")
    @classmethod
    def _aware(cls, value: datetime | None) -> datetime | None:
        if value is not None and value.tzinfo is None:
            raise ValueError(
                "from must carry its offset (an ISO instant such as 2024-01-01T00:00Z)"
            )
        return value


class Partitions(Job[PartitionsInput, dict[str, Any]]):
    """The handle ``partitions()`` answers: the job, carrying ``.schedule`` (the task
    ``<name>.schedule`` that enqueues it at ``cron`` in ``tz``)."""

    schedule: Task


def _invalid(name: object, message: str, fix: str) -> XError:
    return XError("X_JOB_DECLARATION_INVALID", f"partitions({name!r}): {message}", fix=fix)


def partitions(
    *,
    database: Database,
    name: str = "partitions",
    cron: str = DEFAULT_PARTITIONS_CRON,
    tz: str = "UTC",
    clock: Clock | None = None,
    retry: Retry | None = None,
    queue: str | None = None,
    timeout: Duration | None = None,
) -> Partitions:
    """The partition-maintenance job of ``database`` (see the module); list both the job and its
    ``.schedule`` in the app. ``clock`` defaults to the run's own (``ctx.clock``). The result:
    ``{"tables": [{"table", "created", "dropped"}]}``."""
    ent_mod = need_entity("partitions")
    if not isinstance(name, str) or not name.strip():
        raise _invalid(name, "name is required (a durable queue key)", "partitions(name='...')")
    if not isinstance(database, ent_mod.Database):
        raise _invalid(
            name,
            f"database {database!r} is not a Postgres database() (partitions live in Postgres)",
            "partitions(database=db) where db = database(dsn, entities)",
        )
    partitioned = [e for e in database.entities.values() if e.partition_by is not None]
    if not partitioned:
        raise _invalid(
            name,
            "the database declares no partitioned entity",
            "entity(..., partition_by=PartitionBy('created_at')), or drop the job",
        )
    if clock is not None and not callable(getattr(clock, "now", None)):
        raise _invalid(name, f"clock {clock!r} has no now()", "clock=FrozenClock(...) or None")
    maintain = ent_mod.maintain_partitions

    def idempotency_key(i: PartitionsInput) -> str:
        if i.from_ is None:
            return f"partitions:{name}"
        return f"partitions:{name}:from:{i.from_.isoformat()}"

    async def run(i: PartitionsInput, step: Step, ctx: JobContext) -> dict[str, Any]:
        tables: list[dict[str, Any]] = []
        for ent in partitioned:

            async def one(signal: Signal, ent: Any = ent) -> dict[str, Any]:
                now = (clock or ctx.clock).now()
                report = await maintain(database, ent, now=now, since=i.from_)
                return cast("dict[str, Any]", report)

            tables.append(cast("dict[str, Any]", await step.run(f"partitions:{ent.name}", one)))
        return {"tables": tables}

    made = cast(
        "Partitions",
        job(
            name=name,
            input=PartitionsInput,
            idempotency_key=idempotency_key,
            tenant="none",
            queue="default" if queue is None else queue,
            retry=retry,
            timeout=timeout,
            run=run,
        ),
    )
    made.__class__ = Partitions  # the same job, carrying .schedule
    made.schedule = task(name=f"{name}.schedule", cron=cron, tz=tz, enqueue=made)
    return made


__all__ = ["DEFAULT_PARTITIONS_CRON", "Partitions", "PartitionsInput", "partitions"]
