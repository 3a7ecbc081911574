"""The transactional outbox stays the record with Redis as the job driver: an enqueue made inside a
REAL psycopg transaction (the app's ``AsyncConnection`` made ambient with ``use_connection``) is
staged in Postgres's ``x_outbox`` and reaches Redis only through the relay, after the commit. A
rolled-back enqueue never reaches Redis; a relay that crashes after publishing, before deleting
its batch, publishes the batch again and Redis adds no second job and runs none twice."""

from __future__ import annotations

import asyncio
import os
import uuid
from collections.abc import AsyncIterator, Sequence
from typing import Any

import psycopg
import pytest
from psycopg import sql
from pydantic import BaseModel

from ultimat3.core import XError, swap_adapter, use_connection
from ultimat3.jobs import job, job_worker, outbox_relay
from ultimat3.jobs.adapter import JOB_DRIVER, OUTBOX_STORE
from ultimat3.jobs.postgres import PostgresOutboxStore, migrate, postgres_outbox_store
from ultimat3.jobs_redis import RedisJobDriver

DATABASE_URL = os.environ.get("DATABASE_URL") or "postgresql://postgres@127.0.0.1:5432/test"


class Order(BaseModel):
    n: int


runs: dict[int, int] = {}


async def _ship(input: Order, step: Any, ctx: Any) -> int:
    runs[input.n] = runs.get(input.n, 0) + 1
    return input.n


ship = job(input=Order, idempotency_key=lambda i: f"ship:{i.n}", name="outbox.ship", run=_ship)


@pytest.fixture
async def schema() -> AsyncIterator[str]:
    name = f"x_test_{uuid.uuid4().hex[:16]}"
    await migrate(DATABASE_URL, schema=name)
    try:
        yield name
    finally:
        async with await psycopg.AsyncConnection.connect(DATABASE_URL, autocommit=True) as conn:
            await conn.execute(
                sql.SQL("DROP SCHEMA IF EXISTS {} CASCADE").format(sql.Identifier(name))
            )


@pytest.fixture
async def store(schema: str, driver: RedisJobDriver) -> AsyncIterator[PostgresOutboxStore]:
    made = postgres_outbox_store(DATABASE_URL, schema=schema)
    runs.clear()
    try:
        with swap_adapter(JOB_DRIVER, driver), swap_adapter(OUTBOX_STORE, made):
            yield made
    finally:
        await made.close()


async def _outbox_rows(schema: str) -> int:
    async with await psycopg.AsyncConnection.connect(DATABASE_URL) as conn:
        cur = await conn.execute(
            sql.SQL("SELECT count(*) FROM {}.x_outbox").format(sql.Identifier(schema))
        )
        row = await cur.fetchone()
        assert row is not None
        return int(row[0])


async def _on_redis(driver: RedisJobDriver) -> list[Any]:
    return await driver.introspect.list(name="outbox.ship", limit=100)


async def _run_until(driver: RedisJobDriver, done: int) -> None:
    worker = job_worker(jobs=[ship], poll_interval_ms=10, idle_poll_max_ms=20,
                        handle_signals=False)  # fmt: skip
    await worker.start()
    try:
        for _ in range(1000):
            rows = await _on_redis(driver)
            if sum(r.state == "done" for r in rows) >= done:
                return
            await asyncio.sleep(0.02)
        raise AssertionError(f"{done} runs did not finish: {[r.state for r in rows]}")
    finally:
        await worker.stop()


async def test_a_rolled_back_enqueue_never_reaches_redis(
    store: PostgresOutboxStore, schema: str, driver: RedisJobDriver
) -> None:
    staged: list[Any] = []

    async def handler(conn: psycopg.AsyncConnection[Any]) -> None:
        async with conn.transaction(), use_connection(conn):
            await conn.execute("SELECT 1")  # the app's own write would be here
            staged.append(await ship.enqueue({"n": 1}))
            staged.extend(await ship.enqueue_many([{"n": 2}, {"n": 3}]))
            assert await _outbox_rows(schema) == 0, "another session sees an uncommitted row"
            raise RuntimeError("the business write failed")

    async with await psycopg.AsyncConnection.connect(DATABASE_URL) as conn:
        with pytest.raises(RuntimeError, match="the business write failed"):
            await handler(conn)
    assert await _outbox_rows(schema) == 0
    for _ in range(3):
        assert await outbox_relay() == 0
    assert await _on_redis(driver) == []
    assert await driver.stats() == []
    for result in staged:
        with pytest.raises(XError) as refused:
            await driver.introspect.show(result.id)
        assert refused.value.code == "X_JOB_NOT_FOUND"


