"""The operator surface: ``JobIntrospection``, what ``x jobs`` and the dashboard read and act
through (``driver.introspect``)."""

from __future__ import annotations

import builtins
from datetime import datetime
from typing import Any, Protocol, runtime_checkable

from ._model import (
    BulkResult,
    CounterRow,
    CounterTotals,
    JobDetail,
    JobRow,
    JobState,
    StepRecord,
    TaskFire,
    WorkerRow,
)


@runtime_checkable
class JobIntrospection(Protocol):
    """The operator surface: ``x jobs``, dashboards and tests read nothing else."""

    async def show(self, job_id: str) -> JobDetail:
        """The job's whole row with its steps; ``X_JOB_NOT_FOUND`` for an id nobody queued."""
        ...

    async def list(
        self,
        *,
        queue: str | None = None,
        name: str | None = None,
        state: JobState | None = None,
        id_prefix: str | None = None,
        created_from: datetime | None = None,
        created_to: datetime | None = None,
        tenant_id: str | None = None,
        limit: int = 50,
        after: str | None = None,
        before: str | None = None,
    ) -> list[JobRow]:
        """Keyset pages, newest first; ``after=job_cursor(last_row)`` is the next page."""
        ...

    async def remove(self, job_id: str) -> None: ...

    async def remove_many(
        self,
        *,
        state: JobState,
        queue: str | None = None,
        name: str | None = None,
        tenant_id: str | None = None,
    ) -> BulkResult: ...

    async def requeue(self, job_id: str, *, from_step: str | None = None) -> JobRow: ...

    async def requeue_many(
        self,
        *,
        state: JobState,
        queue: str | None = None,
        name: str | None = None,
        tenant_id: str | None = None,
    ) -> BulkResult: ...

    async def cancel(self, job_id: str, reason: str | None = None) -> JobRow: ...

    async def promote(self, job_id: str) -> JobRow: ...

    async def promote_many(
        self,
        *,
        state: JobState,
        queue: str | None = None,
        name: str | None = None,
        tenant_id: str | None = None,
    ) -> BulkResult: ...

    async def resolve_step(
        self, job_id: str, step: str, *, ran: bool, output: Any = None
    ) -> StepRecord | None:
        """Settle a once-step's unknown outcome: ``ran=True`` records it completed with
        ``output``; ``ran=False`` forgets it so the next attempt runs it."""
        ...

    async def pause_queue(self, queue: str) -> None: ...

    async def resume_queue(self, queue: str) -> None: ...

    async def paused_queues(self) -> builtins.list[str]: ...

    async def pause_task(self, task: str) -> None: ...

    async def resume_task(self, task: str) -> None: ...

    async def paused_tasks(self) -> builtins.list[str]: ...

    async def task_fires(self) -> builtins.list[TaskFire]: ...

    async def workers(self) -> builtins.list[WorkerRow]: ...

    async def counters(
        self, *, job: str | None = None, since_ms: int
    ) -> builtins.list[CounterRow]: ...

    async def counter_totals(self, since_ms: int) -> CounterTotals: ...


@runtime_checkable
class BulkCanceller(Protocol):
    """Optional introspection member: cancel every live job matching a filter (``x jobs cancel
    --queue emails``) in one set-based operation, up to ``MAX_BULK_ROWS`` oldest first — each as
    ``cancel`` would (``cancelled``, claim void, ``last_error`` an ``X_ABORTED`` with the
    reason). The Postgres, memory and Redis drivers have it."""

    async def cancel_many(
        self,
        *,
        state: JobState,
        queue: str | None = None,
        name: str | None = None,
        tenant_id: str | None = None,
        reason: str | None = None,
    ) -> BulkResult: ...
