"""``webhook()`` delivering to a real HTTP server on loopback (``allow_private=True``), on the
memory driver under the harness's frozen clock. Refusals by the address guard use loopback targets
or a stub resolver with a transport that never dials."""

from __future__ import annotations

import asyncio
import base64
from collections.abc import Sequence
from typing import Any

import httpx
import pytest
from standardwebhooks import Webhook

from ultimat3.core import XError, to_epoch_ms, verify_webhook_signature
from ultimat3.http import safe_client
from ultimat3.http.testing import (
    ReceivedRequest,
    Reply,
    loopback_server,
    stub_resolver,
)
from ultimat3.jobs import Job, Retry
from ultimat3.jobs.factories.webhook import (
    WebhookDelivery,
    WebhookEndpoint,
    WebhookEvent,
    webhook,
)
from ultimat3.jobs.factories.webhook_ledger import MemoryWebhookLedger, memory_webhook_ledger
from ultimat3.jobs.testing import JobHarness

SECRET = "s3cret"
EVENT = WebhookEvent(id="evt_1", topic="orders.paid", body={"order": 42, "total": "9.99"})


def declare(
    url: str,
    ledger: MemoryWebhookLedger,
    *,
    secret: str = SECRET,
    events: dict[str, WebhookEvent] | None = None,
    **options: Any,
) -> Job[WebhookDelivery, Any]:
    known = events or {EVENT.id: EVENT}
    options.setdefault("allow_private", True)
    options.setdefault("tenant", "none")

    def endpoint(d: WebhookDelivery) -> WebhookEndpoint | None:
        if d.endpoint_id != "ep_1":
            return None
        return WebhookEndpoint(
            id="ep_1", url=url, secret=secret, enabled="ep_1" not in ledger.disabled
        )

    return webhook(
        name="partner.webhooks",
        endpoint=endpoint,
        event=lambda d: known.get(d.event_id),
        ledger=ledger,
        **options,
    )


def delivery(event_id: str = "evt_1", endpoint_id: str = "ep_1") -> WebhookDelivery:
    return WebhookDelivery(endpoint_id=endpoint_id, event_id=event_id)


async def test_a_delivery_is_signed_and_verified_by_verify_webhook_signature() -> None:
    async with loopback_server(lambda r: (200, {}, b"ok")) as server:
        ledger = memory_webhook_ledger()
        deliver = declare(server.url("/hooks"), ledger)
        trace = await JobHarness(jobs=[deliver])(deliver, delivery())
        assert trace.state == "done"
        (request,) = server.requests
        assert request.method == "POST" and request.path == "/hooks"
        assert request.headers["content-type"] == "application/json"
        verified = verify_webhook_signature(request.headers, request.body, secret=SECRET)
        assert (verified.event_id, verified.topic) == ("evt_1", "orders.paid")
        assert request.body == b'{"order":42,"total":"9.99"}'
        (attempt,) = ledger.attempts
        assert (attempt.outcome, attempt.status, attempt.attempt) == ("delivered", 200, 1)


async def test_a_wrong_secret_does_not_verify_the_delivery() -> None:
    async with loopback_server(lambda r: (200, {}, b"")) as server:
        deliver = declare(server.url("/"), memory_webhook_ledger())
        await JobHarness(jobs=[deliver])(deliver, delivery())
        request = server.requests[0]
        with pytest.raises(XError) as info:
            verify_webhook_signature(request.headers, request.body, secret="other")
        assert info.value.code == "X_WEBHOOK_SIGNATURE_INVALID"


async def test_500_then_200_is_a_retry_with_two_ledger_rows() -> None:
    answers = iter([500, 200])
    async with loopback_server(lambda r: (next(answers), {}, b"")) as server:
        ledger = memory_webhook_ledger()
        deliver = declare(server.url("/"), ledger)
        trace = await JobHarness(jobs=[deliver])(deliver, delivery())
        assert trace.state == "done" and trace.attempts == 2
        assert [(a.attempt, a.outcome, a.status) for a in ledger.attempts] == [
            (1, "failed", 500),
            (2, "delivered", 200),
        ]
        assert ledger.attempts[0].code == "X_WEBHOOK_DELIVERY_FAILED"
        assert len(server.requests) == 2


