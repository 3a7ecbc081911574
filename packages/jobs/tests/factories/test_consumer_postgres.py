"""consumer() on a real Postgres: handle upserts into an app table and the cursor lives in
another, both inside ONE transaction — a batch that fails after its upsert leaves neither."""

from __future__ import annotations

import asyncio
import time
import uuid
from collections.abc import AsyncIterator
from typing import Any

import psycopg
import pytest
from psycopg_pool import AsyncConnectionPool

from ultimat3.core import current_connection, swap_adapter
from ultimat3.jobs import Retry, job_worker
from ultimat3.jobs.adapter import JOB_DRIVER
from ultimat3.jobs.factories.consumer import (
    ConsumerBatch,
    ConsumerCursor,
    ConsumerSource,
    consumer,
)
from ultimat3.jobs.postgres import PostgresJobDriver, transaction


@pytest.fixture
async def app_db(database_url: str) -> AsyncIterator[tuple[AsyncConnectionPool, str]]:
    schema = f"x_cons_{uuid.uuid4().hex[:12]}"
    async with AsyncConnectionPool(database_url, min_size=1, max_size=4, open=False) as pool:
        async with pool.connection() as conn:
            await conn.execute(f'create schema "{schema}"')
            await conn.execute(
                f'create table "{schema}".orders (id int primary key, amount int not null, '
                "applied int not null default 1)"
            )
            await conn.execute(
                f'create table "{schema}".consumer_cursors (consumer text not null, '
                "key text not null, cursor text not null, primary key (consumer, key))"
            )
        try:
            yield pool, schema
        finally:
            async with pool.connection() as conn:
                await conn.execute(f'drop schema "{schema}" cascade')


async def test_handle_and_the_cursor_commit_in_one_postgres_transaction(
    app_db: tuple[AsyncConnectionPool, str], pg_driver: PostgresJobDriver
) -> None:
    pool, schema = app_db
    failures = {"left": 2}
    seen_cursors: list[str | None] = []

    async def stream(source: ConsumerSource) -> AsyncIterator[dict[str, int]]:
        seen_cursors.append(source.cursor)
        for i in range(int(source.cursor or 0), 25):
            yield {"id": i, "amount": i * 10}

    def _conn() -> psycopg.AsyncConnection[Any]:
        conn = current_connection()
        assert isinstance(conn, psycopg.AsyncConnection)
        return conn

    async def handle(batch: ConsumerBatch[dict[str, int]]) -> str:
        conn = _conn()
        async with conn.cursor() as cur:
            await cur.executemany(
                f'insert into "{schema}".orders (id, amount) values (%(id)s, %(amount)s) '
                "on conflict (id) do update set applied = orders.applied + 1",
                list(batch.items),
            )
        if batch.items[0]["id"] == 10 and failures["left"]:
            failures["left"] -= 1
            raise ConnectionError("the warehouse went away mid-batch")  # after the upsert
        return str(batch.items[-1]["id"] + 1)

    async def load(key: str) -> str | None:
        async with pool.connection() as conn:
            cur = await conn.execute(
                f'select cursor from "{schema}".consumer_cursors where consumer = %s and key = %s',
                ("orders", key),
            )
            row = await cur.fetchone()
        return None if row is None else str(row[0])

    async def save(key: str, next: str) -> None:
        await _conn().execute(
            f'insert into "{schema}".consumer_cursors values (%s, %s, %s) '
            "on conflict (consumer, key) do update set cursor = excluded.cursor",
            ("orders", key, next),
        )

    sync = consumer(
        name="sync-orders",
        tenant="none",
        keys=lambda: ["acct_1"],
        open=stream,
        handle=handle,
        cursor=ConsumerCursor(load=load, save=save),
        transaction=lambda: transaction(pool),
        batch=5,
        retry=Retry(attempts=5, delay=10, jitter="none"),
    )
    with swap_adapter(JOB_DRIVER, pg_driver):
        worker = job_worker(
            jobs=[sync, sync.arm], driver=pg_driver, handle_signals=False, poll_interval_ms=20
        )
        await worker.start()
        try:
            await sync.arm.enqueue({})
            deadline = time.monotonic() + 20
            while True:
                rows = await pg_driver.introspect.list(name="sync-orders")
                if rows and rows[0].state in ("done", "dead"):
                    break
                assert time.monotonic() < deadline, rows
                await asyncio.sleep(0.05)
        finally:
            await worker.stop()
    assert rows[0].state == "done"
    assert rows[0].attempts == 3
    assert seen_cursors == [None, "10", "10"]  # both failures rolled back: the cursor stayed
    async with pool.connection() as conn:
        applied = await (
            await conn.execute(f'select id, applied from "{schema}".orders order by id')
        ).fetchall()
        cursor = await (
            await conn.execute(f'select cursor from "{schema}".consumer_cursors')
        ).fetchall()
    assert applied == [(i, 1) for i in range(25)]  # every item once: the failed upserts rolled back
    assert cursor == [("25",)]
