"""``consumer()``: reading a queue, a change stream or a vendor's cursor — a job per key plus a
supervising task, never a new primitive.

    sync_orders = consumer(
        name="sync-orders", tenant="none",
        keys=lambda: ["acct_1", "acct_2"],
        open=lambda source: vendor.stream(source.key, source.cursor, source.signal),
        handle=upsert_orders,                       # answers the cursor past its batch
        cursor=ConsumerCursor(load=cursors.of, save=cursors.save),
        transaction=lambda: transaction(pool),      # handle and cursor.save commit together
    )
    job_worker(jobs=[sync_orders, sync_orders.arm]); task_scheduler(tasks=[sync_orders.supervisor])

What it assembles (the spec's table): one running body per key (a keyed cap of 1, ``'wait'``);
one live row per key (``consumer:<name>:<key>``); no timeout; ``.supervisor`` at ``rearm``
enqueuing ``.arm``, which enqueues every key ``keys()`` answers; the cursor saved inside the same
``transaction()`` block as ``handle``; a drain commits or rolls back the batch in hand and hands
the run back uncounted; a partly filled batch commits after ``CONSUMER_LINGER_MS`` without a next
item; ``lag`` reported as progress. Delivery is at least once.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from contextvars import ContextVar
from typing import Any, TypeVar

from pydantic import BaseModel, ConfigDict

from ultimat3.core import Duration, XError, parse_duration
from ultimat3.jobs import (
    Concurrency,
    EnqueueResult,
    Job,
    JobContext,
    Retry,
    Step,
    Task,
    job,
    task,
)

from .consumer_run import (
    CONSUMER_LINGER_MS,
    ConsumerBatch,
    ConsumerCursor,
    ConsumerInput,
    ConsumerRun,
    ConsumerSource,
    CursorStore,
    HandleFn,
    KeysFn,
    LagFn,
    OpenFn,
    RunSpec,
    TenantOf,
    TransactionFn,
    call_back,
)

T = TypeVar("T")

_INSIDE: ContextVar[frozenset[str]] = ContextVar("ultimat3_consumer_inside", default=frozenset())
"""The consumers whose run (``open``, ``handle``, the cursor) is on this context's stack."""


class ArmInput(BaseModel):
    """The ``.arm`` job's input: nothing (the supervisor enqueues ``{}``)."""

    model_config = ConfigDict(frozen=True, extra="forbid")


class Consumer(Job[ConsumerInput, dict[str, Any]]):
    """The handle ``consumer()`` answers: a ``Job`` (enqueue ``{"key": ...}``) carrying
    ``.arm`` (the job that enqueues every key) and ``.supervisor`` (the task that enqueues
    ``.arm`` at ``rearm``). Its own enqueue from inside its run is ``X_CONSUMER_SELF_ENQUEUE``."""

    arm: Job[ArmInput, dict[str, Any]]
    supervisor: Task
    batch: int
    rearm_ms: int

    def _refuse_self(self) -> None:
        if self.name in _INSIDE.get():
            raise XError(
                "X_CONSUMER_SELF_ENQUEUE",
                f"consumer {self.name!r}: handle or open enqueued the consumer itself; it would "
                "dedupe onto the running row and arm nothing",
                fix=f"let {self.name}.supervisor re-arm it (or enqueue {self.name}.arm from "
                "outside the consumer)",
                meta={"job": self.name},
            )

    async def enqueue(self, input: Any, **options: Any) -> EnqueueResult:
        self._refuse_self()
        return await super().enqueue(input, **options)

    async def enqueue_many(self, inputs: Sequence[Any], **options: Any) -> list[EnqueueResult]:
        self._refuse_self()
        return await super().enqueue_many(inputs, **options)

    async def enqueue_as(self, actor: Any, input: Any, **options: Any) -> EnqueueResult:
        self._refuse_self()
        return await super().enqueue_as(actor, input, **options)


def _rearm_minutes(rearm: object) -> int | None:
    """Whole minutes dividing an hour (1, 2, 3, 4, 5, 6, 10, 12, 15, 20, 30, 60), else None."""
    try:
        ms = parse_duration(rearm, name="rearm")  # type: ignore[arg-type]
    except XError:
        return None
    if ms % 60_000:
        return None
    minutes = ms // 60_000
    return minutes if 1 <= minutes <= 60 and 60 % minutes == 0 else None


def _cron_of(minutes: int) -> str:
    if minutes == 60:
        return "0 * * * *"
    return "* * * * *" if minutes == 1 else f"*/{minutes} * * * *"


_UNSET: Any = object()


