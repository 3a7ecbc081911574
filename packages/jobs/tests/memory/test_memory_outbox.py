"""The memory outbox: staged rows are invisible until commit, gone on rollback, leased per relay
claim, and published or released by id."""

from __future__ import annotations

import pytest

from ultimat3.core import FrozenClock, XError, current_connection, new_id, use_connection
from ultimat3.jobs.adapter import EnqueueRequest, OutboxStore
from ultimat3.jobs.memory import (
    MemoryOutboxStore,
    MemoryTransaction,
    memory_outbox_store,
)


def req(n: int = 0) -> EnqueueRequest:
    return EnqueueRequest(
        id=new_id(),
        run_id=new_id(),
        name="j",
        queue="q",
        payload={"n": n, "tags": ["a"]},
        idempotency_key=f"k{n}",
        max_attempts=1,
    )


@pytest.fixture
def clock() -> FrozenClock:
    return FrozenClock()


@pytest.fixture
def store(clock: FrozenClock) -> MemoryOutboxStore:
    return memory_outbox_store(clock=clock)


async def ids(store: MemoryOutboxStore, limit: int = 100) -> list[str]:
    return [r.id for _row, r in await store.claim_batch(limit=limit, lease_ms=1000)]


def test_it_is_an_outbox_store_that_accepts_only_memory_transactions(
    store: MemoryOutboxStore,
) -> None:
    assert isinstance(store, OutboxStore)
    assert store.accepts(MemoryTransaction())
    assert not store.accepts(object())
    assert not store.accepts(None)


async def test_a_transaction_made_ambient_is_the_current_connection() -> None:
    tx = MemoryTransaction()
    async with use_connection(tx):
        assert current_connection() is tx
    assert current_connection() is not tx


async def test_staged_rows_are_visible_only_after_commit(store: MemoryOutboxStore) -> None:
    tx = MemoryTransaction()
    a, b = req(1), req(2)
    await store.stage(tx, [a, b])
    assert await ids(store) == []
    assert store.unpublished() == []
    tx.commit()
    assert tx.state == "committed"
    assert await ids(store) == [a.id, b.id]


async def test_a_rollback_drops_what_was_staged(store: MemoryOutboxStore) -> None:
    tx = MemoryTransaction()
    await store.stage(tx, [req(1)])
    tx.rollback()
    tx.rollback()
    assert tx.state == "rolled_back"
    assert await ids(store) == []
    assert store.unpublished() == []


async def test_as_a_context_manager_it_commits_or_rolls_back(store: MemoryOutboxStore) -> None:
    kept, lost = req(1), req(2)
    async with MemoryTransaction() as tx:
        await store.stage(tx, [kept])
    tx2 = MemoryTransaction()

    async def failing_action() -> None:
        with tx2:
            await store.stage(tx2, [lost])
            raise RuntimeError("the business write failed")

    with pytest.raises(RuntimeError):
        await failing_action()
    assert tx2.state == "rolled_back"
    with MemoryTransaction() as tx3:
        tx3.rollback()
    assert [r.id for r in store.unpublished()] == [kept.id]


async def test_rows_keep_commit_order_across_transactions(store: MemoryOutboxStore) -> None:
    first, second = MemoryTransaction(), MemoryTransaction()
    a, b, c = req(1), req(2), req(3)
    await store.stage(first, [a])
    await store.stage(second, [b])
    await store.stage(first, [c])
    second.commit()
    first.commit()
    assert await ids(store) == [b.id, a.id, c.id]


async def test_a_finished_transaction_refuses_more_work(store: MemoryOutboxStore) -> None:
    tx = MemoryTransaction()
    tx.commit()
    with pytest.raises(XError) as info:
        await store.stage(tx, [req()])
    assert info.value.code == "X_INVARIANT" and "committed" in info.value.message
    with pytest.raises(XError) as info:
        tx.commit()
    assert info.value.code == "X_INVARIANT" and "committed" in info.value.message
    rolled = MemoryTransaction()
    rolled.rollback()
    with pytest.raises(XError) as info:
        rolled.commit()
    assert info.value.code == "X_INVARIANT" and "rolled back" in info.value.message


async def test_stage_refuses_a_connection_it_cannot_join(store: MemoryOutboxStore) -> None:
    with pytest.raises(XError) as info:
        await store.stage(object(), [req()])
    assert info.value.code == "X_INVARIANT" and "object" in info.value.message


async def test_a_claimed_batch_is_leased_until_released_or_expired(
    store: MemoryOutboxStore, clock: FrozenClock
) -> None:
    async with MemoryTransaction() as tx:
        await store.stage(tx, [req(i) for i in range(5)])
    batch = await store.claim_batch(limit=2, lease_ms=1000)
    assert len(batch) == 2
    rest = await store.claim_batch(limit=10, lease_ms=1000)
    assert len(rest) == 3 and not {r for r, _ in batch} & {r for r, _ in rest}
    assert await store.claim_batch(limit=10, lease_ms=1000) == []
    await store.release([batch[0][0]])
    assert [r for r, _ in await store.claim_batch(limit=10, lease_ms=1000)] == [batch[0][0]]
    clock.advance(1000)
    assert len(await store.claim_batch(limit=10, lease_ms=1000)) == 5


async def test_published_rows_are_gone(store: MemoryOutboxStore, clock: FrozenClock) -> None:
    async with MemoryTransaction() as tx:
        await store.stage(tx, [req(1), req(2)])
    batch = await store.claim_batch(limit=10, lease_ms=1000)
    await store.mark_published_many([batch[0][0]])
    clock.advance(5000)
    assert [r.id for _, r in await store.claim_batch(limit=10, lease_ms=1000)] == [batch[1][1].id]
    await store.mark_published_many([batch[1][0]])
    assert store.unpublished() == []


async def test_no_caller_can_mutate_a_staged_request(store: MemoryOutboxStore) -> None:
    r = req(1)
    async with MemoryTransaction() as tx:
        await store.stage(tx, [r])
    r.payload["tags"].append("mutated")
    [(_row, claimed)] = await store.claim_batch(limit=1, lease_ms=10)
    assert claimed.payload == {"n": 1, "tags": ["a"]}
    claimed.payload["tags"].append("again")
    assert store.unpublished()[0].payload == {"n": 1, "tags": ["a"]}


async def test_claim_batch_refuses_a_non_positive_lease(store: MemoryOutboxStore) -> None:
    with pytest.raises(XError) as info:
        await store.claim_batch(limit=1, lease_ms=0)
    assert info.value.code == "X_INVARIANT" and "lease_ms 0" in info.value.message
