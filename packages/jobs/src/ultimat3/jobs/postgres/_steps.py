"""``StepStore`` over ``x_job_steps``: one row per ``(job_id, name)``, fenced writes, and the
claim's knowledge of which runs have no step yet (their first load costs no round trip)."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
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


@dataclass(frozen=True, slots=True)
class _StepRow:
    job_id: str
    name: str
    state: StepState
    output: str
    error: str | None
    worker_id: str
    claim: str


class _StepBatch:
    """The step records of every run of the process made in one event-loop turn, sent as ONE
    statement (``step_record_many``; a lone record goes as ``step_record``): a run borrows a
    pool connection for the statement and holds none between its steps, and a thousand runs
    recording at once cost a few statements, not a thousand. Each record stays fenced on its own
    ``(worker_id, claim)`` and each caller hears whether its own landed."""

    __slots__ = ("_db", "_pending", "_tasks")

    def __init__(self, db: Database) -> None:
        self._db = db
        self._pending: dict[tuple[str, str], tuple[_StepRow, asyncio.Future[bool]]] | None = None
        self._tasks: set[asyncio.Task[None]] = set()

    async def submit(self, row: _StepRow) -> bool:
        loop = asyncio.get_running_loop()
        future: asyncio.Future[bool] = loop.create_future()
        key = (row.job_id, row.name)
        pending = self._pending
        if pending is None or key in pending:  # the same step again: a batch of its own
            if pending is not None:
                self._flush()
            pending = self._pending = {}
            loop.call_soon(self._flush)
        pending[key] = (row, future)
        return await future

    def _flush(self) -> None:
        batch, self._pending = self._pending, None
        if not batch:
            return
        task = asyncio.ensure_future(self._send(list(batch.values())))
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def _send(self, items: list[tuple[_StepRow, asyncio.Future[bool]]]) -> None:
        try:
            if len(items) == 1:
                landed = [await self._one(items[0][0])]
            else:
                landed = await self._many([row for row, _ in items])
        except BaseException as exc:
            for _, future in items:
                if not future.done():
                    future.set_exception(exc)
            if not isinstance(exc, Exception):
                raise
            return
        for (_, future), ok in zip(items, landed, strict=True):
            if not future.done():
                future.set_result(ok)

    async def _one(self, row: _StepRow) -> bool:
        n = await self._db.fetchone(
            "step_record",
            {
                "job_id": row.job_id,
                "name": row.name,
                "state": row.state,
                "executions": 1 if row.state in ("completed", "failed") else 0,
                "output": row.output,
                "error": row.error,
                "worker_id": row.worker_id,
                "claim": row.claim,
            },
            what=f"recording step {row.name!r} of job {row.job_id}",
        )
        return bool(n and n[0])

    async def _many(self, rows: list[_StepRow]) -> list[bool]:
        parts = [
            "["
            + ",".join(
                (
                    json.dumps(r.job_id),
                    json.dumps(r.name),
                    json.dumps(r.state),
                    "1" if r.state in ("completed", "failed") else "0",
                    f"[{r.output}]",
                    "null" if r.error is None else f"[{r.error}]",
                    json.dumps(r.worker_id),
                    json.dumps(r.claim),
                )
            )
            + "]"
            for r in rows
        ]
        written = await self._db.fetchall(
            "step_record_many",
            {"rows": "[" + ",".join(parts) + "]"},
            what=f"recording {len(rows)} steps of {len({r.job_id for r in rows})} jobs",
        )
        landed = {(w[0], w[1]) for w in written}
        return [(r.job_id, r.name) in landed for r in rows]


class PostgresStepStore:
    """``StepStore`` over ``x_job_steps``: one row per ``(job_id, name)``, fenced writes."""

    def __init__(self, db: Database, stepless: Stepless | None = None) -> None:
        self._db = db
        self._stepless = stepless if stepless is not None else Stepless()
        self._batch = _StepBatch(db)

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
        return await self._batch.submit(
            _StepRow(job_id, name, state, output_json, error_json, worker_id, claim)
        )

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
