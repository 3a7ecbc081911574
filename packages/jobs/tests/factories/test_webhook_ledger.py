"""The webhook ledgers: memory and Postgres keep the same streak rules, and webhook() runs on the
Postgres driver with the Postgres ledger (real server, a schema of the test's own)."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from datetime import UTC, datetime
from typing import Any

import pytest

from ultimat3.core import XError, swap_adapter
from ultimat3.http.testing import loopback_server
from ultimat3.jobs import Retry, job_worker
from ultimat3.jobs.adapter import JOB_DRIVER
from ultimat3.jobs.factories.webhook import (
    WebhookDelivery,
    WebhookEndpoint,
    WebhookEvent,
    webhook,
)
from ultimat3.jobs.factories.webhook_ledger import (
    PostgresWebhookLedger,
    WebhookAttempt,
    WebhookLedger,
    memory_webhook_ledger,
    postgres_webhook_ledger,
)
from ultimat3.jobs.postgres import PostgresJobDriver

AT = datetime(2026, 12, 1, tzinfo=UTC)


def attempt(outcome: Any, n: int = 1, endpoint: str = "ep") -> WebhookAttempt:
    return WebhookAttempt(
        endpoint_id=endpoint,
        event_id=f"e{n}",
        attempt=n,
        status=500 if outcome == "failed" else 200,
        outcome=outcome,
        code=None,
        duration_ms=3,
        at=AT,
    )


@pytest.fixture
async def pg_ledger(database_url: str, pg_schema: str) -> AsyncIterator[PostgresWebhookLedger]:
    ledger = postgres_webhook_ledger(database_url, schema=pg_schema)
    await ledger.migrate()
    await ledger.migrate()  # idempotent
    try:
        yield ledger
    finally:
        await ledger.close()


async def streak_rules(ledger: Any) -> None:
    port: object = ledger
    assert isinstance(port, WebhookLedger)
    for outcome in ("failed", "rejected", "throttled", "refused", "failed"):
        await ledger.record(attempt(outcome))
    await ledger.record(attempt("failed", endpoint="other"))
    assert await ledger.failures_in_a_row("ep") == 3  # throttled and refused do not count
    await ledger.record(attempt("delivered"))
    assert await ledger.failures_in_a_row("ep") == 0
    await ledger.record(attempt("failed"))
    await ledger.disable("ep")
    await ledger.disable("ep")
    await ledger.enable("ep")
    assert await ledger.failures_in_a_row("ep") == 0
    assert await ledger.failures_in_a_row("other") == 1


async def test_the_memory_ledger_keeps_the_streak_rules() -> None:
    ledger = memory_webhook_ledger()
    await streak_rules(ledger)
    assert ledger.disabled == set()
    assert len(ledger.of("ep")) == 7


async def test_the_postgres_ledger_keeps_the_same_streak_rules(
    pg_ledger: PostgresWebhookLedger,
) -> None:
    await streak_rules(pg_ledger)
    rows = await pg_ledger.attempts("ep")
    assert [r.outcome for r in rows] == [
        "failed",
        "rejected",
        "throttled",
        "refused",
        "failed",
        "delivered",
        "failed",
    ]
    assert rows[0] == attempt("failed")
    await pg_ledger.disable("ep")
    assert await pg_ledger.is_disabled("ep")
    await pg_ledger.enable("ep")
    assert not await pg_ledger.is_disabled("ep")


def test_a_bad_identifier_is_refused() -> None:
    with pytest.raises(XError) as info:
        postgres_webhook_ledger("postgresql://x", table="Deliveries")
    assert info.value.code == "X_CONFIG_INVALID"


async def test_webhook_on_the_postgres_driver_with_the_postgres_ledger(
    pg_driver: PostgresJobDriver, pg_ledger: PostgresWebhookLedger
) -> None:
    answers = iter([500, 200])
    async with loopback_server(lambda r: (next(answers), {}, b"")) as server:

        async def endpoint(d: WebhookDelivery) -> WebhookEndpoint:
            enabled = not await pg_ledger.is_disabled(d.endpoint_id)
            return WebhookEndpoint(
                id=d.endpoint_id, url=server.url("/"), secret="s", enabled=enabled
            )

        deliver = webhook(
            name="pg.webhooks",
            tenant="none",
            endpoint=endpoint,
            event=lambda d: WebhookEvent(id=d.event_id, topic="t", body={"a": 1}),
            ledger=pg_ledger,
            allow_private=True,
            retry=Retry(attempts=3, delay="1ms", max_delay="1ms"),
        )
        worker = job_worker(jobs=[deliver], driver=pg_driver, handle_signals=False)
        with swap_adapter(JOB_DRIVER, pg_driver):
            queued = await deliver.enqueue(WebhookDelivery(endpoint_id="ep", event_id="ev"))
            for _ in range(200):
                await worker.run_pass()
                await worker.wait_idle()
                if len(await pg_ledger.attempts("ep")) == 2:
                    break
                await asyncio.sleep(0.01)
    assert [a.outcome for a in await pg_ledger.attempts("ep")] == ["failed", "delivered"]
    assert queued.deduped is False
