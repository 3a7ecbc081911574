"""How the worker sizes and times its claims: without a cap a claim that comes back full doubles
the next (up to ``CLAIM_GROWTH * claim_batch``) while the runs end before the next pass, and a
short one starts again from ``claim_batch``; the next claim goes out while the settles of the last
batch are still out; a run still in its body holds the size where it is; a capped worker never
asks past its room. On the memory driver and on Postgres (``engine``)."""

from __future__ import annotations

import asyncio
import itertools
import time
from collections.abc import Callable, Sequence
from typing import Any

import pytest
from pydantic import BaseModel

from ultimat3.jobs import JobContext, Step, job, job_worker
from ultimat3.jobs._process.worker import CLAIM_GROWTH
from ultimat3.jobs.adapter import AckRequest
from ultimat3_testkit.engine_drivers import Engine, EngineDriver


class N(BaseModel):
    n: int


@pytest.fixture
def driver(engine: Engine) -> EngineDriver:
    """The memory driver, then Postgres: installed as JOB_DRIVER."""
    return engine.driver


class Spy:
    """The driver, recording every claim (asked, got, acks still out) and holding ``ack_many``
    while ``acks_open`` is clear."""

    def __init__(self, inner: EngineDriver) -> None:
        self.inner = inner
        self.claims: list[tuple[int, int, int]] = []
        self.acks_out = 0
        self.acks_open = asyncio.Event()
        self.acks_open.set()

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)

    async def claim(self, *, limit: int, **kw: Any) -> Any:
        out = self.acks_out
        got = await self.inner.claim(limit=limit, **kw)
        self.claims.append((limit, len(got), out))
        return got

    async def ack_many(self, acks: Sequence[AckRequest], *, worker_id: str) -> list[bool]:
        self.acks_out += 1
        try:
            await self.acks_open.wait()
            return await self.inner.ack_many(acks, worker_id=worker_id)
        finally:
            self.acks_out -= 1


async def until(check: Callable[[], bool], timeout_s: float = 10.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not check():
        assert time.monotonic() < deadline, "timed out waiting"
        await asyncio.sleep(0.005)


def noop(name: str, hold: asyncio.Event | None = None) -> Any:
    async def body(input: N, step: Step, ctx: JobContext) -> None:
        if hold is not None and input.n == 0:
            await hold.wait()

    return job(input=N, idempotency_key=lambda i: str(i.n), name=name, run=body)


async def test_a_backlog_of_short_runs_doubles_the_claims_up_to_the_ceiling(
    driver: EngineDriver,
) -> None:
    short = noop("short")
    await short.enqueue_many([{"n": n} for n in range(400)])
    spy = Spy(driver)
    worker = job_worker(
        jobs=[short],
        driver=spy,
        claim_batch=4,
        poll_interval_ms=2000,  # every pass below is the worker's own, not a poll's
        idle_poll_max_ms=2000,
        handle_signals=False,
    )
    await worker.start()
    try:
        await until(lambda: worker.stats().completed == 400)
    finally:
        await worker.stop()
    asked = [limit for limit, _, _ in spy.claims]
    ceiling = CLAIM_GROWTH * 4
    assert asked[0] == 4 and max(asked) == ceiling
    full = [(limit, got) for limit, got, _ in spy.claims if got == limit]
    for (before, _), (after, _) in itertools.pairwise(full):
        assert after in (before, min(2 * before, ceiling))  # kept or doubled, never more
    first_short = next(i for i, (limit, got, _) in enumerate(spy.claims) if got < limit)
    assert all(limit == 4 for limit, _, _ in spy.claims[first_short + 1 :])  # from the start


async def test_the_next_claim_goes_out_while_the_acks_are_still_out(driver: EngineDriver) -> None:
    short = noop("pipelined")
    await short.enqueue_many([{"n": n} for n in range(30)])
    spy = Spy(driver)
    spy.acks_open.clear()  # every ack_many hangs until the test lets it through
    worker = job_worker(
        jobs=[short],
        driver=spy,
        claim_batch=10,
        poll_interval_ms=2000,
        idle_poll_max_ms=2000,
        handle_signals=False,
    )
    await worker.start()
    try:
        await until(lambda: len(spy.claims) >= 2)
        # the second claim went out with no run of the first batch settled: not after its acks
        assert spy.claims[0][:2] == (10, 10)
        assert worker.stats().completed == 0 and worker.stats().claimed >= 20
        await until(lambda: spy.acks_out >= 1)  # the first batch's acks are out, held
        spy.acks_open.set()
        await until(lambda: worker.stats().completed == 30)
    finally:
        spy.acks_open.set()
        await worker.stop()


async def test_a_run_still_in_its_body_holds_the_claim_size(driver: EngineDriver) -> None:
    hold = asyncio.Event()
    mixed = noop("mixed", hold)
    await mixed.enqueue_many([{"n": n} for n in range(60)])
    spy = Spy(driver)
    worker = job_worker(
        jobs=[mixed],
        driver=spy,
        claim_batch=5,
        poll_interval_ms=2000,
        idle_poll_max_ms=2000,
        handle_signals=False,
    )
    await worker.start()
    try:
        await until(lambda: worker.stats().completed == 59)  # all but the held one
        held = list(spy.claims)
        hold.set()
        await until(lambda: worker.stats().completed == 60)
    finally:
        hold.set()
        await worker.stop()
    # job 0 sat in its body the whole time: the runs never all ended, so no claim grew
    assert {limit for limit, _, _ in held} == {5}


async def test_a_capped_worker_never_asks_past_its_room(driver: EngineDriver) -> None:
    short = noop("capped")
    await short.enqueue_many([{"n": n} for n in range(120)])
    spy = Spy(driver)
    worker = job_worker(
        jobs=[short],
        driver=spy,
        max_in_flight=6,
        claim_batch=2,
        poll_interval_ms=2000,
        idle_poll_max_ms=2000,
        handle_signals=False,
    )
    await worker.start()
    try:
        await until(lambda: worker.stats().completed == 120)
    finally:
        await worker.stop()
    assert spy.claims and max(limit for limit, _, _ in spy.claims) <= 6
    assert sum(got for _, got, _ in spy.claims) == 120