async def test_429_with_retry_after_waits_at_least_that_on_the_frozen_clock() -> None:
    answers = iter([(429, {"retry-after": "2"}), (200, {})])

    def reply(r: ReceivedRequest) -> Reply:
        status, headers = next(answers)
        return status, headers, b""

    async with loopback_server(reply) as server:
        ledger = memory_webhook_ledger()
        deliver = declare(server.url("/"), ledger)
        harness = JobHarness(jobs=[deliver])
        queued = await harness.enqueue(deliver, delivery())
        failed_at = harness.clock.now_ms()
        row = await harness.drain(advance_retries=False)
        assert row is not None and row.state == "ready"
        assert row.last_error is not None
        assert row.last_error["code"] == "X_WEBHOOK_DELIVERY_THROTTLED"
        assert row.last_error["meta"]["retry_after_seconds"] == 2
        assert to_epoch_ms(row.run_at) >= failed_at + 2_000
        harness.clock.advance("1999ms")
        row = await harness.drain(advance_retries=False)
        assert row is not None and row.state == "ready" and len(server.requests) == 1
        harness.clock.advance("1ms")
        row = await harness.drain(advance_retries=False)
        assert row is not None and row.state == "done"
        assert [a.outcome for a in ledger.attempts] == ["throttled", "delivered"]
        assert queued.deduped is False


async def test_503_with_an_http_date_retry_after_is_throttled_too() -> None:
    date = "Wed, 21 Oct 2099 07:28:00 GMT"
    async with loopback_server(lambda r: (503, {"retry-after": date}, b"")) as server:
        ledger = memory_webhook_ledger()
        deliver = declare(server.url("/"), ledger)
        harness = JobHarness(jobs=[deliver])
        await harness.enqueue(deliver, delivery())
        row = await harness.drain(advance_retries=False)
        assert row is not None and row.last_error is not None
        assert row.last_error["code"] == "X_WEBHOOK_DELIVERY_THROTTLED"
        assert row.last_error["meta"]["retry_after_seconds"] > 86_400


async def test_410_is_rejected_and_not_retried() -> None:
    async with loopback_server(lambda r: (410, {}, b"gone")) as server:
        ledger = memory_webhook_ledger()
        deliver = declare(server.url("/"), ledger)
        trace = await JobHarness(jobs=[deliver])(deliver, delivery())
        assert trace.state == "dead" and trace.attempts == 1
        assert trace.last_error is not None
        assert trace.last_error["code"] == "X_WEBHOOK_DELIVERY_REJECTED"
        assert [a.outcome for a in ledger.attempts] == ["rejected"]


async def test_a_redirect_is_rejected_not_followed() -> None:
    async with loopback_server(lambda r: (302, {"location": "/elsewhere"}, b"")) as server:
        deliver = declare(server.url("/"), memory_webhook_ledger())
        trace = await JobHarness(jobs=[deliver])(deliver, delivery())
        assert trace.last_error is not None
        assert trace.last_error["code"] == "X_WEBHOOK_DELIVERY_REJECTED"
        assert [r.path for r in server.requests] == ["/"]


async def test_a_slow_endpoint_is_cut_by_the_timeout() -> None:
    async def slow(r: ReceivedRequest) -> Reply:
        await asyncio.sleep(30)
        return 200, {}, b""

    async with loopback_server(slow) as server:
        ledger = memory_webhook_ledger()
        deliver = declare(server.url("/"), ledger, timeout="3s", retry=Retry(attempts=1))
        loop = asyncio.get_running_loop()
        started = loop.time()
        trace = await JobHarness(jobs=[deliver])(deliver, delivery())
        assert loop.time() - started < 10
        assert trace.state == "dead"
        assert trace.last_error is not None
        assert trace.last_error["code"] in ("X_WEBHOOK_DELIVERY_FAILED", "X_JOB_TIMEOUT")
        (attempt,) = ledger.attempts
        assert attempt.outcome == "failed" and attempt.status is None
        assert attempt.duration_ms >= 2_700  # cut at 90% of the timeout, the row written in it


