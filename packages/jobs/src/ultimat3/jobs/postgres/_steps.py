"""``StepStore`` over ``x_job_steps``: one row per ``(job_id, name)``, fenced writes, and the
claim's knowledge of which runs have no step yet (their first load costs no round trip)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Final

from ultimat3.core import XError, is_lowercase_uuid
from ultimat3.jobs.adapter import Stepless, StepRecord, StepState
from ultimat3.jobs.postgres._db import Database
from ultimat3.jobs.postgres._rows import (
    check_text,
    fenced_ids,
    json_or_none,
    step_record,
    to_json_text,
)

STEP_STATES: Final[tuple[StepState, ...]] = ("started", "completed", "failed")


class PostgresStepStore:
    """``StepStore`` over ``x_job_steps``: one row per ``(job_id, name)``, fenced writes."""

    def __init__(self, db: Database, stepless: Stepless | None = None) -> None:
        self._db = db
        self._stepless = stepless if stepless is not None else Stepless()

    async def load(self, job_id: str) -> dict[str, StepRecord]:
        if not is_lowercase_uuid(job_id) or job_id in self._stepless:
            return {}
        rows = await self._db.fetchall("steps_load", {"job_id": job_id})
        return {r[0]: step_record(r) for r in rows}

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
        check_text(name, what=f"job {job_id}: the step name")
        output_json = to_json_text(
            output, what=f"job {job_id} step {name!r} output", code="X_STEP_OUTPUT_UNSERIALIZABLE"
        )
        error_json = json_or_none(error, what=f"job {job_id} step {name!r} error")
        if not fenced_ids(job_id, claim):
            return False
        self._stepless.discard(job_id)
        n = await self._db.fetchone(
            "step_record",
            {
                "job_id": job_id,
                "name": name,
                "state": state,
                "executions": 1 if state in ("completed", "failed") else 0,
                "output": output_json,
                "error": error_json,
                "worker_id": worker_id,
                "claim": claim,
            },
            what=f"recording step {name!r} of job {job_id}",
        )
        return bool(n and n[0])