async def test_a_committed_enqueue_reaches_redis_through_the_relay_and_runs_once(
    store: PostgresOutboxStore, schema: str, driver: RedisJobDriver
) -> None:
    async with await psycopg.AsyncConnection.connect(DATABASE_URL) as conn:
        async with conn.transaction(), use_connection(conn):
            first = await ship.enqueue({"n": 1})
            many = await ship.enqueue_many([{"n": 2}, {"n": 3}, {"n": 2}])
            assert many[2].deduped and many[2].id == many[0].id
            assert await _on_redis(driver) == [], "staged, not published, while open"
            assert await outbox_relay() == 0, "the relay sees no uncommitted row"
        assert await _on_redis(driver) == [], "committed: on Redis only once relayed"
        assert await _outbox_rows(schema) == 3
    assert await outbox_relay() == 3
    assert await _outbox_rows(schema) == 0
    rows = {r.id: r for r in await _on_redis(driver)}
    for result in (first, many[0], many[1]):
        assert (rows[result.id].run_id, rows[result.id].state) == (result.run_id, "ready")
    assert len(rows) == 3
    await _run_until(driver, 3)
    assert runs == {1: 1, 2: 1, 3: 1}


class _CrashAfterPublish:
    """The relay's store, dying (as a killed process would) after the batch landed on Redis and
    before its rows were deleted from the outbox."""

    def __init__(self, inner: PostgresOutboxStore) -> None:
        self._inner = inner

    def accepts(self, connection: object) -> bool:
        return self._inner.accepts(connection)

    async def stage(self, connection: object, requests: Sequence[Any]) -> None:
        await self._inner.stage(connection, requests)

    async def claim_batch(self, *, limit: int, lease_ms: int) -> list[tuple[str, Any]]:
        return await self._inner.claim_batch(limit=limit, lease_ms=lease_ms)

    async def mark_published_many(self, row_ids: Sequence[str]) -> None:
        raise KeyboardInterrupt("the relay process died before deleting its batch")

    async def release(self, row_ids: Sequence[str]) -> None:
        await self._inner.release(row_ids)


async def _crashing_relay(store: PostgresOutboxStore, driver: RedisJobDriver) -> None:
    with pytest.raises(KeyboardInterrupt):
        await outbox_relay(_CrashAfterPublish(store), driver, lease_ms=50)
    await asyncio.sleep(0.08)  # the dead relay's lease lapses


@pytest.mark.parametrize("replay", ["while queued", "after the runs"])
async def test_a_relay_crash_replays_the_batch_and_redis_adds_no_duplicate(
    store: PostgresOutboxStore, schema: str, driver: RedisJobDriver, replay: str
) -> None:
    async with (
        await psycopg.AsyncConnection.connect(DATABASE_URL) as conn,
        conn.transaction(),
        use_connection(conn),
    ):
        staged = await ship.enqueue_many([{"n": n} for n in range(5)])
    await _crashing_relay(store, driver)
    assert await _outbox_rows(schema) == 5, "the crashed batch is still the outbox's"
    assert len(await _on_redis(driver)) == 5
    if replay == "while queued":
        await _crashing_relay(store, driver)  # twice: the live key dedupes each republish
        assert await outbox_relay(store, driver) == 5
        await _run_until(driver, 5)
    else:
        await _run_until(driver, 5)  # done: no live key any more; the id dedupes the republish
        assert await outbox_relay(store, driver) == 5
        await asyncio.sleep(0.2)
        await _run_until(driver, 5)
    assert await _outbox_rows(schema) == 0
    rows = await _on_redis(driver)
    assert sorted(r.id for r in rows) == sorted(r.id for r in staged)
    assert {r.state for r in rows} == {"done"}
    assert runs == dict.fromkeys(range(5), 1), "a republished job ran twice"
    assert [s.done for s in await driver.stats()] == [5]
