"""Acks on Postgres: fenced, the done counter moved in the same statement, and acks made at the
same moment sharing ONE ``ack_many`` statement (one commit) while each caller still hears whether
its own ack landed."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from ultimat3.jobs.adapter import ENQUEUE_CHUNK, AckRequest, Stepless
from ultimat3.jobs.postgres._db import Database
from ultimat3.jobs.postgres._rows import fenced_ids, ms_param, to_json_text


@dataclass(slots=True)
class PendingAck:
    job_id: str
    claim: str
    result_json: str
    duration_ms: int | None
    landed: asyncio.Future[bool] | None


class AckBatcher:
    """Coalesces the acks of one event loop into ``ack_many`` statements, one worker at a time."""

    def __init__(self, db: Database, stepless: Stepless) -> None:
        self._db = db
        self._stepless = stepless
        self._acks: dict[str, list[PendingAck]] = {}
        self._ack_flusher: asyncio.Task[None] | None = None

    async def idle(self) -> None:
        """Wait for the acks still pending (the driver's close)."""
        flusher = self._ack_flusher
        if flusher is not None and not flusher.done():
            with contextlib.suppress(Exception):
                await flusher

    async def ack(
        self,
        job_id: str,
        *,
        worker_id: str,
        claim: str,
        result: Any = None,
        duration_ms: int | None = None,
    ) -> bool:
        """Fenced; the done counter moves in the same statement. Acks made at the same moment
        (the runs of one batch ending together) share ONE ``ack_many`` statement: each caller
        still hears whether its own ack landed."""
        result_json = to_json_text(
            result, what=f"the result of job {job_id}", code="X_STEP_OUTPUT_UNSERIALIZABLE"
        )
        duration = ms_param(duration_ms, what=f"ack of job {job_id}: duration_ms")
        if not fenced_ids(job_id, claim):
            return False
        self._stepless.discard(job_id)
        loop = asyncio.get_running_loop()
        landed: asyncio.Future[bool] = loop.create_future()
        flusher = self._ack_flusher
        if flusher is not None and flusher.get_loop() is not loop:
            self._acks.clear()  # a previous event loop's leftovers (it is gone)
            flusher = None
        self._acks.setdefault(worker_id, []).append(
            PendingAck(job_id, claim, result_json, duration, landed)
        )
        if flusher is None or flusher.done():
            self._ack_flusher = loop.create_task(self._flush_acks(), name="ultimat3.jobs.acks")
        return await landed

    async def _flush_acks(self) -> None:
        """Send every pending ack, one ``ack_many`` statement per worker (and per 1,000); acks
        arriving while a statement is out join the next one."""
        while self._acks:
            pending, self._acks = self._acks, {}
            for worker_id, items in pending.items():
                for at in range(0, len(items), ENQUEUE_CHUNK):
                    chunk = items[at : at + ENQUEUE_CHUNK]
                    try:
                        landed = await self._ack_prepared(chunk, worker_id)
                    except BaseException as exc:  # every waiter hears it, the flusher goes on
                        for item in chunk:
                            if item.landed is not None and not item.landed.done():
                                item.landed.set_exception(exc)
                        if not isinstance(exc, Exception):
                            raise
                        continue
                    for item in chunk:
                        if item.landed is not None and not item.landed.done():
                            item.landed.set_result(item.job_id in landed)

    async def _ack_prepared(self, items: Sequence[PendingAck], worker_id: str) -> set[str]:
        """ONE statement: the acks of one worker; answers the ids whose ack landed."""
        # ids and claims are checked lowercase UUIDs and results JSON text already: the array
        # is joined as text, with no second encoding of the results
        doc = (
            "["
            + ",".join(
                f'["{a.job_id}","{a.claim}",{a.result_json},'
                f"{'null' if a.duration_ms is None else int(a.duration_ms)}]"
                for a in items
            )
            + "]"
        )
        rows = await self._db.fetchall(
            "ack_many",
            {"rows": doc, "worker_id": worker_id},
            what=(
                f"ack of job {items[0].job_id}"
                if len(items) == 1
                else f"ack_many of {len(items)} jobs by worker {worker_id}"
            ),
        )
        return {r[0] for r in rows}

    async def ack_many(self, acks: Sequence[AckRequest], *, worker_id: str) -> list[bool]:
        """``BatchSettler``: a batch of acks by one worker in ONE statement (one commit);
        answers, per input, whether that ack landed (each is fenced like ``ack``)."""
        if not acks:
            return []
        items = [
            PendingAck(
                a.job_id,
                a.claim,
                "null"
                if a.result is None
                else to_json_text(
                    a.result,
                    what=f"the result of job {a.job_id}",
                    code="X_STEP_OUTPUT_UNSERIALIZABLE",
                ),
                a.duration_ms
                if type(a.duration_ms) is int
                else ms_param(a.duration_ms, what=f"ack of job {a.job_id}: duration_ms"),
                None,
            )
            for a in acks
        ]
        fenced = [fenced_ids(item.job_id, item.claim) for item in items]
        live = [item for item, ok in zip(items, fenced, strict=True) if ok]
        discard = self._stepless.discard
        for item in live:
            discard(item.job_id)
        landed: set[str] = set()
        for at in range(0, len(live), ENQUEUE_CHUNK):
            landed |= await self._ack_prepared(live[at : at + ENQUEUE_CHUNK], worker_id)
        return [ok and a.job_id in landed for a, ok in zip(acks, fenced, strict=True)]
