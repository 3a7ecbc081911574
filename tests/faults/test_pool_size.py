"""A pool too small for the worker's concurrency is refused at start with a clear message: every
run in flight may hold a connection, and the worker needs its own besides (its claims, its
batched renewals and acks) — a pool smaller than that starves the renewals of the runs it holds.
Nothing is claimed and no worker is registered before the refusal."""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys

import pytest
from psycopg_pool import AsyncConnectionPool

from ultimat3.core import XError
from ultimat3.jobs import job_worker
from ultimat3.jobs._process.worker import WORKER_CONNECTIONS
from ultimat3.jobs.cli._driver import choose_driver, open_driver
from ultimat3.jobs.cli._main import worker_pool_size
from ultimat3.jobs.postgres import PostgresJobDriver, postgres_job_driver
from ultimat3_testkit.fault_app import STEPS_JOB, configure
from ultimat3_testkit.faults import HERE, Db, until, work_request


async def _refusal(driver: PostgresJobDriver, max_in_flight: int) -> XError:
    worker = job_worker(
        jobs=[STEPS_JOB], driver=driver, max_in_flight=max_in_flight, handle_signals=False
    )
    with pytest.raises(XError) as caught:
        await worker.start()
    assert not worker.stats().running
    return caught.value


async def test_a_pool_smaller_than_the_runs_in_flight_is_refused_at_start(
    db: Db, db_url: str, schema: str
) -> None:
    driver = postgres_job_driver(db_url, schema=schema, max_size=4)
    try:
        await driver.enqueue(req := work_request("waits"))
        refusal = await _refusal(driver, max_in_flight=8)
        assert refusal.code == "X_CONFIG_INVALID"
        assert "4 connections" in refusal.message and "max_in_flight=8" in refusal.message
        assert "max_size=10" in (refusal.fix or "")
        assert refusal.meta == {"pool_size": 4, "max_in_flight": 8, "needed": 10}
        assert (await db.job(req.id))["state"] == "ready"  # nothing was claimed
        assert await db.value("SELECT count(*) FROM {x_workers}") == 0
        assert (await _refusal(driver, max_in_flight=3)).meta["needed"] == 5
    finally:
        await driver.close()


async def test_the_callers_pool_is_measured_too(db_url: str, schema: str) -> None:
    async with AsyncConnectionPool(db_url, min_size=1, max_size=3, open=False) as pool:
        driver = postgres_job_driver(pool, schema=schema)
        refusal = await _refusal(driver, max_in_flight=2)
        assert refusal.meta == {"pool_size": 3, "max_in_flight": 2, "needed": 4}


async def test_a_pool_that_fits_starts_and_runs(db: Db, db_url: str, schema: str) -> None:
    configure(db_url, schema)
    driver = postgres_job_driver(db_url, schema=schema, max_size=10)
    try:
        await driver.enqueue(req := work_request("runs"))
        worker = job_worker(
            jobs=[STEPS_JOB],
            driver=driver,
            max_in_flight=8,
            poll_interval_ms=20,
            handle_signals=False,
        )
        await worker.start()
        try:
            await until(lambda: db.all_settled([req.id]), timeout_s=10, what="the job")
        finally:
            await asyncio.wait_for(worker.stop(), timeout=10)
        await db.assert_nothing_lost([req.id])
    finally:
        await driver.close()


async def test_x_worker_sizes_the_pool_it_opens_for_its_max_in_flight(
    db_url: str, schema: str
) -> None:
    """``x worker --max-in-flight 50`` opens a pool of 52 (the runs plus the worker's own
    connections) instead of refusing the default 10; without the flag the default stands."""
    sized = choose_driver(
        kind=None,
        database_url=db_url,
        redis_url=None,
        schema=schema,
        env={},
        pool_size=worker_pool_size(50),
    )
    driver = await open_driver(sized)
    try:
        assert isinstance(driver, PostgresJobDriver)
        assert driver.pool_size == 50 + WORKER_CONNECTIONS
        job_worker(jobs=[STEPS_JOB], driver=driver, max_in_flight=50).check()  # no refusal
    finally:
        await driver.close()
    assert worker_pool_size(None) is None
    assert worker_pool_size(4) == 10  # never below the driver's default


def test_x_worker_refuses_a_bad_max_in_flight_at_once(db_url: str, schema: str) -> None:
    """The process a deploy runs: ``--max-in-flight 0`` exits 1 at once, the X_ code on
    stderr, before any pool is sized from it."""
    done = subprocess.run(
        [
            *(
                sys.executable,
                "-m",
                "ultimat3.jobs.cli",
                "worker",
                "--app",
                "ultimat3_testkit.fault_app:JOBS",
            ),
            *("--database-url", db_url, "--schema", schema, "--max-in-flight", "0", "--json"),
        ],
        cwd=HERE,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 1, done.stderr
    error = json.loads(done.stderr[done.stderr.index("{") :])["error"]
    assert error["code"] in {"X_INVARIANT", "X_CONFIG_INVALID"}
    assert "max_in_flight" in error["message"]
