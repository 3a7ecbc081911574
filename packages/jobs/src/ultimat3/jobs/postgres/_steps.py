"""``StepStore`` over ``x_job_steps``: one row per ``(job_id, name)``, fenced writes, and the
claim's knowledge of which runs have no step yet (their first load costs no round trip)."""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping
from typing import Any, Final

from ultimat3.core import XError, is_lowercase_uuid, use_connection
from ultimat3.jobs.adapter import Stepless, StepRecord, StepState
from ultimat3.jobs.postgres._db import Database
from ultimat3.jobs.postgres._rows import (
    check_text,
    fenced_ids,
    json_or_none,
    step_record,
    to_json_text,
)


class _Fenced(Exception):
    """Inside ``record_in_transaction``: the fence failed, so the transaction rolls back."""


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

    async def record_in_transaction(
        self,
        job_id: str,
        name: str,
        *,
        worker_id: str,
        claim: str,
        fn: Callable[[Any], Awaitable[Any]],
    ) -> tuple[bool, Any]:
        """``fn(conn)`` and the step's ``completed`` record in ONE transaction on a pool
        connection (ambient for ``fn``, so an enqueue inside it joins too): both commit, or
        neither. The fence (``FOR SHARE`` on the job row) holds the run until the commit."""
        check_text(name, what=f"job {job_id}: the step name")
        if not fenced_ids(job_id, claim):
            return False, None
        self._stepless.discard(job_id)
        try:
            async with self._db.transaction(f"step.transaction {name!r} of job {job_id}") as conn:
                with use_connection(conn):
                    output = await fn(conn)
                output_json = to_json_text(
                    output,
                    what=f"job {job_id} step {name!r} output",
                    code="X_STEP_OUTPUT_UNSERIALIZABLE",
                )
                n = await self._db.fetchone(
                    "step_record",
                    {
                        "job_id": job_id,
                        "name": name,
                        "state": "completed",
                        "executions": 1,
                        "output": output_json,
                        "error": None,
                        "worker_id": worker_id,
                        "claim": claim,
                    },
                    conn=conn,
                    what=f"recording step {name!r} of job {job_id}",
                )
                if not (n and n[0]):
                    raise _Fenced  # the claim is gone: roll fn's writes back with the record
        except _Fenced:
            return False, None
        return True, output
