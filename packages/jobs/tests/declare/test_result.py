"""``await job.result(id, timeout=)``: the stored result once the run settles — woken by the
settle (memory futures, the Postgres settle LISTEN), a dead or cancelled run raising its XError,
the timeout its own code — memory, then Postgres (``engine``)."""

from __future__ import annotations

import asyncio
import time
from typing import Any

import pytest
from pydantic import BaseModel

from ultimat3.core import XError
from ultimat3.jobs import Retry, job, job_worker
from ultimat3_testkit.engine_drivers import Engine


class N(BaseModel):
    n: int


async def _square(input: N, step: Any, ctx: Any) -> dict[str, int]:
    return {"square": input.n * input.n}


async def _declines(input: N, step: Any, ctx: Any) -> None:
    raise XError("X_INVARIANT", f"order {input.n} cannot be refunded", fix="refund by hand")


square = job(input=N, idempotency_key=lambda i: f"sq:{i.n}", name="res.square", run=_square)
declines = job(
    input=N, idempotency_key=lambda i: f"dec:{i.n}", name="res.declines",
    retry=Retry(attempts=1), run=_declines,
)  # fmt: skip


async def test_result_waits_for_the_run_and_answers_its_stored_result(engine: Engine) -> None:
    queued = await square.enqueue({"n": 7})
    waiting = asyncio.ensure_future(square.result(queued.id, timeout="20s"))
    await asyncio.sleep(0.05)
    assert not waiting.done()  # nothing ran yet
    worker = job_worker(jobs=[square], driver=engine.driver, poll_interval_ms=5)
    await worker.start()
    try:
        assert await asyncio.wait_for(waiting, timeout=25) == {"square": 49}
        assert await square.result(queued.id) == {"square": 49}  # settled: at once
    finally:
        await worker.stop()


async def test_a_dead_run_raises_its_error(engine: Engine) -> None:
    queued = await declines.enqueue({"n": 3})
    waiting = asyncio.ensure_future(declines.result(queued.id, timeout="20s"))
    await engine.harness([declines]).drain()
    with pytest.raises(XError) as caught:
        await asyncio.wait_for(waiting, timeout=25)
    assert caught.value.code == "X_INVARIANT"
    assert "order 3 cannot be refunded" in caught.value.message and "dead" in caught.value.message
    assert caught.value.meta["state"] == "dead" and caught.value.meta["job_id"] == queued.id


async def test_a_cancelled_run_raises_x_aborted(engine: Engine) -> None:
    queued = await square.enqueue({"n": 2})
    await engine.driver.introspect.cancel(queued.id, reason="not needed")
    with pytest.raises(XError) as caught:
        await square.result(queued.id, timeout="1s")
    assert caught.value.code == "X_ABORTED" and caught.value.meta["state"] == "cancelled"


async def test_the_timeout_raises_x_job_result_timeout(engine: Engine) -> None:
    queued = await square.enqueue({"n": 5})
    started = time.monotonic()
    with pytest.raises(XError) as caught:
        await square.result(queued.id, timeout="200ms")
    assert time.monotonic() - started >= 0.19
    assert caught.value.code == "X_JOB_RESULT_TIMEOUT" and caught.value.status == 504
    assert caught.value.meta == {"job_id": queued.id, "state": "ready", "timeout_ms": 200}


async def test_an_id_of_another_job_or_nobody_is_refused(engine: Engine) -> None:
    queued = await square.enqueue({"n": 6})
    with pytest.raises(XError) as other:
        await declines.result(queued.id, timeout="1s")
    assert other.value.code == "X_JOB_NOT_FOUND" and "res.square" in other.value.message
    with pytest.raises(XError) as nobody:
        await square.result("0190b5a2-7c1e-7a3b-8c4d-0123456789ab", timeout="1s")
    assert nobody.value.code == "X_JOB_NOT_FOUND"


@pytest.mark.parametrize("bad", ["soon", -1, 0, True])
async def test_a_bad_timeout_is_refused(engine: Engine, bad: Any) -> None:
    queued = await square.enqueue({"n": 8})
    with pytest.raises(XError) as caught:
        await square.result(queued.id, timeout=bad)
    assert caught.value.code == "X_DURATION_INVALID"
