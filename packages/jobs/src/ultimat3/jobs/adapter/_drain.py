"""What ``x jobs drain`` moves between two durable drivers: one row no worker holds, with its
steps, as a plain JSON document (``MovedJob``); the source hands them out a batch at a time
(``DrainSource``) and the target takes them in (``JobImporter``).

A moved job keeps its id, run id, attempts, ``run_at``, ``created_at``, last error, progress and
step records, so a retried job replays its completed steps on the target. Nothing is counted: a
moved job is not a settled one.
"""

from __future__ import annotations

from collections.abc import Sequence
from contextlib import AbstractAsyncContextManager
from dataclasses import dataclass
from typing import Literal, Protocol, TypedDict, runtime_checkable

MOVABLE_STATES: tuple[str, ...] = ("ready", "delayed")
"""The states a drain moves: rows no worker holds and no event is awaited by."""

ImportOutcome = Literal["moved", "present", "deduped"]
"""Per row: ``moved`` (now on the target), ``present`` (that id was there already: a batch
taken again after a crash), ``deduped`` (a live job of the target holds its key)."""


class MovedJob(TypedDict):
    """One row on its way. Times are epoch milliseconds; ``payload``, ``last_error``,
    ``progress`` and ``trace_context`` are JSON text (or ``None``); ``steps`` are
    ``[name, state, executions, output JSON?, error JSON?, updated ms]`` in the order they were
    first recorded."""

    id: str
    run_id: str
    name: str
    queue: str
    state: str
    payload: str | None
    idempotency_key: str
    tenant_id: str | None
    concurrency_key: str | None
    attempts: int
    max_attempts: int
    run_at: int
    created_at: int
    last_error: str | None
    progress: str | None
    trace_context: str | None
    steps: list[list[object]]


@dataclass(frozen=True, slots=True)
class Imported:
    """The target's answer for one row: what happened, and the id that now holds the job."""

    outcome: ImportOutcome
    holder: str


@runtime_checkable
class JobImporter(Protocol):
    """Optional driver member: the target of a drain."""

    async def import_jobs(self, jobs: Sequence[MovedJob]) -> list[Imported]:
        """All of ``jobs`` in one atomic step, answered in order; an id already present and a
        key a live job holds add nothing."""
        ...


class DrainBatch(Protocol):
    jobs: list[MovedJob]

    async def delete(self) -> int:
        """Delete the batch from the source (inside the batch's transaction); answers how many
        rows went."""
        ...


class DrainSource(Protocol):
    """The source of a drain: batches locked until deleted (committed) or released."""

    def take(self, queue: str, limit: int) -> AbstractAsyncContextManager[DrainBatch]: ...

    async def left(self, queues: Sequence[str]) -> dict[str, int]:
        """Rows of ``queues`` a drain does not move, per state (``running``, ``suspended``)."""
        ...
