"""X_RATE_LIMITED raised by a body defers the run to its Retry-After WITHOUT counting the
attempt (it used to burn attempts and could dead-letter a run that was only throttled) — memory,
then Postgres (``engine``); transaction() inside an aborted run rethrows the reason."""

from __future__ import annotations

from typing import Any

import psycopg
import pytest
from psycopg_pool import AsyncConnectionPool
from pydantic import BaseModel

from ultimat3.core import AbortController, XError, current_connection, use_connection, use_signal
from ultimat3.jobs import Retry, execute_job, job
from ultimat3.jobs.postgres import transaction
from ultimat3_testkit.engine_drivers import Engine


class N(BaseModel):
    n: int


async def _throttled(input: N, step: Any, ctx: Any) -> None:
    raise XError("X_RATE_LIMITED", "the mail API said 429", meta={"retry_after_seconds": 30})


async def test_a_rate_limited_body_is_deferred_to_its_retry_after_uncounted(
    engine: Engine,
) -> None:
    throttled = job(
        input=N, idempotency_key=lambda i: f"rl:{i.n}", name="rl.throttled",
        retry=Retry(attempts=1), run=_throttled,
    )  # fmt: skip
    queued = await throttled.enqueue({"n": 1})
    before = await engine.driver.now_ms()
    [claimed] = await engine.driver.claim(
        queues=["default"], limit=1, worker_id="w", visibility_timeout_ms=30_000
    )
    assert claimed.attempt == claimed.max_attempts == 1  # its final attempt
    outcome = await execute_job(claimed, throttled, driver=engine.driver)
    assert outcome.outcome == "release" and outcome.delay_ms == 30_000
    row = await engine.driver.introspect.show(queued.id)
    assert row.state in ("ready", "delayed")  # not dead: only throttled
    assert row.attempts == 0  # the attempt was handed back uncounted
    assert row.run_at is not None
    assert row.run_at.timestamp() * 1000 >= before + 29_000
    assert row.last_error is not None and row.last_error["code"] == "X_RATE_LIMITED"


async def test_transaction_inside_an_aborted_run_rethrows_the_reason(database_url: str) -> None:
    controller = AbortController()
    controller.abort(XError("X_JOB_TIMEOUT", "the run passed its timeout"))
    async with AsyncConnectionPool(database_url, min_size=1, max_size=1, open=False) as pool:
        with use_signal(controller.signal), pytest.raises(XError) as caught:
            async with transaction(pool):
                raise AssertionError("the block ran")
        async with transaction(pool) as conn:  # a live (or no) signal: it opens as always
            assert (await (await conn.execute("SELECT 1")).fetchone()) == (1,)
    assert caught.value.code == "X_JOB_TIMEOUT"


async def test_use_connection_inside_an_aborted_run_rethrows_the_reason(database_url: str) -> None:
    controller = AbortController()
    controller.abort(XError("X_DRAINING", "worker w is draining"))
    ran: list[str] = []

    async def write(conn: psycopg.AsyncConnection[Any]) -> None:
        with use_connection(conn):
            ran.append("sync")
            await conn.execute("CREATE TEMP TABLE ghost (n int)")

    async def write_async(conn: psycopg.AsyncConnection[Any]) -> None:
        async with use_connection(conn):
            ran.append("async")

    async with await psycopg.AsyncConnection.connect(database_url) as conn:
        with use_signal(controller.signal):
            with pytest.raises(XError) as caught:
                await write(conn)
            with pytest.raises(XError) as again:
                await write_async(conn)
            async with use_connection(None):  # unbinding still works
                pass
        assert ran == [], "nothing in the block ran"
        assert caught.value.code == again.value.code == "X_DRAINING"
        assert current_connection() is None
        with use_connection(conn):  # no aborted signal: bound as always
            assert current_connection() is conn
