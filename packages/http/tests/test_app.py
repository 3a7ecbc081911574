"""``webhook_app`` over a plain ``WebhookRoute`` (no jobs): the order of the checks, mounting
under a root path, the lifespan, and ``XErrorMiddleware``."""

from __future__ import annotations

from typing import Any

import httpx
import pytest

from ultimat3.core import XError
from ultimat3.http import Inbound, WebhookRoute, XErrorMiddleware, webhook_app


def route(**overrides: Any) -> tuple[WebhookRoute, list[tuple[str, Any]]]:
    accepted: list[tuple[str, Any]] = []

    async def accept(event_id: str, payload: Any) -> bool:
        dup = any(e == event_id for e, _ in accepted)
        accepted.append((event_id, payload))
        return dup

    fields: dict[str, Any] = {
        "name": "r",
        "path": "/in/:tenant/:source",
        "verify": lambda i: {"event_id": i.params["source"], "payload": {"t": i.params["tenant"]}},
        "accept": accept,
        **overrides,
    }
    return WebhookRoute(**fields), accepted


def client(app: Any, root: str = "") -> httpx.AsyncClient:
    transport = httpx.ASGITransport(app=app, root_path=root)
    return httpx.AsyncClient(transport=transport, base_url="http://h.test")


async def test_params_reach_verify_and_accept_runs_once_per_post() -> None:
    r, accepted = route()
    async with client(webhook_app(r)) as c:
        response = await c.post("/in/acme/stripe", content=b"")
    assert response.json() == {"ok": True, "event_id": "stripe", "deduped": False}
    assert accepted == [("stripe", {"t": "acme"})]


async def test_a_param_matches_one_segment_only() -> None:
    r, _ = route()
    async with client(webhook_app(r)) as c:
        assert (await c.post("/in/acme/stripe/extra", content=b"")).status_code == 404


async def test_async_verify_and_a_payload_that_is_not_json_able() -> None:
    async def verify(inbound: Inbound) -> dict[str, Any]:
        return {"event_id": "e", "payload": object()}

    r, accepted = route(verify=verify)
    async with client(webhook_app(r)) as c:
        response = await c.post("/in/a/b", content=b"")
    assert response.status_code == 400 and accepted == []


async def test_a_verify_answering_no_event_id_is_400() -> None:
    r, accepted = route(verify=lambda i: {"payload": 1})
    async with client(webhook_app(r)) as c:
        response = await c.post("/in/a/b", content=b"")
    assert response.status_code == 400 and accepted == []


async def test_a_content_length_over_the_cap_is_refused_before_reading() -> None:
    r, accepted = route(max_bytes=10)
    async with client(webhook_app(r)) as c:
        response = await c.post("/in/a/b", content=b"x" * 11)
    assert response.status_code == 413 and accepted == []
    assert "max_bytes of 10" in response.json()["message"]


async def test_an_app_xerror_from_verify_keeps_its_code_and_not_its_message() -> None:
    def verify(inbound: Inbound) -> dict[str, Any]:
        raise XError("X_FORBIDDEN", f"account {inbound.body.decode()} is blocked")

    r, _ = route(verify=verify)
    async with client(webhook_app(r)) as c:
        response = await c.post("/in/a/b", content=b"acct_SECRET")
    assert response.status_code == 403
    assert response.json()["code"] == "X_FORBIDDEN"
    assert "SECRET" not in response.text


async def test_mounted_under_a_root_path_it_serves_the_rest() -> None:
    r, accepted = route()
    async with client(webhook_app(r), root="/webhooks") as c:
        response = await c.post("/webhooks/in/a/b", content=b"")
    assert response.status_code == 200 and accepted == [("b", {"t": "a"})]


async def test_the_lifespan_is_answered() -> None:
    app = webhook_app(route()[0])
    sent: list[dict[str, Any]] = []
    messages = iter([{"type": "lifespan.startup"}, {"type": "lifespan.shutdown"}])

    async def receive() -> dict[str, Any]:
        return next(messages)

    async def send(message: Any) -> None:
        sent.append(dict(message))

    await app({"type": "lifespan"}, receive, send)
    assert [m["type"] for m in sent] == [
        "lifespan.startup.complete",
        "lifespan.shutdown.complete",
    ]


