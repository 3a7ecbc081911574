"""A run's clock is the driver's claim stamp plus the time since the claim was SENT: a claim that
is slow to come back (a loaded database) never makes ``step.sleep`` wake before its duration."""

from __future__ import annotations

import asyncio
import time
from typing import Any

from pydantic import BaseModel

from ultimat3.core import swap_adapter
from ultimat3.jobs import job, job_worker
from ultimat3.jobs.adapter import JOB_DRIVER
from ultimat3.jobs.memory import memory_job_driver

CLAIM_RETURNS_LATE_S = 0.15
SLEEP_MS = 200


class Nap(BaseModel):
    n: int


reached_ms: dict[str, float] = {}


async def _nap(input: Nap, step: Any, ctx: Any) -> None:
    reached_ms.setdefault(ctx.job_id, time.time() * 1000)  # the wall clock the driver reads
    await step.sleep(f"{SLEEP_MS}ms")


nap = job(input=Nap, idempotency_key=lambda i: f"nap:{i.n}", name="nap", run=_nap)


async def test_a_slow_claim_never_makes_a_sleep_wake_early() -> None:
    driver = memory_job_driver()
    claim = driver.claim

    async def slow_claim(**kwargs: Any) -> Any:
        claimed = await claim(**kwargs)  # stamped claimed_at_ms now ...
        await asyncio.sleep(CLAIM_RETURNS_LATE_S)  # ... and handed back late
        return claimed

    driver.claim = slow_claim  # type: ignore[method-assign]
    with swap_adapter(JOB_DRIVER, driver):
        queued = await nap.enqueue({"n": 1})
        worker = job_worker(jobs=[nap], driver=driver, handle_signals=False)
        worker.check()
        assert await worker.run_pass() == 1
        await worker.wait_idle()
        row = await driver.introspect.show(queued.id)
    assert row.state == "suspended"
    wake_at = row.steps["sleep:1"].output["wake_at_ms"]
    # counted from the claim's return, the wake would be CLAIM_RETURNS_LATE_S early
    assert wake_at - reached_ms[queued.id] >= SLEEP_MS - 2  # (two whole-ms truncations)
