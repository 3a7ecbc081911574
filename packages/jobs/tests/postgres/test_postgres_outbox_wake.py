"""The relay's wake on Postgres: an idle relay loop publishes a staged row as soon as the app's
transaction commits (the stage's notification, heard on the outbox's own LISTEN session), long
before its next poll; a rollback wakes nothing; the wake proves itself with a probe and lifts the
idle ceiling to 5 s."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator

import psycopg
import pytest

from ultimat3.core import new_id
from ultimat3.jobs import relay_loop
from ultimat3.jobs.adapter import EnqueueRequest
from ultimat3.jobs.postgres import PostgresJobDriver, PostgresOutboxStore, postgres_outbox_store


def req(i: int) -> EnqueueRequest:
    return EnqueueRequest(
        id=new_id(),
        run_id=new_id(),
        name="outbox.woken",
        queue="q",
        payload={"i": i},
        idempotency_key=f"w{i}",
        max_attempts=2,
    )


@pytest.fixture
async def store(database_url: str, pg_schema: str) -> AsyncIterator[PostgresOutboxStore]:
    made = postgres_outbox_store(database_url, schema=pg_schema)
    try:
        yield made
    finally:
        await made.close()


async def _published(driver: PostgresJobDriver, count: int, within_s: float) -> bool:
    deadline = time.monotonic() + within_s
    while time.monotonic() < deadline:
        if len(await driver.introspect.list(name="outbox.woken")) >= count:
            return True
        await asyncio.sleep(0.02)
    return False


async def test_a_commit_wakes_the_idle_relay_and_a_rollback_does_not(
    store: PostgresOutboxStore, pg_driver: PostgresJobDriver, database_url: str
) -> None:
    # the poll alone would next pass 20 s after the first (empty) pass
    loop = relay_loop(store=store, driver=pg_driver, interval_ms=20_000, idle_poll_max_ms=60_000)
    await loop.start()
    try:
        handle = loop._wake_handle
        assert handle is not None and await handle.wait_proven(5.0)
        assert loop.stats().wake_proven
        async with await psycopg.AsyncConnection.connect(database_url) as conn:
            await store.stage(conn, [req(0)])
            await conn.rollback()
            await asyncio.sleep(0.3)
            assert loop.stats().wakes == 0, "a rolled-back stage sends nothing"
            await store.stage(conn, [req(1)])
            await conn.commit()
        assert await _published(pg_driver, 1, within_s=5.0), "woken by the stage's commit"
        for _ in range(250):  # the job is in; the pass marks the row, then counts it
            if loop.stats().published == 1:
                break
            await asyncio.sleep(0.02)
        assert loop.stats().wakes >= 1 and loop.stats().published == 1
    finally:
        await loop.stop()
    assert handle.backend_pid is None, "the LISTEN session is closed with the loop"


async def test_the_wake_redials_a_lost_session_and_catches_up(
    store: PostgresOutboxStore, database_url: str
) -> None:
    woken: list[float] = []
    wake = await store.start_wake(lambda: woken.append(time.monotonic()))
    try:
        assert await wake.wait_proven(5.0)
        pid = wake.backend_pid
        async with await psycopg.AsyncConnection.connect(database_url, autocommit=True) as admin:
            await admin.execute("SELECT pg_terminate_backend(%s)", (pid,))
        for _ in range(200):
            if wake.sessions >= 2 and woken:
                break
            await asyncio.sleep(0.05)
        assert wake.sessions >= 2 and wake.backend_pid not in (None, pid)
        assert woken, "a re-dialled session wakes the relay once for what it missed"
        assert await wake.wait_proven(5.0)
    finally:
        await wake.stop()
