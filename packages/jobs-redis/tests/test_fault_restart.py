"""Faults on a redis-server of the test's own (append-only, fsync on every write): a restart in
the middle of an enqueue run loses no acknowledged enqueue; while it is down every enqueue is
X_DRIVER_UNAVAILABLE at once; the driver reconnects by itself once the server is back; a run whose
worker died mid-step is recovered after the restart as on Postgres (its lease lapses, the next
claim hands it out again with its completed steps)."""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Callable
from typing import Any

import pytest

from ultimat3.core import XError
from ultimat3.jobs.adapter import EnqueueRequest, job_cursor
from ultimat3.jobs_redis import RedisJobDriver, redis_job_driver


async def until(what: str, ready: Callable[[], bool], *, seconds: float = 30) -> None:
    """Poll ``ready`` every 10 ms; fail naming ``what`` after ``seconds``."""
    for _ in range(int(seconds * 100)):
        if ready():
            return
        await asyncio.sleep(0.01)
    raise AssertionError(f"waited {seconds}s for {what}")


async def stored_ids(driver: RedisJobDriver) -> set[str]:
    stored: set[str] = set()
    after = None
    while page := await driver.introspect.list(limit=200, after=after):
        stored.update(row.id for row in page)
        after = job_cursor(page[-1])
    return stored


@pytest.mark.parametrize("how", ["kill -9", "SIGTERM"])
async def test_a_restart_mid_run_loses_no_acknowledged_enqueue(
    redis_server: Any, req: Callable[..., EnqueueRequest], how: str
) -> None:
    driver = redis_job_driver(redis_server.url)
    acknowledged: set[str] = set()
    attempted: set[str] = set()
    refusals: list[float] = []
    codes: set[str] = set()
    stop = asyncio.Event()

    async def enqueue_loop() -> None:
        i = 0
        while not stop.is_set():
            i += 1
            size = 20 if i % 5 == 0 else 1
            batch = [req(key=f"k-{i}-{j}", payload={"i": i, "j": j}) for j in range(size)]
            attempted.update(r.id for r in batch)
            started = time.monotonic()
            try:
                if size == 1:
                    results = [await driver.enqueue(batch[0])]
                else:
                    results = await driver.enqueue_many(batch)
            except XError as exc:
                codes.add(exc.code)
                refusals.append(time.monotonic() - started)
                await asyncio.sleep(0.005)
                continue
            assert [r.id for r in results] == [r.id for r in batch]
            acknowledged.update(r.id for r in results)

    task = asyncio.create_task(enqueue_loop())
    try:
        await until("300 enqueues", lambda: len(acknowledged) >= 300)
        await asyncio.to_thread(redis_server.kill if how == "kill -9" else redis_server.stop)
        await until("5 refusals", lambda: len(refusals) >= 5)
        await asyncio.to_thread(redis_server.start)
        before = len(acknowledged)
        await until("300 more enqueues", lambda: len(acknowledged) >= before + 300)
    finally:
        stop.set()
        with contextlib.suppress(XError):
            await task
    try:
        assert codes == {"X_DRIVER_UNAVAILABLE"}
        assert max(refusals) < 1.0, f"a refusal while Redis was down took {max(refusals):.2f}s"
        stored = await stored_ids(driver)
        lost = acknowledged - stored
        assert not lost, f"{len(lost)} acknowledged enqueues were lost, e.g. {sorted(lost)[:3]}"
        assert stored <= attempted
        stats = await driver.stats()
        assert sum(s.ready for s in stats) == len(stored)
    finally:
        await driver.close()


async def test_a_run_cut_off_mid_step_by_a_crash_resumes_after_the_restart(
    redis_server: Any, req: Callable[..., EnqueueRequest]
) -> None:
    driver = redis_job_driver(redis_server.url)
    try:
        queued = await driver.enqueue(req(max_attempts=3))
        first = (
            await driver.claim(
                queues=["default"], limit=1, worker_id="doomed", visibility_timeout_ms=300
            )
        )[0]
        assert await driver.steps.record(
            first.id, "charge", state="completed", worker_id="doomed", claim=first.claim,
            output={"charged": 42},
        )  # fmt: skip
        # The worker dies in its next step, and the server goes down hard with it.
        await asyncio.to_thread(redis_server.kill)
        with pytest.raises(XError) as caught:
            await driver.heartbeat(
                first.id, worker_id="doomed", claim=first.claim, visibility_timeout_ms=300
            )
        assert caught.value.code == "X_DRIVER_UNAVAILABLE"
        await asyncio.to_thread(redis_server.start)
        await asyncio.sleep(0.5)
        again = await driver.claim(
            queues=["default"], limit=1, worker_id="heir", visibility_timeout_ms=30_000
        )
        assert [j.id for j in again] == [queued.id]
        assert again[0].attempt == 2
        steps = await driver.steps.load(queued.id)
        assert steps["charge"].state == "completed"
        assert steps["charge"].output == {"charged": 42}
        assert not await driver.ack(first.id, worker_id="doomed", claim=first.claim)
        assert await driver.ack(again[0].id, worker_id="heir", claim=again[0].claim)
        assert (await driver.introspect.show(queued.id)).state == "done"
    finally:
        await driver.close()
