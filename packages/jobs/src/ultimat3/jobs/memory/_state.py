"""The memory driver's store: plain dicts of mutable rows, shared by the driver, its step store
and its introspection. Values cross in and out as JSON text, so no caller ever holds a reference
into a stored row. Nothing here awaits: every operation over it is atomic on the event loop."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from ultimat3.core import Clock, XError, current_clock, dumps_json, from_epoch_ms
from ultimat3.jobs.adapter import (
    LIVE_STATES,
    TERMINAL_STATES,
    JobDetail,
    JobRow,
    JobState,
    StepRecord,
    StepState,
)

from ._counters import CounterBook

LiveKey = tuple[str, str | None, str]


def freeze(value: Any, *, what: str, code: str = "X_INVARIANT") -> str:
    """``value`` as JSON text (what a database would store: core's JSON form, so a ``datetime``
    reads back as an ISO string); refuses what has no JSON form with ``code`` naming ``what``."""
    try:
        return dumps_json(value)
    except XError as exc:
        raise XError(code, f"{what}: {exc.message}", fix=exc.fix, meta=exc.meta) from exc


def thaw(text: str | None) -> Any:
    """A fresh copy of a stored JSON value."""
    return None if text is None else json.loads(text)


@dataclass(slots=True)
class MemStep:
    name: str
    state: StepState
    executions: int
    output_json: str | None
    error_json: str | None
    updated_at_ms: int

    def record(self) -> StepRecord:
        return StepRecord(
            name=self.name,
            state=self.state,
            executions=self.executions,
            output=thaw(self.output_json),
            error=thaw(self.error_json),
            updated_at=from_epoch_ms(self.updated_at_ms),
        )


@dataclass(slots=True)
class MemRow:
    id: str
    run_id: str
    name: str
    queue: str
    state: JobState
    attempts: int
    max_attempts: int
    run_at_ms: int
    created_at_ms: int
    updated_at_ms: int
    idempotency_key: str
    payload_json: str
    tenant_id: str | None = None
    concurrency_key: str | None = None
    last_error_json: str | None = None
    progress_json: str | None = None
    result_json: str | None = None
    worker_id: str | None = None
    claim: str | None = None
    lease_expires_at_ms: int | None = None
    finished_at_ms: int | None = None
    wait_event: str | None = None
    trace_context: Mapping[str, str] | None = None
    crashes: int = 0
    crash_streak: int = 0
    crashed_at_ms: int | None = None

    @property
    def live_key(self) -> LiveKey:
        return (self.name, self.tenant_id, self.idempotency_key)

    @property
    def live(self) -> bool:
        return self.state in LIVE_STATES

    def order_key(self) -> tuple[int, str]:
        """Newest-first listing key, in the cursor's unit (microseconds)."""
        return (self.created_at_ms * 1000, self.id)

    def clear_lease(self) -> None:
        self.worker_id = None
        self.claim = None
        self.lease_expires_at_ms = None

    def row(self) -> JobRow:
        return JobRow(**self._fields())

    def detail(self, steps: dict[str, MemStep] | None) -> JobDetail:
        recs = {name: step.record() for name, step in (steps or {}).items()}
        return JobDetail(**self._fields(), steps=recs)

    def _fields(self) -> dict[str, Any]:
        return {
            "id": self.id,
            "run_id": self.run_id,
            "name": self.name,
            "queue": self.queue,
            "state": self.state,
            "attempts": self.attempts,
            "max_attempts": self.max_attempts,
            "run_at": from_epoch_ms(self.run_at_ms),
            "created_at": from_epoch_ms(self.created_at_ms),
            "updated_at": from_epoch_ms(self.updated_at_ms),
            "idempotency_key": self.idempotency_key,
            "payload": thaw(self.payload_json),
            "tenant_id": self.tenant_id,
            "concurrency_key": self.concurrency_key,
            "last_error": thaw(self.last_error_json),
            "progress": thaw(self.progress_json),
            "result": thaw(self.result_json),
            "worker_id": self.worker_id,
            "lease_expires_at": (
                None
                if self.lease_expires_at_ms is None
                else from_epoch_ms(self.lease_expires_at_ms)
            ),
            "finished_at": None
            if self.finished_at_ms is None
            else from_epoch_ms(self.finished_at_ms),
            "crashes": self.crashes,
        }


