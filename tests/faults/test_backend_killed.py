"""A backend killed with ``pg_terminate_backend`` in the middle of a write: while a step's output
is being written, while an enqueuing transaction commits, and while a batch enqueue inserts. No
step is recorded without its output, no enqueue is half-done or duplicated, and a retry with the
same key (or the same id) gives one job.

Each write is held at a precise point by a lock this test takes (an uncommitted row the statement
must wait for, an advisory lock a commit-time trigger waits for), so the kill lands inside it; only
backends carrying this test's own ``application_name`` are terminated."""

from __future__ import annotations

import asyncio
import random
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import psycopg
import pytest
from psycopg import sql

from ultimat3.core import new_id, swap_adapter
from ultimat3.jobs import EnqueueResult, JobWorker, job_worker
from ultimat3.jobs.adapter import JOB_DRIVER
from ultimat3.jobs.postgres import PostgresJobDriver, postgres_job_driver, transaction
from ultimat3_testkit.fault_app import STEPS_JOB, Work, configure
from ultimat3_testkit.faults import (
    Db,
    app_name,
    backend_pids,
    terminate,
    until,
    with_app_name,
    work_request,
)


@asynccontextmanager
async def running_worker(driver: PostgresJobDriver) -> AsyncIterator[JobWorker]:
    worker = job_worker(
        jobs=[STEPS_JOB],
        driver=driver,
        max_in_flight=1,
        poll_interval_ms=50,
        idle_poll_max_ms=200,
        visibility_timeout_ms=10_000,
        handle_signals=False,
    )
    await worker.start()
    try:
        yield worker
    finally:
        await asyncio.wait_for(worker.stop(), timeout=15)


async def test_a_backend_killed_while_writing_a_step_output_records_no_step(
    db: Db, db_url: str, schema: str
) -> None:
    name = app_name("step-write")
    configure(db_url, schema)
    driver = postgres_job_driver(with_app_name(db_url, name), schema=schema, max_size=4)
    req = work_request("gated", gate="b")
    try:
        await driver.enqueue(req)
        async with running_worker(driver):
            await until(lambda: db.starts(req.id, "b"), timeout_s=15, what="step b to start")
            async with await psycopg.AsyncConnection.connect(db_url) as blocker:
                # an uncommitted row under the same (job_id, name): the step's INSERT, already
                # past its fence (FOR SHARE on the job row), must wait for this transaction
                await blocker.execute(
                    sql.SQL(
                        "INSERT INTO {} (job_id, name, state, executions, output, created_at,"
                        " updated_at) VALUES (%s, 'b', 'completed', 1, '\"blocker\"', now(), now())"
                    ).format(sql.Identifier(schema, "x_job_steps")),
                    (req.id,),
                )
                await db.gate(req.id)  # step b's function returns; its output is written now
                [writer] = await until(
                    lambda: backend_pids(db_url, name, waiting=True, query_like="%x_job_steps%"),
                    timeout_s=10,
                    what="the step write to wait inside its INSERT",
                )
                assert "b" not in await db.steps(req.id)
                assert await terminate(db_url, writer, name)
                await blocker.rollback()
            await until(lambda: db.all_settled([req.id]), timeout_s=20, what="the job to end")
        await db.assert_nothing_lost([req.id])
        row = await db.job(req.id)
        assert row["attempts"] == 2
        assert row["last_error"]["code"] == "X_DRIVER_UNAVAILABLE"  # attempt 1 met the kill
        steps = await db.steps(req.id)
        assert steps["b"]["state"] == "completed" and steps["b"]["executions"] == 1
        assert steps["b"]["output"]["attempt"] == 2  # the killed write left nothing behind
        starts = {s: await db.starts(req.id, s) for s in ("a", "b", "c")}
        assert starts == {"a": 1, "b": 2, "c": 1}
    finally:
        await driver.close()


async def _orders_with_commit_gate(db_url: str, schema: str, lock_key: int) -> None:
    """``fault_orders``, whose every insert waits at COMMIT for advisory lock ``lock_key``."""
    async with await psycopg.AsyncConnection.connect(db_url, autocommit=True) as conn:
        await conn.execute(
            sql.SQL(
                "CREATE TABLE {orders} (id text PRIMARY KEY);"
                " CREATE FUNCTION {gate}() RETURNS trigger LANGUAGE plpgsql AS"
                " $$ BEGIN PERFORM pg_advisory_xact_lock_shared({key}); RETURN NULL; END $$;"
                " CREATE CONSTRAINT TRIGGER commit_gate AFTER INSERT ON {orders}"
                " DEFERRABLE INITIALLY DEFERRED FOR EACH ROW EXECUTE FUNCTION {gate}()"
            ).format(
                orders=sql.Identifier(schema, "fault_orders"),
                gate=sql.Identifier(schema, "fault_commit_gate"),
                key=sql.Literal(lock_key),
            )
        )


