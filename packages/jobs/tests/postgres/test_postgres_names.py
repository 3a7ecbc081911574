"""Hostile names: queue, job, tenant, key and event names with quotes, semicolons, 64+ bytes or
odd Unicode are stored and matched exactly, never spliced into SQL (notify channels included);
the one thing Postgres cannot hold, a NUL character, is refused by name."""

from __future__ import annotations

import secrets
from typing import Any

import psycopg
import pytest

from ultimat3.core import XError, new_id
from ultimat3.jobs.adapter import EnqueueRequest
from ultimat3.jobs.postgres import PostgresJobDriver, wake_channel

HOSTILE = [
    "it's",
    'say "hi"',
    "q; DROP TABLE x_jobs; --",
    "$1 %s %(name)s {x_jobs} ?",
    "x" * 300,
    "é" * 70,
    "名前",
    "🧨💥",
    "\u202eevil\u202c",
    "zero\u200bwidth",
    " padded ",
    "back\\slash",
    "new\nline\ttab",
]


@pytest.mark.parametrize("text", HOSTILE)
async def test_a_hostile_name_round_trips_exactly(pg_driver: PostgresJobDriver, text: str) -> None:
    r = EnqueueRequest(
        id=new_id(),
        run_id=new_id(),
        name=text,
        queue=text,
        payload={text: text},
        idempotency_key=text,
        max_attempts=2,
        tenant_id=text,
        concurrency_key=text,
    )
    assert (await pg_driver.enqueue(r)).deduped is False
    assert (await pg_driver.enqueue(r)).deduped is True
    [job] = await pg_driver.claim(
        queues=[text], limit=5, worker_id=text, visibility_timeout_ms=60_000
    )
    assert (job.name, job.queue, job.tenant_id, job.idempotency_key, job.payload) == (
        text,
        text,
        text,
        text,
        {text: text},
    )
    assert await pg_driver.steps.record(
        job.id, text, state="completed", worker_id=text, claim=job.claim, output=text
    )
    assert (await pg_driver.steps.load(job.id))[text].output == text
    assert await pg_driver.nack(
        job.id, worker_id=text, claim=job.claim, outcome="suspend", wait_event=text
    )
    assert await pg_driver.wake_waiters(text) == 1
    intro = pg_driver.introspect
    await intro.pause_queue(text)
    assert await intro.paused_queues() == [text]
    await intro.resume_queue(text)
    [row] = await intro.list(queue=text, name=text, tenant_id=text)
    assert row.id == r.id
    grant = await pg_driver.leases.acquire(text, limit=1, holder=text, ttl_ms=10_000)
    assert grant is not None and grant.key == text
    [stats] = await pg_driver.stats()
    assert stats.queue == text


async def test_hostile_queue_names_ride_the_notify_payload_safely(
    pg_driver: PostgresJobDriver, database_url: str, pg_schema: str
) -> None:
    channel = wake_channel(pg_schema)
    async with await psycopg.AsyncConnection.connect(database_url, autocommit=True) as listener:
        await listener.execute(psycopg.sql.SQL("LISTEN {}").format(psycopg.sql.Identifier(channel)))
        for i, text in enumerate(HOSTILE):
            await pg_driver.enqueue(
                EnqueueRequest(
                    id=new_id(),
                    run_id=new_id(),
                    name="n",
                    queue=text,
                    payload=None,
                    idempotency_key=f"k{i}",
                    max_attempts=1,
                )
            )
        got = [n.payload async for n in listener.notifies(timeout=0.5)]
    assert got == HOSTILE


@pytest.mark.parametrize("field", ["name", "queue", "idempotency_key", "tenant_id"])
async def test_a_nul_character_is_refused_naming_the_field(
    pg_driver: PostgresJobDriver, field: str
) -> None:
    values: dict[str, Any] = {
        "id": new_id(),
        "run_id": new_id(),
        "name": "n",
        "queue": "q",
        "payload": None,
        "idempotency_key": "k",
        "max_attempts": 1,
        field: "bad\x00name",
    }
    with pytest.raises(XError) as caught:
        await pg_driver.enqueue(EnqueueRequest(**values))
    assert caught.value.code == "X_INVARIANT"
    assert field in caught.value.message and "NUL" in caught.value.message
    assert await pg_driver.stats() == []


async def test_a_key_too_long_to_index_is_refused_not_crashed(
    pg_driver: PostgresJobDriver,
) -> None:
    huge = secrets.token_hex(5_000)  # incompressible: past btree's 2,704-byte entry limit
    with pytest.raises(XError) as caught:
        await pg_driver.enqueue(
            EnqueueRequest(
                id=new_id(),
                run_id=new_id(),
                name="n",
                queue="q",
                payload=None,
                idempotency_key=huge,
                max_attempts=1,
            )
        )
    assert caught.value.code == "X_INVARIANT"
    assert "enqueue of job" in caught.value.message


async def test_a_lone_surrogate_is_refused_not_crashed(pg_driver: PostgresJobDriver) -> None:
    for field in ("queue", "payload"):
        values: dict[str, Any] = {
            "id": new_id(),
            "run_id": new_id(),
            "name": "n",
            "queue": "q",
            "payload": None,
            "idempotency_key": "k",
            "max_attempts": 1,
        }
        values[field] = "bad\ud800" if field == "queue" else {"s": "bad\ud800"}
        for call in (pg_driver.enqueue, lambda r: pg_driver.enqueue_many([r])):
            with pytest.raises(XError) as caught:
                await call(EnqueueRequest(**values))
            assert caught.value.code == "X_INVARIANT" and "Unicode" in caught.value.message
    assert await pg_driver.stats() == []
