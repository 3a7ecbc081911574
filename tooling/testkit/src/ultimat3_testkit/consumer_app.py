"""A worker process running one consumer() over Postgres tables, for the SIGKILL test.

``python -m ultimat3_testkit.consumer_app --dsn ... --schema ...`` runs
``job_worker`` over the consumer ``orders-feed`` and its ``.arm`` on a Postgres driver. The
upstream is the table ``feed_upstream`` (read from the cursor on, in id order, until it ends);
``handle`` logs each delivery in ``feed_deliveries`` (committed on its own, whatever becomes of the
batch), then upserts the batch into ``feed_orders`` and lingers inside the transaction, where the
cursor (``feed_cursors``) is saved too. SIGTERM drains and exits 0.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import signal
from collections.abc import AsyncIterator
from typing import Any, Final

import psycopg
from psycopg import sql
from psycopg_pool import AsyncConnectionPool

from ultimat3.core import current_connection
from ultimat3.jobs import Retry, job_worker
from ultimat3.jobs.adapter import install_job_driver
from ultimat3.jobs.factories.consumer import (
    Consumer,
    ConsumerBatch,
    ConsumerCursor,
    ConsumerSource,
    consumer,
)
from ultimat3.jobs.postgres import postgres_job_driver, transaction

NAME: Final = "orders-feed"
KEY: Final = "orders"
BATCH: Final = 10
HANDLE_LINGER_S: Final = 0.05

FEED_DDL: Final = """
CREATE TABLE {upstream} (id integer PRIMARY KEY);
CREATE TABLE {orders} (id integer PRIMARY KEY, applied integer NOT NULL DEFAULT 1);
CREATE TABLE {cursors} (key text PRIMARY KEY, cursor text NOT NULL);
CREATE TABLE {deliveries} (
    seq bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    id  integer NOT NULL,
    pid integer NOT NULL
);
"""


def tables(schema: str) -> dict[str, sql.Identifier]:
    return {
        name: sql.Identifier(schema, f"feed_{name}")
        for name in ("upstream", "orders", "cursors", "deliveries")
    }


def _conn() -> psycopg.AsyncConnection[Any]:
    conn = current_connection()
    assert isinstance(conn, psycopg.AsyncConnection)
    return conn


def make_consumer(pool: AsyncConnectionPool[Any] | None, schema: str) -> Consumer:
    """The consumer; ``pool`` may be ``None`` where it is only enqueued."""
    t = tables(schema)

    def _pool() -> AsyncConnectionPool[Any]:
        assert pool is not None
        return pool

    async def stream(source: ConsumerSource) -> AsyncIterator[int]:
        after = int(source.cursor or 0)
        while True:
            async with _pool().connection() as conn:
                cur = await conn.execute(
                    sql.SQL("SELECT id FROM {} WHERE id >= %s ORDER BY id LIMIT 25").format(
                        t["upstream"]
                    ),
                    (after,),
                )
                page = [row[0] for row in await cur.fetchall()]
            if not page:
                return
            for item in page:
                yield item
            after = page[-1] + 1

    async def handle(batch: ConsumerBatch[int]) -> str:
        # its own connection: committed whatever becomes of the batch
        async with _pool().connection() as log, log.cursor() as cur:
            await cur.executemany(
                sql.SQL("INSERT INTO {} (id, pid) VALUES (%s, %s)").format(t["deliveries"]),
                [(item, os.getpid()) for item in batch.items],
            )
        async with _conn().cursor() as cur:
            await cur.executemany(
                sql.SQL(
                    "INSERT INTO {o} (id) VALUES (%s) "
                    "ON CONFLICT (id) DO UPDATE SET applied = {o}.applied + 1"
                ).format(o=t["orders"]),
                [(item,) for item in batch.items],
            )
        await asyncio.sleep(HANDLE_LINGER_S)  # mid-batch: the effect written, not committed
        return str(batch.items[-1] + 1)

    async def load(key: str) -> str | None:
        async with _pool().connection() as conn:
            cur = await conn.execute(
                sql.SQL("SELECT cursor FROM {} WHERE key = %s").format(t["cursors"]), (key,)
            )
            row = await cur.fetchone()
        return None if row is None else str(row[0])

    async def save(key: str, next: str) -> None:
        await _conn().execute(
            sql.SQL(
                "INSERT INTO {} (key, cursor) VALUES (%s, %s) "
                "ON CONFLICT (key) DO UPDATE SET cursor = excluded.cursor"
            ).format(t["cursors"]),
            (key, next),
        )

    return consumer(
        name=NAME,
        tenant="none",
        keys=lambda: [KEY],
        open=stream,
        handle=handle,
        cursor=ConsumerCursor(load=load, save=save),
        transaction=lambda: transaction(_pool()),
        batch=BATCH,
        retry=Retry(attempts=5, delay=10),
    )


async def main(dsn: str, schema: str) -> int:
    async with AsyncConnectionPool(dsn, min_size=1, max_size=4, open=False) as pool:
        driver = postgres_job_driver(dsn, schema=schema)
        install_job_driver(driver)
        feed = make_consumer(pool, schema)
        worker = job_worker(
            jobs=[feed, feed.arm],
            driver=driver,
            handle_signals=False,
            poll_interval_ms=50,
            visibility_timeout_ms=1_000,
        )
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(sig, stop.set)
        await worker.start()
        print("consumer-worker started", os.getpid(), flush=True)
        await stop.wait()
        await worker.drain()
        await worker.stop()
        await driver.close()
    return 0


if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("--dsn", required=True)
    parser.add_argument("--schema", required=True)
    args = parser.parse_args()
    raise SystemExit(asyncio.run(main(args.dsn, args.schema)))
