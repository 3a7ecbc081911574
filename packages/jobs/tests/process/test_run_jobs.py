"""``run_jobs``: the jobs inside an app's lifespan — it installs the driver, starts what is asked,
never takes the process's signals, and drains on exit; its refusals start nothing."""

from __future__ import annotations

import asyncio
import signal
from typing import Any

import pytest
from pydantic import BaseModel

from ultimat3.core import XError, installed_adapter
from ultimat3.jobs import Retry, job, job_worker, run_jobs, task
from ultimat3.jobs.adapter import JOB_DRIVER
from ultimat3.jobs.memory import memory_job_driver


class N(BaseModel):
    n: int


async def _double(input: N, step: Any, ctx: Any) -> int:
    return input.n * 2


double = job(input=N, idempotency_key=lambda i: f"d:{i.n}", name="double", run=_double)


async def _settled(driver: Any, job_id: str, state: str = "done") -> Any:
    for _ in range(500):
        row = await driver.introspect.show(job_id)
        if row.state == state:
            return row
        await asyncio.sleep(0.01)
    raise AssertionError(f"{job_id} never reached {state}: {row.state}")


async def test_run_jobs_installs_the_driver_runs_the_jobs_and_uninstalls_it() -> None:
    driver = memory_job_driver()
    before = installed_adapter(JOB_DRIVER)
    async with run_jobs(jobs=[double], driver=driver, poll_interval_ms=5) as running:
        assert installed_adapter(JOB_DRIVER) is driver
        queued = await double.enqueue({"n": 21})
        row = await _settled(driver, queued.id)
        assert row.result == 42
        assert running.worker is not None and running.worker.stats().running
        assert running.scheduler is None and running.relay is None
    assert installed_adapter(JOB_DRIVER) is before
    assert running.worker.stats().running is False


async def test_run_jobs_never_takes_sigterm_or_sigint() -> None:
    before = {s: signal.getsignal(s) for s in (signal.SIGTERM, signal.SIGINT)}
    async with run_jobs(jobs=[double], driver=memory_job_driver()):
        assert {s: signal.getsignal(s) for s in before} == before
    assert {s: signal.getsignal(s) for s in before} == before


async def test_job_worker_takes_sigterm_only_when_asked() -> None:
    driver = memory_job_driver()
    before = signal.getsignal(signal.SIGTERM)
    plain = job_worker(jobs=[double], driver=driver)
    await plain.start()
    assert signal.getsignal(signal.SIGTERM) == before  # the default leaves the signals alone
    await plain.stop()
    owned = job_worker(jobs=[double], driver=driver, handle_signals=True)
    await owned.start()
    assert signal.getsignal(signal.SIGTERM) != before  # main thread: the loop's handler
    await owned.stop()
    assert signal.getsignal(signal.SIGTERM) == before


async def test_the_exit_drains_a_held_run_and_hands_it_back_uncounted() -> None:
    driver = memory_job_driver()
    started = asyncio.Event()
    heard: list[str] = []

    async def waits(input: N, step: Any, ctx: Any) -> None:
        started.set()
        reason = await ctx.signal.wait()
        heard.append(reason.code)
        raise reason

    waiting = job(
        input=N, idempotency_key=lambda i: f"w:{i.n}", name="waits", run=waits,
        retry=Retry(attempts=3),
    )  # fmt: skip
    async with run_jobs(jobs=[waiting], driver=driver, poll_interval_ms=5):
        queued = await waiting.enqueue({"n": 1})
        await asyncio.wait_for(started.wait(), timeout=10)
    assert heard == ["X_DRAINING"]
    row = await driver.introspect.show(queued.id)
    assert row.state == "ready" and row.attempts == 0


async def test_an_exception_in_the_block_still_drains_and_propagates() -> None:
    driver = memory_job_driver()
    with pytest.raises(RuntimeError, match="the app failed"):
        async with run_jobs(jobs=[double], driver=driver) as running:
            raise RuntimeError("the app failed")
    assert running.worker is not None and not running.worker.stats().running
    assert installed_adapter(JOB_DRIVER) is not driver


async def test_the_scheduler_leads_the_tasks_among_the_jobs_and_steps_down() -> None:
    driver = memory_job_driver()
    minutely = task(
        name="minutely", cron="* * * * *", enqueue=lambda at: (double, {"n": at.at.minute})
    )
    async with run_jobs(
        jobs=[double, minutely], driver=driver, scheduler=True, purge=False
    ) as running:
        assert running.scheduler is not None and running.scheduler.tasks == (minutely,)
        assert running.worker is not None and set(running.worker.jobs) == {"double"}
        for _ in range(500):
            if running.scheduler.leading:
                break
            await asyncio.sleep(0.01)
        assert running.scheduler.leading
    assert not running.scheduler.leading


@pytest.mark.parametrize(
    ("kwargs", "needle"),
    [
        ({"jobs": [double], "handle_signals": True}, "handle_signals"),
        ({"jobs": "double"}, "not a list"),
        ({"jobs": [double, 3]}, "neither a job nor a task"),
        ({"jobs": []}, "no job to run"),
        ({"jobs": [double], "scheduler": True}, "no task()"),
        ({"jobs": [double], "worker": False, "max_in_flight": 2, "relay": True}, "worker=False"),
        ({"jobs": [double], "worker": False}, "nothing to run"),
        ({"jobs": [double], "max_in_flight": 0}, "max_in_flight"),
        ({"jobs": [double], "no_such_knob": 1}, "no_such_knob"),
    ],
)
async def test_run_jobs_refuses_bad_settings_and_starts_nothing(
    kwargs: dict[str, Any], needle: str
) -> None:
    driver = memory_job_driver()
    before = installed_adapter(JOB_DRIVER)
    with pytest.raises(XError) as caught:
        async with run_jobs(driver=driver, **kwargs):
            raise AssertionError("the block ran")
    assert caught.value.code == "X_CONFIG_INVALID"
    assert needle in caught.value.message
    assert installed_adapter(JOB_DRIVER) is before
