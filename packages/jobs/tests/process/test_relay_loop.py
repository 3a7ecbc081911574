"""relay_loop / run_jobs(relay=True): the relay runs passes until stopped, publishing what is
staged; its settings are refused when malformed. On the memory driver and outbox store."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from pydantic import BaseModel

from ultimat3.core import XError, swap_adapter, use_connection
from ultimat3.jobs import job, relay_loop, run_jobs
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
