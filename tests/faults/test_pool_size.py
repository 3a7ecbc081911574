"""A run holds no connection: every statement it sends (a step record, progress, a renewal)
borrows one from the driver's pool and gives it back, so ``max_in_flight`` is independent of the
pool's size — no refusal at start, and a worker process opens at most the pool's ``max_size``
plus its LISTEN session, whatever ``max_in_flight`` is. A pool the app itself holds empty makes
the step that cannot get a connection fail with a message naming the pool, never a hang."""

from __future__ import annotations

import asyncio
import contextlib
import json
import subprocess
import sys
from collections import Counter
from typing import Any

import psycopg
from psycopg_pool import AsyncConnectionPool
from pydantic import BaseModel

from ultimat3.core import XError, swap_adapter
from ultimat3.jobs import Retry, job, job_worker
from ultimat3.jobs.adapter import JOB_DRIVER
from ultimat3.jobs.cli._driver import choose_driver, open_driver
from ultimat3.jobs.cli._main import worker_pool_size
from ultimat3.jobs.postgres import PostgresJobDriver, postgres_job_driver
from ultimat3_testkit.fault_app import STEPS_JOB
from ultimat3_testkit.faults import HERE, Db, app_name, until, with_app_name


class _Nap(BaseModel):
    n: int


def _napping_job(seen: list[str]) -> Any:
    @job(input=_Nap, idempotency_key=lambda i: f"nap:{i.n}", name="pool.nap", queue="pool")
    async def nap(data: _Nap, step: Any, ctx: Any) -> int:
        async def one(signal: Any) -> int:
            return data.n

        first = await step.run("first", one)
        await asyncio.sleep(0.3)  # an I/O-bound body: waiting holds no connection

        async def two(signal: Any) -> int:
            return int(first) + 1

        second = await step.run("second", two)
        seen.append(ctx.job_id)
        return int(second)

    return nap


async def _connections(db_url: str, name: str) -> int:
    async with await psycopg.AsyncConnection.connect(db_url, autocommit=True) as conn:
        cur = await conn.execute(
            "SELECT count(*) FROM pg_stat_activity WHERE application_name = %s", (name,)
        )
        row = await cur.fetchone()
        assert row is not None
        return int(row[0])


async def test_200_in_flight_on_a_pool_of_4_run_with_no_refusal_and_no_more_connections(
    db: Db, db_url: str, schema: str, statements: Counter[str]
) -> None:
    name = app_name("borrow")
    url = with_app_name(db_url, name)
    driver = postgres_job_driver(url, schema=schema, max_size=4)
    seen: list[str] = []
    nap = _napping_job(seen)
    peak = 0
    try:
        with swap_adapter(JOB_DRIVER, driver):
            results = await nap.enqueue_many([_Nap(n=i) for i in range(200)])
        ids = [r.id for r in results]
        worker = job_worker(
            jobs=[nap], driver=driver, max_in_flight=200, poll_interval_ms=20, claim_batch=200
        )
        await worker.start()  # no X_CONFIG_INVALID: the runs borrow
        try:

            async def settled() -> bool:
                nonlocal peak
                peak = max(peak, await _connections(db_url, name))
                return await db.all_settled(ids)

            await until(settled, timeout_s=60, what="200 runs on a pool of 4", every_s=0.05)
            assert worker.stats().claimed == 200
        finally:
            await asyncio.wait_for(worker.stop(), timeout=20)
        assert peak <= 4 + 1, f"{peak} connections: the pool's 4 and the LISTEN session at most"
        assert len(seen) == 200 and len(set(seen)) == 200
        # the runs' 400 records were coalesced: steps recorded in one loop turn share a statement
        assert statements["step_record_many"] >= 1
        assert statements["step_record"] + statements["step_record_many"] < 200, statements
        await db.assert_nothing_lost(ids)
        steps = await db.rows(
            "SELECT name, count(*), sum(executions) FROM {x_job_steps} GROUP BY name ORDER BY 1"
        )
        assert [tuple(r) for r in steps] == [("first", 200, 200), ("second", 200, 200)]
        outputs = await db.rows(
            "SELECT s.output, j.result FROM {x_job_steps} s JOIN {x_jobs} j ON j.id = s.job_id"
            " WHERE s.name = 'second'"
        )
        assert sorted(r[1] for r in outputs) == list(range(1, 201))
        assert all(r[0] == r[1] for r in outputs)  # each run's own record, not another's
    finally:
        await driver.close()


async def test_a_pool_the_app_holds_empty_fails_the_step_naming_the_pool(
    db: Db, db_url: str, schema: str
) -> None:
    """The app passed its own pool and holds every connection of it: the run's step cannot be
    recorded, and the step fails (it does not hang) with the pool's name, size and the fix."""
    caught: list[XError] = []
    held = asyncio.Event()
    release = asyncio.Event()

    @job(
        input=_Nap,
        idempotency_key=lambda i: f"starved:{i.n}",
        name="pool.starved",
        queue="pool",
        retry=Retry(attempts=1),
    )
    async def starved(data: _Nap, step: Any, ctx: Any) -> str:
        held.set()
        await asyncio.sleep(0.2)  # the app takes every connection meanwhile

        async def one(signal: Any) -> int:
            return data.n

        try:
            await step.run("one", one)
        except XError as exc:
            caught.append(exc)
            release.set()
            raise
        return "ok"

    async with AsyncConnectionPool(
        db_url, min_size=2, max_size=2, timeout=1.0, open=False, name="app-pool"
    ) as pool:
        driver = postgres_job_driver(pool, schema=schema)
        with swap_adapter(JOB_DRIVER, driver):
            result = await starved.enqueue(_Nap(n=1))
        worker = job_worker(jobs=[starved], driver=driver, max_in_flight=50)
        hold: list[Any] = []

        async def take_them_all() -> None:
            await held.wait()
            for _ in range(2):
                hold.append(await pool.getconn())

        grabber = asyncio.ensure_future(take_them_all())
        await worker.start()
        try:
            await asyncio.wait_for(release.wait(), timeout=15)  # never a hang
        finally:
            await grabber
            for conn in hold:
                await pool.putconn(conn)
            await asyncio.wait_for(worker.stop(), timeout=20)
        error = caught[0]
        assert error.code == "X_DRIVER_UNAVAILABLE"
        assert "'app-pool'" in error.message and "max_size=2" in error.message
        assert "recording step 'one'" in error.message
        assert "max_size=4" in (error.fix or "")
        assert error.meta["pool"] == "app-pool" and error.meta["max_size"] == 2
        with contextlib.suppress(Exception):
            await until(lambda: db.all_settled([result.id]), timeout_s=10, what="the settle")


async def test_x_worker_opens_the_default_pool_whatever_max_in_flight(
    db_url: str, schema: str
) -> None:
    """``x worker --max-in-flight 500`` opens the driver's default pool (10): runs borrow."""
    assert worker_pool_size(500) is None
    sized = choose_driver(
        kind=None,
        database_url=db_url,
        redis_url=None,
        schema=schema,
        env={},
        pool_size=worker_pool_size(500),
    )
    driver = await open_driver(sized)
    try:
        assert isinstance(driver, PostgresJobDriver)
        assert driver.pool_size == 10
        job_worker(jobs=[STEPS_JOB], driver=driver, max_in_flight=500).check()  # no refusal
    finally:
        await driver.close()


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
