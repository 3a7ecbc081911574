"""The memory driver's ``StepStore``, and the fence every memory write goes through."""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping
from typing import Any, Final

from ultimat3.core import XError
from ultimat3.jobs.adapter import StepRecord, StepState

from ._outbox import MemoryTransaction
from ._state import MemoryState, MemRow, MemStep, freeze

STEP_STATES: Final[tuple[StepState, ...]] = ("started", "completed", "failed")


def held(state: MemoryState, job_id: str, worker_id: str, claim: str) -> MemRow | None:
    """The row, when ``(worker_id, claim)`` still holds it; ``None`` is a fenced miss."""
    row = state.rows.get(job_id)
    if row is None or row.state != "running":
        return None
    if row.worker_id != worker_id or row.claim != claim:
        return None
    return row


class MemoryStepStore:
    """``StepStore`` over the driver's dicts: one record per ``(job_id, step name)``."""

    def __init__(self, state: MemoryState) -> None:
        self._s = state

    async def load(self, job_id: str) -> dict[str, StepRecord]:
        return {name: step.record() for name, step in self._s.steps.get(job_id, {}).items()}

    async def record(
        self,
        job_id: str,
        name: str,
        *,
        state: StepState,
        worker_id: str,
        claim: str,
        output: Any = None,
        error: Mapping[str, Any] | None = None,
    ) -> bool:
        if state not in STEP_STATES:
            raise XError(
                "X_INVARIANT",
                f"job {job_id} step {name!r}: {state!r} is not a step state",
                fix="record 'started', 'completed' or 'failed'",
            )
        if not name:
            raise XError("X_INVARIANT", f"job {job_id}: a step name is empty", fix="name the step")
        if held(self._s, job_id, worker_id, claim) is None:
            return False
        steps = self._s.steps.setdefault(job_id, {})
        rec = steps.get(name)
        if rec is not None and rec.state == "completed":
            return False
        output_json = freeze(
            output,
            what=f"job {job_id} step {name!r} output",
            code="X_STEP_OUTPUT_UNSERIALIZABLE",
        )
        error_json = None if error is None else freeze(error, what=f"job {job_id} step error")
        now = self._s.now_ms()
        counted = 1 if state in ("completed", "failed") else 0
        if rec is None:
            steps[name] = MemStep(name, state, counted, output_json, error_json, now)
        else:
            rec.state = state
            rec.executions += counted
            rec.output_json = output_json
            rec.error_json = error_json
            rec.updated_at_ms = now
        return True

    async def record_in_transaction(
        self,
        job_id: str,
        name: str,
        *,
        worker_id: str,
        claim: str,
        fn: Callable[[Any], Awaitable[Any]],
    ) -> tuple[bool, Any]:
        """The memory equivalent: ``fn`` gets a ``MemoryTransaction``, committed with the
        step's record the moment ``fn`` returns (no await between: the store is one event loop)
        and rolled back when ``fn`` raises or the claim was lost."""
        if held(self._s, job_id, worker_id, claim) is None:
            return False, None
        txn = MemoryTransaction()
        try:
            output = await fn(txn)
        except BaseException:
            txn.rollback()
            raise
        landed = await self.record(
            job_id, name, state="completed", worker_id=worker_id, claim=claim, output=output
        )
        if not landed:
            txn.rollback()
            return False, None
        txn.commit()
        return True, output