def test_something_that_is_not_a_receiver_is_refused() -> None:
    with pytest.raises(XError) as info:
        webhook_app(object())
    assert info.value.code == "X_WEBHOOK_RECEIVER_INVALID"


async def test_xerror_middleware_answers_the_code_as_json() -> None:
    async def app(scope: Any, receive: Any, send: Any) -> None:
        raise XError("X_RATE_LIMITED", "slow down", meta={"retry_after_seconds": 1.5})

    async with client(XErrorMiddleware(app)) as c:
        response = await c.get("/")
    assert response.status_code == 429
    assert response.headers["retry-after"] == "2"
    body = response.json()
    assert body["ok"] is False and body["code"] == "X_RATE_LIMITED"
    assert body["message"] == "slow down"


async def test_xerror_middleware_leaves_other_errors_to_the_server() -> None:
    async def app(scope: Any, receive: Any, send: Any) -> None:
        raise RuntimeError("boom")

    async with client(XErrorMiddleware(app)) as c:
        with pytest.raises(RuntimeError):
            await c.get("/")


async def test_answers_are_counted_and_refusals_logged_without_request_bytes(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from opentelemetry.sdk.metrics import MeterProvider
    from opentelemetry.sdk.metrics.export import InMemoryMetricReader, NumberDataPoint

    from ultimat3.core import capture_log_events

    reader = InMemoryMetricReader()
    provider = MeterProvider(metric_readers=[reader])
    monkeypatch.setattr("ultimat3.http._app.meter", lambda: provider.get_meter("ultimat3"))
    monkeypatch.setattr("ultimat3.http._app._received", None)

    def verify(inbound: Inbound) -> dict[str, Any]:
        raise ValueError(inbound.body.decode())

    r, _ = route(verify=verify)
    with capture_log_events() as events:
        async with client(webhook_app(r)) as c:
            await c.post("/in/a/b", content=b"PRIVATE-BYTES")
    (refused,) = [e for e in events if e["event"] == "http.webhook.refused"]
    assert refused["level"] == "warning" and refused["error_type"] == "ValueError"
    assert "PRIVATE" not in repr(events)
    data = reader.get_metrics_data()
    assert data is not None
    points = []
    for rm in data.resource_metrics:
        for sm in rm.scope_metrics:
            for m in sm.metrics:
                if m.name == "webhook_received_total":
                    for p in m.data.data_points:
                        assert isinstance(p, NumberDataPoint)
                        points.append((dict(p.attributes or {}), p.value))
    assert points == [({"receiver": "r", "status": 400}, 1)]


async def test_a_rate_limit_refuses_past_the_budget_before_reading_the_body() -> None:
    from ultimat3.core import FrozenClock
    from ultimat3.http import rate_limiter

    verified: list[bytes] = []

    def verify(inbound: Inbound) -> dict[str, Any]:
        verified.append(inbound.body)
        return {"event_id": f"e{len(verified)}", "payload": None}

    limiter = rate_limiter(limit=2, window="1m", clock=FrozenClock(0))
    r, accepted = route(verify=verify, rate_limit=limiter)
    async with client(webhook_app(r)) as c:
        answers = [await c.post("/in/a/b", content=b"x") for _ in range(3)]
    assert [a.status_code for a in answers] == [200, 200, 429]
    assert answers[2].headers["retry-after"] == "30"
    assert answers[2].json()["code"] == "X_RATE_LIMITED"
    assert len(verified) == 2 and len(accepted) == 2


@pytest.mark.parametrize("answer", ["not a tuple", (200, {}), ("x", {}, b"")])
async def test_a_malformed_challenge_answer_is_500(answer: object) -> None:
    r, accepted = route(verify=lambda i: {"answer": answer})
    async with client(webhook_app(r)) as c:
        response = await c.post("/in/a/b", content=b"")
    assert response.status_code == 500
    assert response.json()["code"] == "X_WEBHOOK_RECEIVER_INVALID"
    assert accepted == []


async def test_a_handshake_that_raises_is_refused_quoting_nothing() -> None:
    def handshake(inbound: Inbound) -> Any:
        raise KeyError(inbound.url)

    r, _ = route(handshake=handshake)
    async with client(webhook_app(r)) as c:
        response = await c.get("/in/a/b?token=SECRET")
    assert response.status_code == 400 and "SECRET" not in response.text
