"""x jobs show counts crashes (issue 23): a lapse whose worker was known dead, in the text and in
``--json``; a job that never crashed shows 0."""

from __future__ import annotations

import asyncio
import json

import pytest

from ultimat3.core import FrozenClock, new_id
from ultimat3.jobs.adapter import EnqueueRequest, memory_job_driver
from ultimat3.jobs.cli import main


def test_jobs_show_counts_the_crashes(capsys: pytest.CaptureFixture[str]) -> None:
    clock = FrozenClock("2026-03-01T12:00:00Z")
    driver = memory_job_driver(clock=clock)
    job_id, calm_id = new_id(), new_id()

    async def setup() -> None:
        for one in (job_id, calm_id):
            await driver.enqueue(
                EnqueueRequest(
                    id=one,
                    run_id=new_id(),
                    name="onboard",
                    queue="default",
                    payload={"org": one},
                    idempotency_key=f"onboard:{one}",
                    max_attempts=3,
                )
            )
        await driver.register_worker(
            "w-dies", host="h", queues=["default"], slots=1, visibility_timeout_ms=1_000
        )
        await driver.claim(
            queues=["default"], limit=1, worker_id="w-dies", visibility_timeout_ms=1_000
        )
        clock.advance(1_500)  # its lease and its registry row lapsed: the process died
        await driver.claim(
            queues=["default"], limit=1, worker_id="w-2", visibility_timeout_ms=30_000
        )

    asyncio.run(setup())
    assert main(["jobs", "show", job_id], driver=driver) == 0
    out = capsys.readouterr().out
    line = next(x for x in out.splitlines() if x.startswith("crashes"))
    assert "1" in line and "a worker process died while running it" in line
    assert "1 of 3 attempts spent" in out, "a crash is not an attempt"
    assert main(["jobs", "show", job_id, "--json"], driver=driver) == 0
    assert json.loads(capsys.readouterr().out)["crashes"] == 1
    assert main(["jobs", "show", calm_id, "--json"], driver=driver) == 0
    assert json.loads(capsys.readouterr().out)["crashes"] == 0
