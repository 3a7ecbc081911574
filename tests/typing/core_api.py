"""Typing examples for ultimat3.core (checked by mypy --strict in CI)."""

from __future__ import annotations

import random
from datetime import timedelta
from decimal import Decimal
from typing import Any, Protocol, assert_type

from ultimat3.core import (
    SYSTEM_ACTOR,
    AbortController,
    Actor,
    Clock,
    FrozenClock,
    JsonValue,
    Money,
    Port,
    RetryClass,
    Signal,
    VerifiedWebhook,
    XError,
    adapter,
    any_signal,
    backoff_delay,
    capture_log_events,
    cross_tenant,
    current_clock,
    current_connection,
    installed_adapter,
    log_event,
    new_id,
    parse_duration,
    retry_classification,
    run_to_completion,
    sign_webhook,
    swap_adapter,
    to_json_form,
    use_actor,
    use_connection,
    verify_webhook_signature,
)


class Mailer(Protocol):
    def send(self, to: str) -> None: ...


MAILER: Port[Mailer] = Port("mailer", fix="install_adapter(MAILER, smtp_mailer())")


class FakeMailer:
    def send(self, to: str) -> None:
        return None


def errors() -> None:
    e = XError("X_JOB_NOT_FOUND", meta={"id": "x"})
    assert_type(e.code, str)
    assert_type(e.fix, str | None)
    assert_type(e.status, int | None)
    assert_type(e.retry, RetryClass)
    assert_type(retry_classification(None), RetryClass)
    assert_type(XError.from_dict(e.to_dict()), XError)


def durations_and_backoff() -> None:
    assert_type(parse_duration("3d"), int)
    assert_type(parse_duration(timedelta(seconds=1), name="delay"), int)
    assert_type(backoff_delay(2, base="1s", curve="linear", rng=random.Random(0)), int)


async def cancellation() -> None:
    controller = AbortController()
    signal: Signal = any_signal(controller.signal)
    controller.abort(XError("X_DRAINING"))
    assert_type(await signal.wait(), XError)

    async def write() -> int:
        return 1

    assert_type(await run_to_completion(write), int)
    assert_type(await run_to_completion(lambda: "sync"), str)


async def context() -> None:
    with use_actor(SYSTEM_ACTOR):
        assert_type(await cross_tenant("rollup", lambda: 3), int)
    async with use_connection(object()):
        assert_type(current_connection(), object | None)
    actor = Actor(id="u1", org_id="org-1", permissions=frozenset({"jobs:read"}))
    assert_type(actor.has("jobs:read"), bool)


def adapters() -> None:
    with swap_adapter(MAILER, FakeMailer()):
        adapter(MAILER).send("a@example.com")
    assert_type(installed_adapter(MAILER), Mailer | None)


def clocks() -> None:
    clock: Clock = FrozenClock("2026-01-01T00:00:00Z")
    assert_type(current_clock().now_ms(), int)
    assert_type(clock.now_ms(), int)


def misc() -> None:
    assert_type(new_id(), str)
    total = Money(100, "EUR") + Money.from_decimal(Decimal("1.50"), "EUR")
    assert_type(total, Money)
    headers = sign_webhook(secret="s", event_id="e1", topic="t", body=b"{}")
    assert_type(verify_webhook_signature(headers, b"{}", secret=["s", "old"]), VerifiedWebhook)
    value: JsonValue = to_json_form({"a": 1})
    assert value is not None
    with capture_log_events() as events:
        log_event("jobs.wake.live", queue="default")
    assert_type(events, list[dict[str, Any]])