def consumer(
    *,
    name: str,
    tenant: TenantOf,
    keys: KeysFn,
    open: OpenFn[T],
    handle: HandleFn[T],
    cursor: CursorStore | ConsumerCursor,
    batch: int = 100,
    rearm: Duration = "1m",
    lag: LagFn | None = None,
    transaction: TransactionFn | None = None,
    retry: Retry | None = None,
    queue: str | None = None,
    timeout: Any = _UNSET,
) -> Consumer:
    """Declare a consumer: a job per key (input ``{"key": str}``) reading ``open(source)`` in
    batches of ``batch`` through ``handle``, its cursor saved with each batch, plus ``.arm`` and
    ``.supervisor``. Every refusal is one ``X_CONSUMER_INVALID`` naming each cause."""
    causes: list[tuple[str, str]] = []
    good_name = isinstance(name, str) and bool(name.strip())
    if not good_name:
        causes.append((f"name {name!r} is not a non-empty str", "name='sync-orders'"))
    callbacks: tuple[tuple[str, object, str], ...] = (
        ("keys", keys, "keys=lambda: accounts.connected()"),
        ("open", open, "open=lambda source: vendor.stream(source.key, source.cursor)"),
        ("handle", handle, "handle=an async def answering the cursor past the batch"),
    )
    for label, fn, example in callbacks:
        if not callable(fn):
            causes.append((f"{label} is a {type(fn).__name__}, not a function", example))
    load, save = getattr(cursor, "load", None), getattr(cursor, "save", None)
    if not callable(load) or not callable(save):
        missing = " and ".join(n for n, f in (("load", load), ("save", save)) if not callable(f))
        causes.append(
            (
                f"cursor has no callable {missing}",
                "cursor=ConsumerCursor(load=lambda key: ..., save=lambda key, next: ...)",
            )
        )
    if timeout is not _UNSET:
        causes.append(
            (
                f"timeout={timeout!r} was given; a consumer's run ends when its stream ends or a "
                "drain stops it",
                "drop timeout= (pass ctx.signal on to the upstream instead)",
            )
        )
    if isinstance(batch, bool) or not isinstance(batch, int) or batch < 1:
        causes.append((f"batch {batch!r} is not a whole number >= 1", "batch=100"))
    minutes = _rearm_minutes(rearm)
    if minutes is None:
        causes.append(
            (
                f"rearm {rearm!r} is not whole minutes dividing an hour",
                "rearm='1m' (or 2, 3, 4, 5, 6, 10, 12, 15, 20, 30 or 60 minutes)",
            )
        )
    optional: tuple[tuple[str, object], ...] = (("lag", lag), ("transaction", transaction))
    for label, maybe in optional:
        if maybe is not None and not callable(maybe):
            causes.append((f"{label} is a {type(maybe).__name__}, not a function", f"{label}=None"))
    if causes:
        label = f"consumer {name!r}" if good_name else "consumer()"
        raise XError(
            "X_CONSUMER_INVALID",
            f"{label} is invalid: " + "; ".join(c for c, _ in causes),
            fix="; ".join(dict.fromkeys(f for _, f in causes)),
            meta={"job": name, "causes": [c for c, _ in causes]},
        )
    assert minutes is not None
    spec = RunSpec(
        name=name,
        keys=keys,
        open=open,
        handle=handle,
        cursor=cursor,
        batch=batch,
        lag=lag,
        transaction=transaction,
        linger_ms=CONSUMER_LINGER_MS,
    )

    async def run(input: ConsumerInput, step: Step, ctx: JobContext) -> dict[str, Any]:
        token = _INSIDE.set(_INSIDE.get() | {name})
        try:
            return await ConsumerRun(spec, input.key, ctx).go()
        finally:
            _INSIDE.reset(token)

    handle_job = job(
        name=name,
        input=ConsumerInput,
        idempotency_key=lambda i: f"consumer:{name}:{i.key}",
        tenant=tenant,
        queue="default" if queue is None else queue,
        retry=retry,
        concurrency=Concurrency(key=lambda i: i.key, limit=1, when_busy="wait"),
        run=run,
    )
    made: Consumer = handle_job  # type: ignore[assignment]
    made.__class__ = Consumer  # the same job, with the self-enqueue guard and .arm/.supervisor

    async def arm_keys(_: ArmInput, step: Step, ctx: JobContext) -> dict[str, Any]:
        answered = await call_back(keys)
        if isinstance(answered, str) or not isinstance(answered, Iterable):
            raise XError(
                "X_INVARIANT",
                f"consumer {name!r}: keys() answered {answered!r}, not a list of str",
                fix="keys=lambda: ['acct_1', 'acct_2'] — what should be running",
                meta={"job": name},
            )
        wanted = list(dict.fromkeys(answered))
        bad = [k for k in wanted if not isinstance(k, str) or not k]
        if bad:
            raise XError(
                "X_INVARIANT",
                f"consumer {name!r}: keys() answered {bad[:3]!r}: each key must be a non-empty str",
                fix="answer the keys as non-empty strings",
                meta={"job": name},
            )
        results = await made.enqueue_many([{"key": k} for k in wanted]) if wanted else []
        started = [k for k, r in zip(wanted, results, strict=True) if not r.deduped]
        ctx.log.info("jobs.consumer.armed", consumer=name, keys=len(wanted), started=len(started))
        return {"keys": len(wanted), "started": started}

    made.arm = job(
        name=f"{name}.arm",
        input=ArmInput,
        idempotency_key=lambda _: f"consumer-arm:{name}",
        tenant="none",
        queue="default" if queue is None else queue,
        run=arm_keys,
    )
    made.supervisor = task(name=f"{name}.supervisor", cron=_cron_of(minutes), enqueue=made.arm)
    made.batch = batch
    made.rearm_ms = minutes * 60_000
    return made


__all__ = [
    "CONSUMER_LINGER_MS",
    "ArmInput",
    "Consumer",
    "ConsumerBatch",
    "ConsumerCursor",
    "ConsumerInput",
    "ConsumerSource",
    "CursorStore",
    "consumer",
]