async def test_a_backend_killed_while_an_enqueuing_transaction_commits_leaves_nothing(
    db: Db, db_url: str, schema: str
) -> None:
    name = app_name("commit")
    lock_key = random.randrange(1, 2**62)
    await _orders_with_commit_gate(db_url, schema, lock_key)
    driver = postgres_job_driver(db_url, schema=schema, max_size=2)
    orders = sql.Identifier(schema, "fault_orders")

    async def place_order() -> EnqueueResult:
        """The app's transaction: the order row and its job, committed together."""
        async with (
            await psycopg.AsyncConnection.connect(with_app_name(db_url, name)) as conn,
            transaction(conn),
        ):
            await conn.execute(
                sql.SQL("INSERT INTO {} (id) VALUES ('o-1') ON CONFLICT DO NOTHING").format(orders)
            )
            return await STEPS_JOB.enqueue(Work(key="order:o-1"))

    async def stored() -> tuple[int, int]:
        jobs = await db.value("SELECT count(*) FROM {x_jobs} WHERE idempotency_key = 'order:o-1'")
        placed = await db.value("SELECT count(*) FROM {fault_orders}")
        return jobs, placed

    try:
        with swap_adapter(JOB_DRIVER, driver):
            async with await psycopg.AsyncConnection.connect(db_url, autocommit=True) as holder:
                await holder.execute("SELECT pg_advisory_lock(%s)", (lock_key,))
                attempt = asyncio.ensure_future(place_order())
                [committing] = await until(
                    lambda: backend_pids(db_url, name, waiting=True, query_like="COMMIT%"),
                    timeout_s=10,
                    what="the transaction to wait inside its COMMIT",
                )
                assert await stored() == (0, 0)  # nothing is visible before the commit
                assert await terminate(db_url, committing, name)
                with pytest.raises(psycopg.OperationalError):
                    await asyncio.wait_for(attempt, timeout=10)
                await holder.execute("SELECT pg_advisory_unlock(%s)", (lock_key,))
            assert await stored() == (0, 0), "a killed commit left half of its transaction"

            first = await asyncio.wait_for(place_order(), timeout=10)  # the app retries
            again = await asyncio.wait_for(place_order(), timeout=10)  # ... and once more
        assert not first.deduped and again.deduped and again.id == first.id
        assert await stored() == (1, 1)
    finally:
        await driver.close()


async def test_a_backend_killed_inside_a_batch_enqueue_is_retried_to_one_job_each(
    db: Db, db_url: str, schema: str
) -> None:
    name = app_name("batch")
    driver = postgres_job_driver(with_app_name(db_url, name), schema=schema, max_size=1)
    batch = [work_request(f"bulk-{i:04}") for i in range(2500)]  # three statements of 1,000
    try:
        async with await psycopg.AsyncConnection.connect(db_url) as blocker:
            # an uncommitted live row holding the key of an input of the SECOND statement
            await blocker.execute(
                sql.SQL(
                    "INSERT INTO {} (id, run_id, name, queue, state, idempotency_key,"
                    " max_attempts, run_at, created_at, updated_at) VALUES (%s, %s,"
                    " 'faults.steps', 'faults', 'delayed', 'bulk-1500', 1, now() + interval"
                    " '1 day', now(), now())"
                ).format(sql.Identifier(schema, "x_jobs")),
                (new_id(), new_id()),
            )
            pending = asyncio.ensure_future(driver.enqueue_many(batch))
            waiting = await until(
                lambda: backend_pids(db_url, name, waiting=True),
                timeout_s=10,
                what="the second statement to wait on the uncommitted key",
            )
            first_chunk = await db.value("SELECT count(*) FROM {x_jobs} WHERE state = 'ready'")
            assert first_chunk == 1000  # the first statement committed whole, alone
            assert await terminate(db_url, waiting[0], name)
            # the driver sends the statement again on a fresh connection, which waits again
            await until(
                lambda: _waiting_other_than(db_url, name, waiting[0]),
                timeout_s=10,
                what="the statement to be sent again",
            )
            await blocker.rollback()
        results = await asyncio.wait_for(pending, timeout=15)
    finally:
        await driver.close()
    assert [r.id for r in results] == [r.id for r in batch]
    assert not any(r.deduped for r in results)
    rows: list[Any] = await db.rows(
        "SELECT idempotency_key, count(*) FROM {x_jobs} GROUP BY idempotency_key"
    )
    assert len(rows) == 2500 and all(n == 1 for _, n in rows), "an input was lost or doubled"


async def _waiting_other_than(db_url: str, name: str, pid: int) -> bool:
    return any(p != pid for p in await backend_pids(db_url, name, waiting=True))