@dataclass(slots=True)
class MemWorker:
    id: str
    host: str
    started_at_ms: int
    queues: tuple[str, ...]
    slots: int | None
    visibility_timeout_ms: int
    in_flight: tuple[str, ...] = ()
    last_heartbeat_ms: int = 0

    def expired(self, now_ms: int) -> bool:
        return self.last_heartbeat_ms + self.visibility_timeout_ms <= now_ms


def lapse_verdict(worker: MemWorker | None, row: MemRow, now_ms: int) -> str:
    """What a lapsed lease of ``row`` is (Postgres: ``sql/queries/crashes.sql``): ``'crash'``
    when its worker is known dead (its registry row expired), ``'defer'`` while the worker's
    live registry row names it in flight (for at most one more window past the lease), else
    ``'attempt'`` (no registry row: a hand-driven claim)."""
    if worker is None:
        return "attempt"
    if worker.expired(now_ms):
        return "crash"
    lapsed_at = row.lease_expires_at_ms or 0
    if row.id in worker.in_flight and lapsed_at + worker.visibility_timeout_ms > now_ms:
        return "defer"
    return "attempt"


@dataclass
class MemoryState:
    """Everything one memory driver holds. Gone with the process."""

    clock: Clock | None = None
    rows: dict[str, MemRow] = field(default_factory=dict)
    steps: dict[str, dict[str, MemStep]] = field(default_factory=dict)
    live_keys: dict[LiveKey, str] = field(default_factory=dict)
    live_ids: set[str] = field(default_factory=set)
    paused_queues: set[str] = field(default_factory=set)
    paused_tasks: set[str] = field(default_factory=set)
    task_fires: dict[str, tuple[int, int]] = field(default_factory=dict)
    workers: dict[str, MemWorker] = field(default_factory=dict)
    counters: CounterBook = field(default_factory=CounterBook)
    settle_watchers: dict[str, list[asyncio.Future[None]]] = field(default_factory=dict)
    """``job.result`` waiters by job id, resolved when the row reaches a terminal state."""

    def now_ms(self) -> int:
        """The driver's clock: the one it was given, else the ambient one read at each call."""
        return (self.clock or current_clock()).now_ms()

    def insert(self, row: MemRow) -> None:
        self.rows[row.id] = row
        if row.live:
            self.live_keys[row.live_key] = row.id
            self.live_ids.add(row.id)

    def move(self, row: MemRow, state: JobState, now_ms: int) -> None:
        """Change ``row.state``, keeping the live-key index exact."""
        was_live = row.live
        row.state = state
        row.updated_at_ms = now_ms
        if state in TERMINAL_STATES and self.settle_watchers:
            for future in self.settle_watchers.pop(row.id, ()):
                if not future.done():
                    future.set_result(None)
        if was_live and not row.live:
            if self.live_keys.get(row.live_key) == row.id:
                del self.live_keys[row.live_key]
            self.live_ids.discard(row.id)
        elif row.live and not was_live:
            self.live_keys[row.live_key] = row.id
            self.live_ids.add(row.id)

    def delete(self, row: MemRow) -> None:
        if row.live and self.live_keys.get(row.live_key) == row.id:
            del self.live_keys[row.live_key]
        self.live_ids.discard(row.id)
        self.rows.pop(row.id, None)
        self.steps.pop(row.id, None)

    def live_holder(self, key: LiveKey) -> MemRow | None:
        holder = self.live_keys.get(key)
        return None if holder is None else self.rows.get(holder)
