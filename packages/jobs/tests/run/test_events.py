"""publish_event and the event buses: transactions, markers, waking waiters — on the memory bus
and on the Postgres bus (``engine``), each in its own kind of transaction."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import UTC, datetime

import psycopg
import pytest

from ultimat3.core import (
    AbortController,
    FrozenClock,
    XError,
    swap_adapter,
    use_clock,
    use_connection,
    use_signal,
)
from ultimat3.jobs import MemoryEventBus, memory_event_bus, publish_event
from ultimat3.jobs.adapter import EVENT_BUS, EnqueueRequest
from ultimat3.jobs.memory import MemoryTransaction, memory_job_driver
from ultimat3_testkit.engine_drivers import Engine, EngineBus, EngineDriver


@pytest.fixture
def driver(engine: Engine) -> EngineDriver:
    """The memory driver, then Postgres."""
    return engine.driver


@pytest.fixture
def bus(engine: Engine) -> Iterator[EngineBus]:
    """The driver's own bus (memory, then Postgres), installed as EVENT_BUS."""
    with swap_adapter(EVENT_BUS, engine.bus):
        yield engine.bus


@pytest.fixture
def memory_bus() -> Iterator[MemoryEventBus]:
    """The memory bus alone, for the tests of its MemoryTransaction."""
    with use_clock(FrozenClock()):
        b = memory_event_bus(memory_job_driver())
        with swap_adapter(EVENT_BUS, b):
            yield b


async def test_a_publish_outside_a_transaction_is_visible_at_once(bus: EngineBus) -> None:
    before = await bus.marker()
    event_id = await publish_event("order.approved", {"at": datetime(2026, 1, 2, tzinfo=UTC)})
    assert event_id
    assert await bus.find_after("order.approved", before) == [{"at": "2026-01-02T00:00:00Z"}]
    assert await bus.find_after("other", before) == []
    assert await bus.find_after("order.approved", await bus.marker()) == []


# memory only: a MemoryTransaction (the Postgres variant below uses psycopg transactions)
async def test_a_publish_in_a_transaction_lands_on_commit_and_vanishes_on_rollback(
    memory_bus: MemoryEventBus,
) -> None:
    bus = memory_bus
    start = await bus.marker()
    kept = MemoryTransaction()
    dropped = MemoryTransaction()
    with use_connection(kept):
        await publish_event("e", {"n": 1})
    with use_connection(dropped):
        await publish_event("e", {"n": 2})
    assert await bus.find_after("e", start) == []
    kept.commit()
    dropped.rollback()
    assert await bus.find_after("e", start) == [{"n": 1}]
    assert bus.events("e") == [{"n": 1}]


# memory only: a MemoryTransaction (the Postgres variant below uses a psycopg transaction)
async def test_an_event_committed_after_a_marker_is_after_it_whenever_it_was_published(
    memory_bus: MemoryEventBus,
) -> None:
    bus = memory_bus
    tx = MemoryTransaction()
    with use_connection(tx):
        await publish_event("e", {"n": 1})  # published first ...
    marker = await bus.marker()  # ... the wait begins ...
    tx.commit()  # ... and the commit comes after it
    assert await bus.find_after("e", marker) == [{"n": 1}]


async def test_on_postgres_a_publish_in_a_transaction_lands_on_commit_and_vanishes_on_rollback(
    pg_engine: Engine,
) -> None:
    bus = pg_engine.bus
    assert pg_engine.database_url is not None
    start = await bus.marker()
    with swap_adapter(EVENT_BUS, bus):
        async with (
            await psycopg.AsyncConnection.connect(pg_engine.database_url) as kept,
            await psycopg.AsyncConnection.connect(pg_engine.database_url) as dropped,
        ):
            with use_connection(kept):
                await publish_event("e", {"n": 1})
            with use_connection(dropped):
                await publish_event("e", {"n": 2})
            assert await bus.find_after("e", start) == []  # neither is committed
            await kept.commit()
            await dropped.rollback()
    assert await bus.find_after("e", start) == [{"n": 1}]


async def test_on_postgres_an_event_committed_after_a_marker_is_after_it(
    pg_engine: Engine,
) -> None:
    bus = pg_engine.bus
    assert pg_engine.database_url is not None
    with swap_adapter(EVENT_BUS, bus):
        async with await psycopg.AsyncConnection.connect(pg_engine.database_url) as tx:
            with use_connection(tx):
                await publish_event("e", {"n": 1})  # published first ...
            await publish_event("other", {})  # (later transactions commit meanwhile)
            before = await bus.marker()  # ... the wait begins ...
            await publish_event("e", {"n": 2})  # (one committed after the marker, plainly)
            await tx.commit()  # ... and the commit comes after it
    after = await bus.marker()
    assert sorted(e["n"] for e in await bus.find_after("e", before)) == [1, 2]
    assert await bus.find_after("e", after) == []


async def test_a_publish_wakes_the_runs_waiting_on_the_event(
    driver: EngineDriver, bus: EngineBus
) -> None:
    await driver.enqueue(
        EnqueueRequest(
            id="0193a0b2-7c4d-7e8f-9a0b-1c2d3e4f5a6b",
            run_id="0193a0b2-7c4d-7e8f-9a0b-1c2d3e4f5a6c",
            name="waiter",
            queue="q",
            payload={},
            idempotency_key="k",
            max_attempts=1,
        )
    )
    [c] = await driver.claim(queues=["q"], limit=1, worker_id="w", visibility_timeout_ms=1000)
    now = await driver.now_ms()
    await driver.nack(
        c.id,
        worker_id="w",
        claim=c.claim,
        outcome="suspend",
        run_at_ms=now + 30_000,
        wait_event="e",
    )
    assert (
        await driver.claim(queues=["q"], limit=1, worker_id="w", visibility_timeout_ms=1000) == []
    )  # suspended for 30 s
    await publish_event("e", {})
    claimed = await driver.claim(queues=["q"], limit=1, worker_id="w", visibility_timeout_ms=1000)
    assert [x.id for x in claimed] == [c.id]


async def test_a_connection_that_is_no_transaction_is_refused(bus: EngineBus) -> None:
    with use_connection(object()), pytest.raises(XError) as exc:
        await publish_event("e", {})
    assert exc.value.code == "X_INVARIANT"
    assert exc.value.fix


async def test_publish_event_needs_a_bus(driver: EngineDriver) -> None:
    with pytest.raises(XError) as exc:
        await publish_event("e", {})
    assert exc.value.code == "X_ADAPTER_MISSING"


async def test_a_cancelled_body_publishes_nothing(bus: EngineBus) -> None:
    start = await bus.marker()
    controller = AbortController()
    controller.abort(XError("X_JOB_TIMEOUT", "late"))
    with use_signal(controller.signal), pytest.raises(XError) as exc:
        await publish_event("e", {})
    assert exc.value.code == "X_JOB_TIMEOUT"
    assert await bus.find_after("e", start) == []


async def test_an_empty_event_name_and_a_foreign_marker_are_refused(bus: EngineBus) -> None:
    with pytest.raises(XError) as exc:
        await publish_event("", {})
    assert exc.value.code == "X_INVARIANT"
    with pytest.raises(XError) as exc:
        await bus.find_after("e", "not-a-marker")
    assert exc.value.code == "X_INVARIANT"


async def test_an_unserialisable_payload_is_refused(bus: EngineBus) -> None:
    with pytest.raises(XError) as exc:
        await publish_event("e", {"raw": b"\x00"})
    assert exc.value.code == "X_STEP_OUTPUT_UNSERIALIZABLE"
