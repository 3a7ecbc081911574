"""A consumer's worker process SIGKILLed mid-batch and another started: every item applied, the
cursor never ahead of the data, the items after the last committed cursor delivered again (at
least once) and none skipped."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from collections.abc import Iterator

import psycopg
import pytest
from psycopg import sql

from ultimat3.core import swap_adapter
from ultimat3.jobs.adapter import JOB_DRIVER
from ultimat3.jobs.postgres import postgres_job_driver
from ultimat3_testkit.consumer_app import FEED_DDL, KEY, make_consumer, tables
from ultimat3_testkit.faults import until

ITEMS = 150


class Feed:
    """Reads over the feed tables, each on a short autocommit connection."""

    def __init__(self, url: str, schema: str) -> None:
        self.url = url
        self.t = tables(schema)

    async def rows(self, query: str, params: tuple[object, ...] = ()) -> list[tuple[object, ...]]:
        async with await psycopg.AsyncConnection.connect(self.url, autocommit=True) as conn:
            cur = await conn.execute(sql.SQL(query).format(**self.t), params)
            return await cur.fetchall() if cur.description else []

    async def cursor(self) -> int:
        rows = await self.rows("SELECT cursor FROM {cursors} WHERE key = %s", (KEY,))
        return int(str(rows[0][0])) if rows else 0

    async def consistent(self) -> int:
        """The cursor, checked against the data in ONE snapshot: every item before it applied,
        none at or past it (the effect and the cursor commit together)."""
        async with (
            await psycopg.AsyncConnection.connect(self.url) as conn,
            conn.transaction(),
        ):
            await conn.execute("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ")
            cur = await conn.execute(
                sql.SQL("SELECT cursor FROM {cursors} WHERE key = %s").format(**self.t), (KEY,)
            )
            row = await cur.fetchone()
            at = int(str(row[0])) if row else 0
            cur = await conn.execute(
                sql.SQL("SELECT id, applied FROM {orders} ORDER BY id").format(**self.t)
            )
            applied = await cur.fetchall()
        assert applied == [(i, 1) for i in range(at)], f"the data and the cursor {at} disagree"
        return at

    async def delivered_by(self, pid: int) -> list[int]:
        rows = await self.rows("SELECT id FROM {deliveries} WHERE pid = %s ORDER BY seq", (pid,))
        return [int(str(r[0])) for r in rows]


@pytest.fixture
def processes() -> Iterator[list[subprocess.Popen[bytes]]]:
    started: list[subprocess.Popen[bytes]] = []
    try:
        yield started
    finally:
        for proc in started:
            if proc.poll() is None:
                os.kill(proc.pid, signal.SIGKILL)
            proc.wait(timeout=10)


def _start(url: str, schema: str, started: list[subprocess.Popen[bytes]]) -> int:
    proc = subprocess.Popen(
        [sys.executable, "-m", "ultimat3_testkit.consumer_app", "--dsn", url, "--schema", schema],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    started.append(proc)
    return proc.pid


async def test_a_consumer_killed_mid_batch_loses_nothing_and_skips_nothing(
    db_url: str, schema: str, processes: list[subprocess.Popen[bytes]]
) -> None:
    feed = Feed(db_url, schema)
    async with await psycopg.AsyncConnection.connect(db_url, autocommit=True) as conn:
        await conn.execute(sql.SQL(FEED_DDL).format(**tables(schema)))
        await conn.execute(
            sql.SQL("INSERT INTO {} SELECT generate_series(0, %s)").format(
                tables(schema)["upstream"]
            ),
            (ITEMS - 1,),
        )
    driver = postgres_job_driver(db_url, schema=schema)
    try:
        with swap_adapter(JOB_DRIVER, driver):
            queued = await make_consumer(None, schema).enqueue({"key": KEY})
    finally:
        await driver.close()

    first = _start(db_url, schema, processes)

    async def mid_batch() -> bool:
        at = await feed.cursor()
        return at >= 30 and any(i >= at for i in await feed.delivered_by(first))

    await until(mid_batch, timeout_s=30, what="the first worker to be inside a batch")
    os.kill(first, signal.SIGKILL)
    processes[0].wait(timeout=10)
    committed = await feed.consistent()
    in_hand = sorted({i for i in await feed.delivered_by(first) if i >= committed})
    assert in_hand, "the kill did not land mid-batch"
    assert committed < ITEMS

    second = _start(db_url, schema, processes)

    async def finished() -> bool:
        await feed.consistent()  # at every poll: never ahead of the data
        rows = await feed.rows("SELECT state FROM {x_jobs} WHERE id = %s", (queued.id,))
        return bool(rows and rows[0][0] == "done")

    feed.t["x_jobs"] = sql.Identifier(schema, "x_jobs")
    await until(finished, timeout_s=60, what="the second worker to finish the stream")
    assert await feed.consistent() == ITEMS  # every item applied, each exactly once
    again = set(await feed.delivered_by(second))
    assert set(in_hand) <= again  # the batch in hand at the kill was delivered again
    assert min(again) == committed  # from the last committed cursor: nothing before it again
    delivered = {int(str(r[0])) for r in await feed.rows("SELECT id FROM {deliveries}")}
    assert delivered == set(range(ITEMS))  # none skipped
    processes[1].send_signal(signal.SIGTERM)
    assert processes[1].wait(timeout=20) == 0
