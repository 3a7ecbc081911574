"""How a run's acks and lease renewals reach the driver: one call each, or — when the driver
implements the optional ``BatchSettler`` (``ack_many`` / ``heartbeat_many``) — coalesced with the
other runs of the same worker that settle or renew in the same event-loop turn, one round trip for
all of them. Heartbeats tick on a grid shared by every run of the process, so they coalesce.

Every item stays fenced exactly like its single form, and each caller gets its own answer.
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, Generic, TypeVar

from ultimat3.jobs.adapter import AckRequest, BatchSettler, ClaimedJob

if TYPE_CHECKING:
    from ultimat3.jobs.adapter import JobDriver

T = TypeVar("T")


class DirectSettler:
    """One driver call per ack and per renewal."""

    __slots__ = ("_driver",)

    def __init__(self, driver: JobDriver) -> None:
        self._driver = driver

    async def ack(self, claimed: ClaimedJob, *, result: Any, duration_ms: int) -> bool:
        return await self._driver.ack(
            claimed.id,
            worker_id=claimed.worker_id,
            claim=claimed.claim,
            result=result,
            duration_ms=duration_ms,
        )

    async def heartbeat(self, claimed: ClaimedJob, *, visibility_timeout_ms: int) -> bool:
        return await self._driver.heartbeat(
            claimed.id,
            worker_id=claimed.worker_id,
            claim=claimed.claim,
            visibility_timeout_ms=visibility_timeout_ms,
        )


class _Coalescer(Generic[T]):
    """Collects the items submitted in one event-loop turn and sends them in one call."""

    __slots__ = ("_pending", "_scheduled", "_send", "_tasks")

    def __init__(self, send: Any) -> None:
        self._send = send
        self._pending: list[tuple[str, T, asyncio.Future[bool]]] = []
        self._scheduled = False
        self._tasks: set[asyncio.Task[None]] = set()

    async def submit(self, worker_id: str, item: T) -> bool:
        loop = asyncio.get_running_loop()
        future: asyncio.Future[bool] = loop.create_future()
        self._pending.append((worker_id, item, future))
        if not self._scheduled:
            self._scheduled = True
            loop.call_soon(self._flush_soon)
        return await future

    def _flush_soon(self) -> None:
        self._scheduled = False
        batch, self._pending = self._pending, []
        by_worker: dict[str, list[tuple[T, asyncio.Future[bool]]]] = {}
        for worker_id, item, future in batch:
            by_worker.setdefault(worker_id, []).append((item, future))
        for worker_id, items in by_worker.items():
            task = asyncio.ensure_future(self._flush(worker_id, items))
            self._tasks.add(task)
            task.add_done_callback(self._tasks.discard)

    async def _flush(self, worker_id: str, items: Sequence[tuple[T, asyncio.Future[bool]]]) -> None:
        try:
            answers: list[bool] = await self._send([item for item, _ in items], worker_id)
        except BaseException as exc:
            for _, future in items:
                if not future.done():
                    future.set_exception(exc)
            if not isinstance(exc, Exception):
                raise
            return
        for (_, future), landed in zip(items, answers, strict=True):
            if not future.done():
                future.set_result(bool(landed))


class BatchingSettler:
    """Acks and renewals of one worker, coalesced per event-loop turn over ``BatchSettler``."""

    __slots__ = ("_acks", "_beats", "_driver")

    def __init__(self, driver: BatchSettler) -> None:
        self._driver = driver
        self._acks: _Coalescer[AckRequest] = _Coalescer(self._send_acks)
        self._beats: dict[int, _Coalescer[tuple[str, str]]] = {}

    async def _send_acks(self, acks: list[AckRequest], worker_id: str) -> list[bool]:
        return await self._driver.ack_many(acks, worker_id=worker_id)

    async def ack(self, claimed: ClaimedJob, *, result: Any, duration_ms: int) -> bool:
        request = AckRequest(claimed.id, claimed.claim, result=result, duration_ms=duration_ms)
        return await self._acks.submit(claimed.worker_id, request)

    async def heartbeat(self, claimed: ClaimedJob, *, visibility_timeout_ms: int) -> bool:
        coalescer = self._beats.get(visibility_timeout_ms)
        if coalescer is None:

            async def send(leases: list[tuple[str, str]], worker_id: str) -> list[bool]:
                return await self._driver.heartbeat_many(
                    leases, worker_id=worker_id, visibility_timeout_ms=visibility_timeout_ms
                )

            coalescer = self._beats[visibility_timeout_ms] = _Coalescer(send)
        return await coalescer.submit(claimed.worker_id, (claimed.id, claimed.claim))


Settler = DirectSettler | BatchingSettler


def settler_for(driver: JobDriver) -> Settler:
    """A batching settler when the driver implements ``BatchSettler``, else a direct one."""
    if isinstance(driver, BatchSettler):
        return BatchingSettler(driver)
    return DirectSettler(driver)
