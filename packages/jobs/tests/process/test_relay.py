"""The outbox relay: committed staged rows reach the driver under their staged ids — the memory
driver and Postgres (``engine``), from the memory outbox store."""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import Any

import pytest
from pydantic import BaseModel

from ultimat3.core import XError, capture_log_events, swap_adapter, use_connection
from ultimat3.jobs import job, outbox_relay
from ultimat3.jobs.adapter import OUTBOX_STORE, EnqueueRequest
from ultimat3.jobs.memory import (
    MemoryOutboxStore,
    MemoryTransaction,
    memory_outbox_store,
)
from ultimat3_testkit.engine_drivers import Engine, EngineDriver


class N(BaseModel):
    n: int


async def _noop(input: N, step: Any, ctx: Any) -> None:
    return None


numbered = job(input=N, idempotency_key=lambda i: f"n:{i.n}", name="numbered", run=_noop)


class Flaky:
    """A driver whose batch enqueue fails, and whose single enqueue fails on one job."""

    def __init__(self, inner: EngineDriver, poison: int) -> None:
        self.inner = inner
        self.poison = poison
        self.batches = 0

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)

    async def enqueue_many(self, requests: Sequence[EnqueueRequest], **kw: Any) -> Any:
        self.batches += 1
        raise ConnectionError("the batch statement failed")

    async def enqueue(self, request: EnqueueRequest, **kw: Any) -> Any:
        if request.payload["n"] == self.poison:
            raise ConnectionError("poison row")
        return await self.inner.enqueue(request, **kw)


@pytest.fixture
def driver(engine: Engine) -> EngineDriver:
    """The memory driver, then Postgres: installed as JOB_DRIVER."""
    return engine.driver


@pytest.fixture
def store() -> Iterator[MemoryOutboxStore]:
    s = memory_outbox_store()
    with swap_adapter(OUTBOX_STORE, s):
        yield s


async def _stage(count: int) -> list[str]:
    with MemoryTransaction() as tx, use_connection(tx):
        results = await numbered.enqueue_many([{"n": i} for i in range(count)])
    return [r.id for r in results]


async def test_a_pass_publishes_the_committed_rows_under_their_staged_ids(
    driver: EngineDriver, store: MemoryOutboxStore
) -> None:
    ids = await _stage(3)
    assert await outbox_relay() == 3
    assert store.unpublished() == []
    rows = await driver.introspect.list()
    assert sorted(r.id for r in rows) == sorted(ids)
    assert await outbox_relay() == 0


async def test_a_batch_is_bounded_by_batch_size(
    driver: EngineDriver, store: MemoryOutboxStore
) -> None:
    await _stage(5)
    assert await outbox_relay(batch_size=2) == 2
    assert len(store.unpublished()) == 3


async def test_a_failed_batch_falls_back_to_the_row_loop_up_to_the_poison_row(
    driver: EngineDriver, store: MemoryOutboxStore
) -> None:
    ids = await _stage(4)
    flaky = Flaky(driver, poison=2)
    with capture_log_events() as events:
        published = await outbox_relay(store, flaky)
    assert published == 2
    assert flaky.batches == 1
    assert sorted(r.id for r in await driver.introspect.list()) == sorted(ids[:2])
    assert [r.id for r in store.unpublished()] == ids[2:]  # released, in order
    [failed] = [e for e in events if e["event"] == "jobs.outbox.publish-failed"]
    assert failed["job_id"] == ids[2]
    assert failed["level"] == "error"
    assert await outbox_relay(store, driver) == 2  # the released rows go next pass


async def test_a_batch_republished_after_a_crash_before_its_mark_adds_no_row(
    driver: EngineDriver, store: MemoryOutboxStore
) -> None:
    await _stage(2)
    batch = await store.claim_batch(limit=10, lease_ms=1)
    await driver.enqueue_many([r for _, r in batch])  # published, then the relay died
    await store.release([rid for rid, _ in batch])
    assert await outbox_relay() == 2
    assert len(await driver.introspect.list()) == 2


class OneByOne:
    """A store that marks one row at a time (``mark_published``) and has no batch mark."""

    def __init__(self, inner: MemoryOutboxStore) -> None:
        self.inner = inner
        self.marked: list[str] = []

    def accepts(self, connection: object) -> bool:
        return self.inner.accepts(connection)

    async def stage(self, connection: object, requests: Sequence[EnqueueRequest]) -> None:
        await self.inner.stage(connection, requests)

    async def claim_batch(self, *, limit: int, lease_ms: int) -> list[tuple[str, EnqueueRequest]]:
        return await self.inner.claim_batch(limit=limit, lease_ms=lease_ms)

    async def release(self, row_ids: Sequence[str]) -> None:
        await self.inner.release(row_ids)

    async def mark_published(self, row_id: str) -> None:
        self.marked.append(row_id)
        await self.inner.mark_published_many([row_id])


class NoMark(OneByOne):
    mark_published = None  # type: ignore[assignment]


async def test_a_store_without_mark_published_many_marks_row_by_row(
    driver: EngineDriver, store: MemoryOutboxStore
) -> None:
    ids = await _stage(3)
    one = OneByOne(store)
    assert not hasattr(one, "mark_published_many")
    assert await outbox_relay(one, driver) == 3  # type: ignore[arg-type]
    assert len(one.marked) == 3, "each published row marked once, by mark_published"
    assert store.unpublished() == []
    assert await outbox_relay(one, driver) == 0, "nothing is published twice"  # type: ignore[arg-type]
    assert sorted(r.id for r in await driver.introspect.list()) == sorted(ids)


async def test_a_store_that_cannot_mark_is_refused_before_it_republishes(
    driver: EngineDriver, store: MemoryOutboxStore
) -> None:
    await _stage(2)
    with pytest.raises(XError) as caught:
        await outbox_relay(NoMark(store), driver)  # type: ignore[arg-type]
    assert caught.value.code == "X_CONFIG_INVALID"
    assert "mark_published_many" in caught.value.message and caught.value.fix
    assert await driver.introspect.list() == [], "refused before anything was published"
    assert len(store.unpublished()) == 2
    assert await outbox_relay(store, driver) == 2, "nothing was left leased"
