"""``refresh_view()``: a job that refreshes one materialized view whole, in one step.

``refresh materialized view [concurrently]``: with ``concurrently=True`` readers keep the old
rows while it runs, which Postgres allows only over a unique index on the view. The job's tenant
is ``'none'``: the view holds every tenant's rows and the read path scopes them. Nothing
schedules it: the app's task enqueues it.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from ultimat3.core import Duration, Signal, XError
from ultimat3.jobs import Job, JobContext, Retry, Step, job
from ultimat3.jobs.factories.backfill import NoInput
from ultimat3.jobs.factories.entity_extra import need_entity

if TYPE_CHECKING:
    from ultimat3.entity import Database, Entity, MemoryDatabase


def _invalid(name: object, message: str, fix: str) -> XError:
    return XError("X_JOB_REFRESH_VIEW_INVALID", f"refresh_view({name!r}): {message}", fix=fix)


def refresh_view(
    *,
    name: str,
    view: Entity,
    database: Database | MemoryDatabase,
    concurrently: bool = False,
    retry: Retry | None = None,
    queue: str | None = None,
    timeout: Duration | None = None,
) -> Job[Any, None]:
    """A job (input ``{}``) whose one step refreshes ``view``, an entity declared with
    ``View(sql, materialized=True)``, in ``database``; see the module."""
    ent_mod = need_entity("refresh_view")
    if not isinstance(name, str) or not name.strip():
        raise _invalid(name, "name is required (a durable queue key)", "refresh_view(name='...')")
    if not isinstance(view, ent_mod.Entity):
        raise _invalid(name, f"view {view!r} is not an entity()", "view=post_totals")
    if view.view is None:
        raise _invalid(
            name,
            f"{view.name!r} is a table, not a materialized view",
            "declare it with view=View(sql, materialized=True)",
        )
    if not view.view.materialized:
        raise _invalid(
            name,
            f"{view.name!r} is a plain view (always current; nothing to refresh)",
            "View(sql, materialized=True), or drop the refresh job",
        )
    if not isinstance(concurrently, bool):
        raise _invalid(name, f"concurrently {concurrently!r} is not a bool", "concurrently=True")
    if concurrently and not view.unique_sets():
        raise _invalid(
            name,
            f"concurrently=True needs a unique index on {view.name!r}, which has none",
            "add .unique() to a column or Index((...), unique=True), or concurrently=False",
        )
    if not isinstance(database, ent_mod.Database | ent_mod.MemoryDatabase):
        raise _invalid(name, f"database {database!r} is not a database()", "database=db")
    if database.entities.get(view.name) is not view:
        raise _invalid(
            name,
            f"database does not declare {view.name!r}",
            "list the view in database(dsn, [..., view])",
        )

    async def run(i: Any, step: Step, ctx: JobContext) -> None:
        async def refresh(signal: Signal) -> None:
            await database.table(view.name).refresh(concurrently=concurrently)

        await step.run("refresh", refresh)

    options: dict[str, Any] = {}
    if queue is not None:
        options["queue"] = queue
    return job(
        name=name,
        input=NoInput,
        idempotency_key=lambda i: f"refresh_view:{name}",
        tenant="none",
        retry=retry,
        timeout=timeout,
        run=run,
        **options,
    )


__all__ = ["refresh_view"]