async def test_ten_failures_disable_the_endpoint_and_the_eleventh_enqueue_sends_nothing() -> None:
    async with loopback_server(lambda r: (500, {}, b"")) as server:
        ledger = memory_webhook_ledger()
        events = {f"evt_{i}": WebhookEvent(id=f"evt_{i}", topic="t", body=i) for i in range(2)}
        deliver = declare(server.url("/"), ledger, events=events, retry=Retry(attempts=25))
        harness = JobHarness(jobs=[deliver])
        trace = await harness(deliver, delivery("evt_0"))
        assert trace.state == "dead" and trace.attempts == 10
        assert trace.last_error is not None
        assert trace.last_error["code"] == "X_WEBHOOK_ENDPOINT_DISABLED"
        assert ledger.disabled == {"ep_1"}
        assert len(server.requests) == 10
        trace = await harness(deliver, delivery("evt_1"))
        assert trace.state == "dead" and trace.attempts == 1
        assert trace.last_error is not None
        assert trace.last_error["code"] == "X_WEBHOOK_ENDPOINT_DISABLED"
        assert len(server.requests) == 10  # no request for the eleventh
        assert ledger.attempts[-1].outcome == "refused"
        await ledger.enable("ep_1")  # re-enabling is the app's
        assert await ledger.failures_in_a_row("ep_1") == 0


async def test_a_delivery_that_lands_resets_the_failure_streak() -> None:
    answers = iter([500, 500, 200, 500])
    async with loopback_server(lambda r: (next(answers), {}, b"")) as server:
        ledger = memory_webhook_ledger()
        events = {f"e{i}": WebhookEvent(id=f"e{i}", topic="t", body=i) for i in range(2)}
        deliver = declare(server.url("/"), ledger, events=events, disable_after=3)
        harness = JobHarness(jobs=[deliver])
        assert (await harness(deliver, delivery("e0"))).state == "done"
        await harness.enqueue(deliver, delivery("e1"))
        await harness.drain(advance_retries=False)
        assert await ledger.failures_in_a_row("ep_1") == 1
        assert len(server.requests) == 4


async def test_standard_webhooks_signing_is_verified_by_the_reference_library() -> None:
    secret = "whsec_" + base64.b64encode(b"0123456789abcdef0123").decode()
    async with loopback_server(lambda r: (204, {}, b"")) as server:
        deliver = declare(
            server.url("/"), memory_webhook_ledger(), secret=secret, signature="standard-webhooks"
        )
        trace = await JobHarness(jobs=[deliver])(deliver, delivery())
        assert trace.state == "done"
        request = server.requests[0]
        payload = Webhook(secret).verify(request.body, dict(request.headers))
        assert payload == {"order": 42, "total": "9.99"}
        assert request.headers["webhook-id"] == "evt_1"
        verify_webhook_signature(request.headers, request.body, secret=secret)  # core's too


async def test_a_standard_webhooks_endpoint_without_a_whsec_secret_is_invalid() -> None:
    async with loopback_server(lambda r: (200, {}, b"")) as server:
        ledger = memory_webhook_ledger()
        deliver = declare(server.url("/"), ledger, secret="plain", signature="standard-webhooks")
        trace = await JobHarness(jobs=[deliver])(deliver, delivery())
        assert trace.last_error is not None
        assert trace.last_error["code"] == "X_WEBHOOK_ENDPOINT_INVALID"
        assert trace.attempts == 1 and server.requests == []


@pytest.mark.parametrize("host", ["127.0.0.1", "127.1", "0x7f000001", "[::1]", "localhost"])
async def test_the_guard_refuses_a_loopback_endpoint_without_allow_private(host: str) -> None:
    async with loopback_server(lambda r: (200, {}, b"")) as server:
        ledger = memory_webhook_ledger()
        deliver = declare(f"https://{host}:{server.port}/", ledger, allow_private=False)
        trace = await JobHarness(jobs=[deliver])(deliver, delivery())
        assert trace.state == "dead" and trace.attempts == 1
        assert trace.last_error is not None
        assert trace.last_error["code"] == "X_WEBHOOK_ENDPOINT_INVALID"
        assert server.connections == 0
        assert [a.outcome for a in ledger.attempts] == ["refused"]


