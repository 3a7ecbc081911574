"""The Postgres outbox store and event bus: staged rows live and die with the app's transaction,
the relay moves them in staging order without ever adding a row twice, and a published event
wakes its waiters in the same statement and is "after" every wait that began before its commit."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

import psycopg
import pytest

from ultimat3.core import XError, new_id
from ultimat3.jobs import outbox_relay
from ultimat3.jobs.adapter import EnqueueRequest
from ultimat3.jobs.postgres import (
    PostgresJobDriver,
    PostgresOutboxStore,
    outbox_channel,
    postgres_event_bus,
    postgres_outbox_store,
)


def req(i: int, queue: str = "q", **kw: object) -> EnqueueRequest:
    return EnqueueRequest(
        id=new_id(),
        run_id=new_id(),
        name="outbox.job",
        queue=queue,
        payload={"i": i},
        idempotency_key=f"k{i}",
        max_attempts=2,
        **kw,  # type: ignore[arg-type]
    )


@pytest.fixture
async def store(database_url: str, pg_schema: str) -> AsyncIterator[PostgresOutboxStore]:
    made = postgres_outbox_store(database_url, schema=pg_schema)
    try:
        yield made
    finally:
        await made.close()


async def test_staged_rows_commit_or_vanish_with_the_transaction(
    store: PostgresOutboxStore, database_url: str
) -> None:
    kept = [req(i, tenant_id="t", delay_ms=5, concurrency_key="c") for i in range(3)]
    async with await psycopg.AsyncConnection.connect(database_url) as conn:
        assert store.accepts(conn) and not store.accepts(object())
        await store.stage(conn, [req(9)])
        await conn.rollback()
        await store.stage(conn, kept)
        assert await store.claim_batch(limit=10, lease_ms=30_000) == [], "an uncommitted row"
        await conn.commit()
    batch = await store.claim_batch(limit=10, lease_ms=30_000)
    assert [r for _, r in batch] == kept
    assert [int(i) for i, _ in batch] == sorted(int(i) for i, _ in batch)


async def test_claims_lease_rows_release_returns_them_and_publish_deletes_them(
    store: PostgresOutboxStore, database_url: str
) -> None:
    async with await psycopg.AsyncConnection.connect(database_url) as conn:
        await store.stage(conn, [req(i) for i in range(5)])
        await conn.commit()
    first = await store.claim_batch(limit=3, lease_ms=30_000)
    second = await store.claim_batch(limit=10, lease_ms=30_000)
    assert len(first) == 3 and len(second) == 2
    assert {i for i, _ in first}.isdisjoint(i for i, _ in second)
    assert await store.claim_batch(limit=10, lease_ms=30_000) == []
    await store.release([i for i, _ in first])
    again = await store.claim_batch(limit=10, lease_ms=50)
    assert [i for i, _ in again] == [i for i, _ in first]
    await asyncio.sleep(0.2)
    lapsed = await store.claim_batch(limit=10, lease_ms=30_000)
    assert [i for i, _ in lapsed] == [i for i, _ in first], "a lapsed lease is re-offered"
    await store.mark_published_many([i for i, _ in first + second])
    await store.release([i for i, _ in first])
    assert await store.claim_batch(limit=10, lease_ms=30_000) == []


async def test_the_relay_publishes_in_order_and_a_republish_adds_no_row(
    store: PostgresOutboxStore, pg_driver: PostgresJobDriver, database_url: str
) -> None:
    staged = [req(i) for i in range(1200)]
    async with await psycopg.AsyncConnection.connect(database_url) as conn:
        await store.stage(conn, staged)
        await conn.commit()
    crashed = await store.claim_batch(limit=500, lease_ms=30_000)
    await pg_driver.enqueue_many([r for _, r in crashed])  # then the relay "died" before its mark
    await store.release([i for i, _ in crashed])
    moved = 0
    while (n := await outbox_relay(store, pg_driver, batch_size=500)) > 0:
        moved += n
    assert moved == 1200
    [stats] = await pg_driver.stats()
    assert stats.ready == 1200
    rows = await pg_driver.introspect.list(limit=200)
    assert {r.id for r in rows} <= {r.id for r in staged}


async def test_two_relays_never_share_a_row(store: PostgresOutboxStore, database_url: str) -> None:
    async with await psycopg.AsyncConnection.connect(database_url) as conn:
        await store.stage(conn, [req(i) for i in range(400)])
        await conn.commit()
    batches = await asyncio.gather(
        *(store.claim_batch(limit=60, lease_ms=30_000) for _ in range(8))
    )
    ids = [i for b in batches for i, _ in b]
    assert len(ids) == len(set(ids)) == 400
    assert all(len(b) <= 60 for b in batches)


async def test_a_stage_notifies_the_relay_channel_at_commit(
    store: PostgresOutboxStore, database_url: str, pg_schema: str
) -> None:
    channel = outbox_channel(pg_schema)
    async with await psycopg.AsyncConnection.connect(database_url, autocommit=True) as listener:
        await listener.execute(psycopg.sql.SQL("LISTEN {}").format(psycopg.sql.Identifier(channel)))
        async with await psycopg.AsyncConnection.connect(database_url) as conn:
            await store.stage(conn, [req(1)])
            await conn.rollback()
            assert [n async for n in listener.notifies(timeout=0.3)] == []
            await store.stage(conn, [req(2)])
            await conn.commit()
        assert [n.channel async for n in listener.notifies(timeout=0.5)] == [channel]


async def test_outbox_refusals_name_the_offence(store: PostgresOutboxStore) -> None:
    with pytest.raises(XError) as caught:
        await store.stage(object(), [req(1)])
    assert caught.value.code == "X_INVARIANT" and "object" in caught.value.message
    with pytest.raises(XError) as caught:
        await store.claim_batch(limit=1, lease_ms=0)
    assert caught.value.code == "X_INVARIANT" and "lease_ms" in caught.value.message
    with pytest.raises(XError) as caught:
        await store.mark_published_many(["nope"])
    assert caught.value.code == "X_INVARIANT" and "nope" in caught.value.message


# --- the event bus ----------------------------------------------------------------------------


async def test_a_publish_wakes_its_waiters_in_the_same_statement(
    pg_driver: PostgresJobDriver,
) -> None:
    bus = postgres_event_bus(pg_driver)
    assert bus.default_poll_ms == 15 * 60_000
    await pg_driver.enqueue(req(1))
    [job] = await pg_driver.claim(
        queues=["q"], limit=1, worker_id="w", visibility_timeout_ms=60_000
    )
    far = await pg_driver.now_ms() + 3_600_000
    assert await pg_driver.nack(
        job.id,
        worker_id="w",
        claim=job.claim,
        outcome="suspend",
        run_at_ms=far,
        wait_event="order.paid",
    )
    assert (
        await pg_driver.claim(queues=["q"], limit=1, worker_id="w", visibility_timeout_ms=1) == []
    )
    event_id = await bus.publish("order.paid", {"order": 7})
    assert event_id.isdigit()
    [again] = await pg_driver.claim(
        queues=["q"], limit=1, worker_id="w", visibility_timeout_ms=60_000
    )
    assert again.id == job.id


async def test_find_after_sees_every_event_the_markers_snapshot_could_not(
    pg_driver: PostgresJobDriver, database_url: str
) -> None:
    bus = postgres_event_bus(pg_driver)
    await bus.publish("e", {"n": "before"})
    async with await psycopg.AsyncConnection.connect(database_url) as slow:
        await bus.publish("e", {"n": "in flight at the marker"}, connection=slow)
        marker = await bus.marker()
        await bus.publish("e", {"n": "after"})
        await bus.publish("other", {"n": "other event"})
        async with await psycopg.AsyncConnection.connect(database_url) as dropped:
            await bus.publish("e", {"n": "rolled back"}, connection=dropped)
            await dropped.rollback()
        assert await bus.find_after("e", marker) == [{"n": "after"}]
        await slow.commit()
    assert await bus.find_after("e", marker) == [
        {"n": "in flight at the marker"},
        {"n": "after"},
    ]
    assert await bus.find_after("e", marker, limit=1) == [{"n": "in flight at the marker"}]
    assert await bus.find_after("e", await bus.marker()) == []
    with pytest.raises(XError) as caught:
        await bus.find_after("e", "not-a-marker")
    assert caught.value.code == "X_INVARIANT" and "not-a-marker" in caught.value.message
    with pytest.raises(XError) as caught:
        await bus.publish("e", 1, connection=object())
    assert caught.value.code == "X_INVARIANT"
