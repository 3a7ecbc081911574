"""Clocks: every lease, due time and stamp comes from the database's clock, never a worker's. A
worker process whose own wall clock is ten minutes off (ahead, or behind) neither steals a live
lease nor runs a delayed job early — its own delayed enqueue included — its ``step.sleep`` sleeps
the right length, and every time it causes to be stored is the database's."""

from __future__ import annotations

from dataclasses import replace
from datetime import datetime, timedelta

import pytest

from ultimat3.core import new_id
from ultimat3.jobs.adapter import EnqueueRequest
from ultimat3.jobs.postgres import postgres_job_driver
from ultimat3_testkit.faults import (
    Db,
    WorkerFactory,
    app_name,
    until,
    with_app_name,
    work_request,
    worker_args,
)

DELAY_MS = 120_000


@pytest.mark.parametrize("offset_s", [600, -600], ids=["ahead", "behind"])
async def test_a_worker_ten_minutes_off_steals_nothing_and_runs_nothing_early(
    offset_s: int, db: Db, db_url: str, schema: str, workers: WorkerFactory
) -> None:
    driver = postgres_job_driver(db_url, schema=schema, max_size=1)
    held = work_request("held")
    delayed = replace(work_request("delayed"), delay_ms=DELAY_MS)
    sleepy = EnqueueRequest(
        id=new_id(),
        run_id=new_id(),
        name="faults.sleepy",
        queue="faults",
        payload={"key": "sleepy"},
        idempotency_key="sleepy",
        max_attempts=5,
    )
    try:
        await driver.enqueue(held)
        [lease] = await driver.claim(
            queues=["faults"], limit=1, worker_id="holder", visibility_timeout_ms=120_000
        )
        await driver.enqueue(delayed)
        await driver.enqueue(sleepy)
    finally:
        await driver.close()

    worker = workers(
        *worker_args(
            with_app_name(db_url, app_name("clock")),
            schema,
            extra=["--enqueue-delayed", f"own-delayed:{DELAY_MS}"],
        ),
        env={"FAULTS_CLOCK_OFFSET_S": str(offset_s)},
    )
    ready = await worker.wait_event("faults.ready")
    assert abs(ready["wall_s"] - ready["t"] - offset_s) < 5  # its clocks really are off
    assert abs(ready["clock_ms"] / 1000 - ready["t"] - offset_s) < 5
    [own] = worker.events("faults.enqueued")
    await until(lambda: db.all_settled([sleepy.id]), timeout_s=20, what="the sleepy job")
    db_now: datetime = await db.value("SELECT now()")

    row = await db.job(held.id)  # the live lease: not taken
    assert (row["state"], row["worker_id"], row["claim"], row["attempts"]) == (
        "running",
        "holder",
        lease.claim,
        1,
    )
    for job_id in (delayed.id, own["id"]):  # due in two minutes, by the database's clock
        row = await db.job(job_id)
        assert (row["state"], row["attempts"]) == ("delayed", 0)
        due_in = (row["run_at"] - row["created_at"]).total_seconds()
        assert DELAY_MS / 1000 - 1 < due_in < DELAY_MS / 1000 + 1

    row = await db.job(sleepy.id)
    assert (row["state"], row["attempts"]) == ("done", 1)
    steps = await db.steps(sleepy.id)
    wake_at_ms = steps["sleep:1"]["output"]["wake_at_ms"]
    slept_ms = wake_at_ms - steps["before"]["updated_at"].timestamp() * 1000
    assert 900 <= slept_ms <= 3000, "the sleep's wake time was not the database's now + 1 s"
    [after] = [e for e in await db.effects(sleepy.id) if e.step == "after"]
    assert after.at_ms >= wake_at_ms - 50, "the sleep ended early"

    stamps = await db.rows(
        "SELECT unnest(ARRAY[created_at, updated_at, finished_at, lease_expires_at])"
        " FROM {x_jobs} UNION ALL"
        " SELECT unnest(ARRAY[created_at, updated_at]) FROM {x_job_steps} UNION ALL"
        " SELECT unnest(ARRAY[started_at, last_heartbeat_at]) FROM {x_workers}"
    )
    window = timedelta(seconds=DELAY_MS / 1000 + 30)  # a 120 s lease is the latest stamp
    off = [s for (s,) in stamps if s is not None and not db_now - window < s < db_now + window]
    assert not off, f"stamps off the database's clock: {off}"
    assert await worker.stop() == 0