async def test_an_http_url_is_refused_without_allow_private() -> None:
    async with loopback_server(lambda r: (200, {}, b"")) as server:
        deliver = declare(server.url("/"), memory_webhook_ledger(), allow_private=False)
        trace = await JobHarness(jobs=[deliver])(deliver, delivery())
        assert trace.last_error is not None
        assert trace.last_error["code"] == "X_WEBHOOK_ENDPOINT_INVALID"
        assert server.connections == 0


async def test_a_name_resolving_to_a_private_address_sends_nothing() -> None:
    dialled: list[str] = []

    class NoDial(httpx.AsyncBaseTransport):
        async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
            dialled.append(str(request.url))
            return httpx.Response(599)

    resolver = stub_resolver({"hooks.partner.test": ["10.20.30.40"]})
    ledger = memory_webhook_ledger()
    deliver = declare(
        "https://hooks.partner.test/in",
        ledger,
        allow_private=False,
        client=lambda: safe_client(resolver=resolver, transport=NoDial()),
    )
    trace = await JobHarness(jobs=[deliver])(deliver, delivery())
    assert trace.last_error is not None
    assert trace.last_error["code"] == "X_WEBHOOK_ENDPOINT_INVALID"
    assert dialled == []


async def test_an_unknown_endpoint_or_event_is_terminal() -> None:
    deliver = declare("http://127.0.0.1:9/", memory_webhook_ledger())
    harness = JobHarness(jobs=[deliver])
    trace = await harness(deliver, delivery(endpoint_id="nope"))
    assert trace.state == "dead" and trace.attempts == 1
    assert trace.last_error is not None
    assert trace.last_error["code"] == "X_WEBHOOK_ENDPOINT_UNKNOWN"
    trace = await harness(deliver, delivery(event_id="nope"))
    assert trace.last_error is not None
    assert trace.last_error["code"] == "X_WEBHOOK_EVENT_UNKNOWN"
    assert trace.state == "dead" and trace.attempts == 1


async def test_the_org_is_checked_against_the_run() -> None:
    seen: list[str | None] = []
    async with loopback_server(lambda r: (200, {}, b"")) as server:
        ledger = memory_webhook_ledger()

        def endpoint(d: WebhookDelivery) -> WebhookEndpoint:
            seen.append(d.org_id)
            return WebhookEndpoint(id=d.endpoint_id, url=server.url("/"), secret=SECRET)

        deliver = webhook(
            name="org.webhooks",
            tenant=lambda d: d.org_id,  # type: ignore[return-value, arg-type]
            endpoint=endpoint,
            event=lambda d: EVENT,
            ledger=ledger,
            allow_private=True,
        )
        harness = JobHarness(jobs=[deliver])
        trace = await harness(deliver, {"endpoint_id": "ep_1", "event_id": "evt_1"})
        assert trace.state == "dead" and trace.attempts == 1
        assert trace.last_error is not None
        assert trace.last_error["code"] == "X_JOB_TENANT_MISMATCH"
        trace = await harness(
            deliver, {"endpoint_id": "ep_1", "event_id": "evt_1", "org_id": "org_1"}
        )
        assert trace.state == "done" and trace.tenant_id == "org_1"
        assert seen == ["org_1"]  # the seam was handed the org; the mismatch sent nothing
        assert len(server.requests) == 1


async def test_the_idempotency_key_is_per_endpoint_and_event() -> None:
    deliver = declare("http://127.0.0.1:9/", memory_webhook_ledger())
    assert deliver.idempotency_key_for(delivery()) == "webhook:partner.webhooks:ep_1:evt_1"


@pytest.mark.parametrize(
    ("options", "fragment"),
    [
        ({"name": " "}, "name"),
        ({"ledger": object()}, "ledger"),
        ({"disable_after": 0}, "disable_after"),
        ({"endpoint": "x"}, "endpoint"),
        ({"signature": "hmac"}, "signature"),
        ({"tenant": None}, "tenant is missing"),
        ({"ledger": None}, "ledger"),
    ],
)
def test_a_bad_declaration_is_refused(options: dict[str, Any], fragment: str) -> None:
    fields: dict[str, Any] = {
        "name": "w",
        "tenant": "none",
        "endpoint": lambda d: None,
        "event": lambda d: None,
        "ledger": memory_webhook_ledger(),
        **options,
    }
    with pytest.raises(XError) as info:
        webhook(**{k: v for k, v in fields.items() if v is not None})  # None: left out
    assert info.value.code == "X_JOB_DECLARATION_INVALID"
    assert fragment in info.value.message


