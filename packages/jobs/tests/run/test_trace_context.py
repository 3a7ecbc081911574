"""The enqueuing request's trace context is stored on the row and handed back with each claim:
through ``enqueue``, ``enqueue_many`` and the outbox (memory, then Postgres), and nothing at all
when no span was active."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any
from uuid import uuid4

import psycopg
import pytest
from opentelemetry import context as otel_context
from opentelemetry import trace
from opentelemetry.trace import NonRecordingSpan, SpanContext, TraceFlags
from pydantic import BaseModel

from ultimat3.core import swap_adapter, use_connection
from ultimat3.jobs import job, outbox_relay
from ultimat3.jobs.adapter import JOB_DRIVER, OUTBOX_STORE, ClaimedJob
from ultimat3.jobs.memory import MemoryTransaction, memory_job_driver, memory_outbox_store
from ultimat3.jobs.postgres import postgres_outbox_store
from ultimat3_testkit.engine_drivers import Engine, EngineDriver


class Ping(BaseModel):
    n: int


async def _noop(input: Any, step: Any, ctx: Any) -> None:
    return None


ping = job(
    input=Ping,
    idempotency_key=lambda i: f"ping:{i.n}:{uuid4()}",
    name="trace.ping",
    queue="trace-q",
    run=_noop,
)


@pytest.fixture
def span() -> Iterator[SpanContext]:
    """A valid, sampled span made current (the API alone: no SDK needed to carry a context)."""
    context = SpanContext(
        trace_id=0x0AF7651916CD43DD8448EB211C80319C,
        span_id=0xB7AD6B7169203331,
        is_remote=False,
        trace_flags=TraceFlags(TraceFlags.SAMPLED),
    )
    with trace.use_span(NonRecordingSpan(context), end_on_exit=False):
        yield context


TRACEPARENT = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"


async def _claim(driver: Any) -> list[ClaimedJob]:
    got: list[ClaimedJob] = await driver.claim(
        queues=["trace-q"], limit=50, worker_id="w", visibility_timeout_ms=30_000
    )
    return got


async def test_an_enqueue_under_a_span_stores_its_traceparent(
    engine: Engine, span: SpanContext
) -> None:
    one = await ping.enqueue({"n": 1})
    many = await ping.enqueue_many([{"n": 2}, {"n": 3}])
    got = {j.id: j.trace_context for j in await _claim(engine.driver)}
    assert set(got) == {one.id, *(r.id for r in many)}
    for stored in got.values():
        assert stored is not None and stored["traceparent"] == TRACEPARENT


async def test_with_no_span_active_nothing_is_stored(engine: Engine) -> None:
    assert not trace.get_current_span().get_span_context().is_valid
    await ping.enqueue({"n": 1})
    await ping.enqueue_many([{"n": 2}, {"n": 3}])
    got = await _claim(engine.driver)
    assert len(got) == 3 and all(j.trace_context is None for j in got)


async def test_an_invalid_span_stores_nothing(engine: Engine) -> None:
    with trace.use_span(trace.INVALID_SPAN):
        await ping.enqueue({"n": 1})
    (claimed,) = await _claim(engine.driver)
    assert claimed.trace_context is None


async def test_the_context_survives_the_memory_outbox(engine: Engine, span: SpanContext) -> None:
    driver: EngineDriver = engine.driver
    store = memory_outbox_store()
    with swap_adapter(OUTBOX_STORE, store):
        with MemoryTransaction() as tx, use_connection(tx):
            staged = await ping.enqueue_many([{"n": 1}, {"n": 2}])
        # the relay publishes with no span of its own request: the stored one is kept
        with trace.use_span(trace.INVALID_SPAN):
            assert await outbox_relay(store, driver) == 2
    got = await _claim(driver)
    assert {j.id for j in got} == {r.id for r in staged}
    assert all(j.trace_context and j.trace_context["traceparent"] == TRACEPARENT for j in got)


async def test_the_context_survives_the_postgres_outbox(
    database_url: str, pg_schema: str, span: SpanContext
) -> None:
    driver = memory_job_driver()  # a driver that cannot join the app's transaction
    store = postgres_outbox_store(database_url, schema=pg_schema)
    try:
        with swap_adapter(JOB_DRIVER, driver), swap_adapter(OUTBOX_STORE, store):
            async with await psycopg.AsyncConnection.connect(database_url) as conn:
                with use_connection(conn):
                    staged = await ping.enqueue({"n": 1})
                    bare_ctx = trace.set_span_in_context(trace.INVALID_SPAN)
                    token = otel_context.attach(bare_ctx)
                    try:
                        bare = await ping.enqueue({"n": 2})
                    finally:
                        otel_context.detach(token)
                await conn.commit()
            assert await outbox_relay(store, driver) == 2
    finally:
        await store.close()
    got = {j.id: j.trace_context for j in await _claim(driver)}
    assert got[bare.id] is None
    stored = got[staged.id]
    assert stored is not None and stored["traceparent"] == TRACEPARENT


async def test_an_enqueue_inside_a_postgres_transaction_stores_it(
    pg_engine: Engine, span: SpanContext
) -> None:
    assert pg_engine.database_url is not None
    async with await psycopg.AsyncConnection.connect(pg_engine.database_url) as conn:
        with use_connection(conn):
            one = await ping.enqueue({"n": 1})
            many = await ping.enqueue_many([{"n": 2}, {"n": 3}])
        await conn.commit()
    got = {j.id: j.trace_context for j in await _claim(pg_engine.driver)}
    assert set(got) == {one.id, *(r.id for r in many)}
    assert all(c is not None and c["traceparent"] == TRACEPARENT for c in got.values())
