"""Every refusal of the Postgres driver that the conformance suite does not already prove: an
XError with the spec's code and a message naming the offending thing."""

from __future__ import annotations

import asyncio
from datetime import datetime
from typing import Any

import psycopg
import pytest
from psycopg_pool import AsyncConnectionPool

from ultimat3.core import XError, new_id
from ultimat3.jobs.adapter import EnqueueRequest
from ultimat3.jobs.postgres import (
    PostgresJobDriver,
    postgres_job_driver,
    postgres_outbox_store,
    start_queue_wake,
)


async def refused(call: Any, code: str, *needles: str) -> XError:
    with pytest.raises(XError) as caught:
        await call
    assert caught.value.code == code, caught.value
    for needle in needles:
        assert needle in caught.value.message, (needle, caught.value.message)
    return caught.value


async def test_introspection_refuses_bad_filters_by_name(pg_driver: PostgresJobDriver) -> None:
    intro = pg_driver.introspect
    await refused(intro.list(state="lost"), "X_INVARIANT", "lost")  # type: ignore[arg-type]
    await refused(
        intro.list(created_from=datetime(2026, 1, 1)), "X_INVARIANT", "created_from", "naive"
    )
    await refused(intro.remove_many(state="gone"), "X_INVARIANT", "gone")  # type: ignore[arg-type]
    await refused(intro.promote_many(state="done"), "X_INVARIANT", "done")
    await refused(intro.pause_queue(""), "X_INVARIANT", "queue")
    await refused(intro.pause_task(""), "X_INVARIANT", "task")
    for call in (
        intro.show("0190b5a2-0000-7000-8000-00000000dead"),
        intro.remove("0190b5a2-0000-7000-8000-00000000dead"),
        intro.cancel("0190b5a2-0000-7000-8000-00000000dead"),
    ):
        await refused(call, "X_JOB_NOT_FOUND", "0190b5a2-0000-7000-8000-00000000dead")
    assert await intro.list(id_prefix="ABC") == []


async def test_the_backfill_ledger_refuses_by_name(pg_driver: PostgresJobDriver) -> None:
    ledger = pg_driver.backfills
    await refused(ledger.begin("", job_id=None, cursor=None), "X_INVARIANT", "name")
    row = await ledger.begin("fill", job_id="any-job", cursor={"at": 1})
    assert (row.state, row.rows, row.cursor, row.job_id) == ("running", 0, {"at": 1}, "any-job")
    await refused(ledger.advance(row.id, rows=-1, cursor=None), "X_INVARIANT", "-1")
    await refused(ledger.advance(new_id(), rows=1, cursor=None), "X_INVARIANT", "never begun")
    await refused(ledger.advance("nope", rows=1, cursor=None), "X_INVARIANT", "nope")
    await refused(ledger.finish(row.id, state="running"), "X_INVARIANT", "running")
    await refused(ledger.finish(new_id(), state="done"), "X_INVARIANT", "never begun")
    await refused(ledger.list(limit=0), "X_JOB_PAGE_INVALID", "0")
    await ledger.advance(row.id, rows=5, cursor={"at": 6})
    await ledger.finish(row.id, state="done")
    [done] = await ledger.list()
    assert (done.state, done.rows, done.cursor) == ("done", 5, {"at": 6})


async def test_the_outbox_refuses_a_bad_limit(database_url: str, pg_schema: str) -> None:
    store = postgres_outbox_store(database_url, schema=pg_schema)
    try:
        await refused(store.claim_batch(limit=-1, lease_ms=1000), "X_INVARIANT", "-1")
        assert await store.claim_batch(limit=0, lease_ms=1000) == []
    finally:
        await store.close()


async def test_a_wake_needs_a_dsn_when_the_pool_has_none(database_url: str, pg_schema: str) -> None:
    async def conninfo() -> str:
        return database_url

    pool: AsyncConnectionPool[Any] = AsyncConnectionPool(conninfo, min_size=1, open=False)
    async with pool:
        driver = postgres_job_driver(pool, schema=pg_schema)
        await refused(start_queue_wake(driver, lambda q: None), "X_CONFIG_INVALID", "conninfo")
        wake = await start_queue_wake(driver, lambda q: None, dsn=database_url)
        try:
            assert await wake.wait_proven(5)
        finally:
            await wake.stop()


async def test_a_key_taken_while_requeueing_is_a_duplicate_not_a_crash(
    pg_driver: PostgresJobDriver, database_url: str
) -> None:
    def req(key: str) -> EnqueueRequest:
        return EnqueueRequest(
            id=new_id(),
            run_id=new_id(),
            name="n",
            queue="q",
            payload=None,
            idempotency_key=key,
            max_attempts=1,
        )

    for key in ("one", "many"):
        await pg_driver.enqueue(req(key))
        [job] = await pg_driver.claim(
            queues=["q"], limit=1, worker_id="w", visibility_timeout_ms=60_000
        )
        assert await pg_driver.nack(job.id, worker_id="w", claim=job.claim, outcome="dead")
    async with await psycopg.AsyncConnection.connect(database_url) as racer:
        await pg_driver.enqueue(req("one"), connection=racer)  # uncommitted: invisible
        target = next(
            r.id
            for r in await pg_driver.introspect.list(state="dead")
            if r.idempotency_key == "one"
        )
        requeue = asyncio.create_task(pg_driver.introspect.requeue(target))
        await asyncio.sleep(0.3)  # the requeue now waits on the racer's key
        await racer.commit()
        with pytest.raises(XError) as caught:
            await requeue
    assert caught.value.code == "X_JOB_DUPLICATE" and "one" in caught.value.message
    async with await psycopg.AsyncConnection.connect(database_url) as racer:
        await pg_driver.enqueue(req("many"), connection=racer)
        bulk = asyncio.create_task(pg_driver.introspect.requeue_many(state="dead"))
        await asyncio.sleep(0.3)
        await racer.commit()
        moved = await bulk
    assert (moved.affected, moved.remaining) == (0, 0)