def _unused(_: Sequence[object]) -> None: ...


async def test_attempts_are_counted_by_outcome(monkeypatch: pytest.MonkeyPatch) -> None:
    from opentelemetry.sdk.metrics import MeterProvider
    from opentelemetry.sdk.metrics.export import InMemoryMetricReader, NumberDataPoint

    reader = InMemoryMetricReader()
    provider = MeterProvider(metric_readers=[reader])
    monkeypatch.setattr(
        "ultimat3.jobs.factories.webhook.meter", lambda: provider.get_meter("ultimat3")
    )
    monkeypatch.setattr("ultimat3.jobs.factories.webhook._attempts_counter", None)
    answers = iter([500, 200])
    async with loopback_server(lambda r: (next(answers), {}, b"")) as server:
        deliver = declare(server.url("/"), memory_webhook_ledger())
        await JobHarness(jobs=[deliver])(deliver, delivery())
    data = reader.get_metrics_data()
    assert data is not None
    points: dict[str, float] = {}
    for rm in data.resource_metrics:
        for sm in rm.scope_metrics:
            for m in sm.metrics:
                if m.name == "webhook_attempts_total":
                    for p in m.data.data_points:
                        assert isinstance(p, NumberDataPoint)
                        points[str((p.attributes or {})["outcome"])] = p.value
    assert points == {"failed": 1, "delivered": 1}


async def test_a_drain_cuts_the_request_without_a_ledger_row() -> None:
    """A drain is the worker's, not the endpoint's failure: the run is handed back uncounted."""
    arrived = asyncio.Event()

    async def slow(r: ReceivedRequest) -> Reply:
        arrived.set()
        await asyncio.sleep(30)
        return 200, {}, b""

    async with loopback_server(slow) as server:
        ledger = memory_webhook_ledger()
        deliver = declare(server.url("/"), ledger)
        harness = JobHarness(jobs=[deliver])
        await harness.enqueue(deliver, delivery())
        with harness.bound():
            await harness.worker.start()
            await asyncio.wait_for(arrived.wait(), 10)
            await harness.worker.drain()
        (row,) = await harness.rows()
        assert row.state == "ready" and row.attempts == 0
        assert ledger.attempts == []


@pytest.mark.parametrize("url", ["http://", "http://[::1/x", "https:///nohost"])
async def test_a_url_httpx_cannot_send_to_is_invalid_and_no_failure(url: str) -> None:
    ledger = memory_webhook_ledger()
    deliver = declare(url, ledger)
    trace = await JobHarness(jobs=[deliver])(deliver, delivery())
    assert trace.state == "dead" and trace.attempts == 1
    assert trace.last_error is not None
    assert trace.last_error["code"] == "X_WEBHOOK_ENDPOINT_INVALID"
    assert [a.outcome for a in ledger.attempts] == ["refused"]
    assert await ledger.failures_in_a_row("ep_1") == 0


async def test_an_event_id_core_cannot_sign_is_invalid_and_sends_nothing() -> None:
    async with loopback_server(lambda r: (200, {}, b"")) as server:
        ledger = memory_webhook_ledger()
        bad = WebhookEvent(id="has:colon", topic="t", body={})
        deliver = declare(server.url("/"), ledger, events={"evt_1": bad})
        trace = await JobHarness(jobs=[deliver])(deliver, delivery())
        assert trace.last_error is not None
        assert trace.last_error["code"] == "X_WEBHOOK_EVENT_INVALID"
        assert trace.attempts == 1 and server.requests == []
        assert await ledger.failures_in_a_row("ep_1") == 0


def test_without_ultimat3_http_the_declaration_names_the_extra(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    import sys

    monkeypatch.setitem(sys.modules, "ultimat3.http", None)  # import raises ImportError
    with pytest.raises(XError) as info:
        declare("https://hooks.partner.test/", memory_webhook_ledger())
    assert info.value.code == "X_CONFIG_INVALID"
    assert 'pip install "ultimat3-jobs[http]"' in (info.value.fix or "")
