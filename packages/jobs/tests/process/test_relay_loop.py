"""relay_loop / run_jobs(relay=True): the relay runs passes until stopped, publishing what is
staged; its settings are refused when malformed. On the memory driver and outbox store."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from pydantic import BaseModel

from ultimat3.core import XError, swap_adapter, use_connection
from ultimat3.jobs import job, relay_loop, run_jobs
from ultimat3.jobs._process.relay_loop import relay_pause
from ultimat3.jobs.adapter import OUTBOX_STORE
from ultimat3.jobs.memory import MemoryTransaction, memory_job_driver, memory_outbox_store


class N(BaseModel):
    n: int


async def _noop(input: N, step: Any, ctx: Any) -> None:
    return None


staged_job = job(input=N, idempotency_key=lambda i: f"rl:{i.n}", name="rl.staged", run=_noop)


async def test_run_jobs_relay_publishes_staged_rows_until_the_block_ends() -> None:
    driver = memory_job_driver()
    store = memory_outbox_store()
    with swap_adapter(OUTBOX_STORE, store):
        async with run_jobs(jobs=[staged_job], driver=driver, worker=False, relay=True) as running:
            with MemoryTransaction() as tx, use_connection(tx):
                await staged_job.enqueue_many([{"n": i} for i in range(3)])
            for _ in range(1000):
                if not store.unpublished():
                    break
                await asyncio.sleep(0.01)
            assert store.unpublished() == []
            assert running.relay is not None and running.relay.stats().published == 3
        assert running.relay.stats().running is False
    assert len(await driver.introspect.list(name="rl.staged")) == 3


@pytest.mark.parametrize(
    "kwargs",
    [{"interval_ms": 0}, {"batch_size": -1}, {"interval_ms": 500, "idle_poll_max_ms": 100}],
)
def test_relay_loop_refuses_bad_settings(kwargs: dict[str, Any]) -> None:
    with pytest.raises(XError) as caught:
        relay_loop(**kwargs)
    assert caught.value.code == "X_CONFIG_INVALID"


def test_an_idle_relay_doubles_its_pause_from_200_ms_to_the_ceiling() -> None:
    waits: list[float] = []
    idle = 0.2
    for _ in range(7):
        wait, idle = relay_pause(found=0, idle_s=idle, interval_s=0.2, ceiling_s=2.0)
        waits.append(wait)
    assert waits == [0.2, 0.4, 0.8, 1.6, 2.0, 2.0, 2.0]
    wait, idle = relay_pause(found=3, idle_s=idle, interval_s=0.2, ceiling_s=2.0)
    assert (wait, idle) == (0.2, 0.2), "a pass that found rows resets the pause"
    wait, _ = relay_pause(found=0, idle_s=5.0, interval_s=0.2, ceiling_s=2.0)
    assert wait == 2.0, "a lowered ceiling (the wake lost its proof) applies at once"


class Counting:
    """The memory outbox, counting its claims."""

    def __init__(self) -> None:
        self.inner = memory_outbox_store()
        self.claims = 0

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)

    async def claim_batch(self, *, limit: int, lease_ms: int) -> Any:
        self.claims += 1
        return await self.inner.claim_batch(limit=limit, lease_ms=lease_ms)


async def test_an_idle_loop_backs_off() -> None:
    store = Counting()
    loop = relay_loop(store=store, driver=memory_job_driver(), interval_ms=10, idle_poll_max_ms=80)
    await loop.start()
    try:
        await asyncio.sleep(0.6)
        # 10 + 20 + 40 + 80 + 80 ... : about 9 passes in 0.6 s, where a fixed 10 ms poll makes 60
        assert 3 <= store.claims <= 20
    finally:
        await loop.stop()
    assert loop.stats().running is False


async def test_a_wake_passes_an_idle_loop_at_once() -> None:
    store = Counting()
    loop = relay_loop(
        store=store,
        driver=memory_job_driver(),
        interval_ms=30_000,
        idle_poll_max_ms=60_000,
    )
    await loop.start()
    try:
        for _ in range(200):
            if store.claims:
                break
            await asyncio.sleep(0.005)
        assert store.claims == 1  # the first pass; the next poll is 30 s away
        loop.wake()
        for _ in range(400):
            if store.claims > 1:
                break
            await asyncio.sleep(0.005)
        assert store.claims == 2 and loop.stats().wakes == 1
    finally:
        await loop.stop()
