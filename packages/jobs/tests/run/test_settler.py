"""Batched settles: over a driver's BatchSettler, a worker's acks and renewals coalesce."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator, Sequence
from typing import Any

import pytest
from pydantic import BaseModel

from ultimat3.core import FrozenClock, swap_adapter, use_clock
from ultimat3.jobs import job, job_worker
from ultimat3.jobs._run.ack_batcher import BatchingSettler, DirectSettler, settler_for
from ultimat3.jobs.adapter import JOB_DRIVER, AckRequest, ClaimedJob
from ultimat3.jobs.memory import MemoryJobDriver, memory_job_driver


class N(BaseModel):
    n: int


class Counting:
    """The memory driver, counting batch calls."""

    def __init__(self, inner: MemoryJobDriver) -> None:
        self.inner = inner
        self.ack_batches: list[int] = []
        self.beat_batches: list[int] = []
        self.fail_acks = False

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)

    async def ack_many(self, acks: Sequence[AckRequest], *, worker_id: str) -> list[bool]:
        self.ack_batches.append(len(acks))
        if self.fail_acks:
            raise ConnectionError("the ack statement failed")
        return await self.inner.ack_many(acks, worker_id=worker_id)

    async def heartbeat_many(
        self, leases: Sequence[tuple[str, str]], *, worker_id: str, visibility_timeout_ms: int
    ) -> list[bool]:
        self.beat_batches.append(len(leases))
        return await self.inner.heartbeat_many(
            leases, worker_id=worker_id, visibility_timeout_ms=visibility_timeout_ms
        )


@pytest.fixture
def driver() -> Iterator[MemoryJobDriver]:
    with use_clock(FrozenClock()):
        d = memory_job_driver()
        with swap_adapter(JOB_DRIVER, d):
            yield d


def test_a_driver_with_batch_settles_gets_a_batching_settler(driver: MemoryJobDriver) -> None:
    assert isinstance(settler_for(driver), BatchingSettler)

    class Plain:
        pass

    assert isinstance(settler_for(Plain()), DirectSettler)  # type: ignore[arg-type]


async def test_runs_ending_together_are_acked_in_one_call(driver: MemoryJobDriver) -> None:
    gate = asyncio.Event()

    async def body(input: N, step: Any, ctx: Any) -> int:
        await gate.wait()
        return input.n

    j = job(input=N, idempotency_key=lambda i: str(i.n), name="together", run=body)
    results = await j.enqueue_many([{"n": i} for i in range(5)])
    counting = Counting(driver)
    w = job_worker(jobs=[j], driver=counting, handle_signals=False)
    assert await w.run_pass() == 5
    await asyncio.sleep(0.01)
    gate.set()
    await w.wait_idle()
    assert counting.ack_batches == [5]
    for r in results:
        row = await driver.introspect.show(r.id)
        assert row.state == "done"
        assert row.result == row.payload["n"]


async def _claim(driver: MemoryJobDriver, count: int) -> list[ClaimedJob]:
    async def body(input: N, step: Any, ctx: Any) -> None:
        return None

    j = job(input=N, idempotency_key=lambda i: str(i.n), name="claimed", run=body)
    await j.enqueue_many([{"n": i} for i in range(count)])
    return await driver.claim(
        queues=["default"], limit=count, worker_id="w", visibility_timeout_ms=1000
    )


async def test_each_caller_gets_its_own_fenced_answer(driver: MemoryJobDriver) -> None:
    a, b = await _claim(driver, 2)
    settler = BatchingSettler(driver)
    stale = ClaimedJob(**{**{f: getattr(b, f) for f in b.__dataclass_fields__}, "claim": "old"})
    answers = await asyncio.gather(
        settler.ack(a, result=1, duration_ms=1), settler.ack(stale, result=2, duration_ms=1)
    )
    assert list(answers) == [True, False]  # gather answers a list; typeshed says a tuple
    beats = await asyncio.gather(
        settler.heartbeat(b, visibility_timeout_ms=1000),
        settler.heartbeat(a, visibility_timeout_ms=1000),  # already acked: fenced out
    )
    assert list(beats) == [True, False]


async def test_renewals_in_one_turn_are_one_call(driver: MemoryJobDriver) -> None:
    claimed = await _claim(driver, 3)
    counting = Counting(driver)
    settler = BatchingSettler(counting)
    answers = await asyncio.gather(
        *(settler.heartbeat(c, visibility_timeout_ms=1000) for c in claimed)
    )
    assert answers == [True, True, True]
    assert counting.beat_batches == [3]


async def test_a_failing_batch_fails_every_caller_in_it(driver: MemoryJobDriver) -> None:
    claimed = await _claim(driver, 2)
    counting = Counting(driver)
    counting.fail_acks = True
    settler = BatchingSettler(counting)
    answers = await asyncio.gather(
        *(settler.ack(c, result=None, duration_ms=1) for c in claimed), return_exceptions=True
    )
    assert [type(a) for a in answers] == [ConnectionError, ConnectionError]
    assert counting.ack_batches == [2]


async def test_the_runs_of_a_worker_renew_on_one_grid_in_one_call(driver: MemoryJobDriver) -> None:
    async def body(input: N, step: Any, ctx: Any) -> None:
        await asyncio.sleep(0.25)

    j = job(input=N, idempotency_key=lambda i: str(i.n), name="held", run=body)
    await j.enqueue_many([{"n": i} for i in range(3)])
    counting = Counting(driver)
    w = job_worker(
        jobs=[j],
        driver=counting,
        visibility_timeout_ms=150,
        handle_signals=False,
    )
    assert await w.run_pass() == 3
    await w.wait_idle()
    # runs claimed together renew together (a claim straddling a grid point renews once early)
    assert counting.beat_batches.count(3) >= 2
    assert sum(counting.beat_batches) <= 3 * len(counting.beat_batches)
