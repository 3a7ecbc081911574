"""``webhook_receiver()`` and ``ultimat3.http.webhook_app`` through httpx's ASGI transport (and
once through a real uvicorn on loopback): verify before anything, the streamed body cap, the
enqueue before the 200, dedupe, 503 when the enqueue fails, and error bodies quoting no byte of
the request."""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import AsyncIterator
from typing import Any

import httpx
import pytest
import uvicorn

from ultimat3.core import XError, sign_webhook, swap_adapter, verify_webhook_signature
from ultimat3.http import Inbound, webhook_app
from ultimat3.jobs import Job
from ultimat3.jobs.adapter import JOB_DRIVER
from ultimat3.jobs.factories.webhook import (
    WebhookDelivery,
    WebhookEndpoint,
    WebhookEvent,
    webhook,
)
from ultimat3.jobs.factories.webhook_ledger import memory_webhook_ledger
from ultimat3.jobs.factories.webhook_receiver import (
    ReceivedWebhook,
    ReceiverDelivery,
    webhook_receiver,
)
from ultimat3.jobs.testing import JobHarness

SECRET = "whk_test_secret"
MIB = 1_048_576


class Receiver:
    """A receiver whose verify is core's signature check; it records what ran."""

    def __init__(self, **options: Any) -> None:
        self.verified = 0
        self.handled: list[tuple[str, Any]] = []

        def verify(inbound: Inbound) -> dict[str, Any]:
            self.verified += 1
            checked = verify_webhook_signature(inbound.headers, inbound.body, secret=SECRET)
            return {"event_id": checked.event_id, "payload": json.loads(inbound.body)}

        async def handle(delivery: ReceiverDelivery) -> None:
            self.handled.append((delivery.event_id, delivery.payload))

        options.setdefault("verify", verify)
        self.job: Job[ReceivedWebhook, Any] = webhook_receiver(
            name="billing.events",
            path="/hooks/billing/:account",
            tenant="none",
            handle=handle,
            **options,
        )


def signed(body: bytes, event_id: str = "evt_1", **kw: Any) -> dict[str, str]:
    return sign_webhook(secret=SECRET, event_id=event_id, topic="invoice.paid", body=body, **kw)


def client_for(app: Any) -> httpx.AsyncClient:
    return httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://hooks.test")


BODY = b'{"id":"evt_1","amount":1200}'


async def test_a_signed_post_enqueues_answers_200_and_dedupes_a_redelivery() -> None:
    receiver = Receiver()
    harness = JobHarness(jobs=[receiver.job])
    async with harness, client_for(webhook_app(receiver.job)) as client:
        first = await client.post("/hooks/billing/acme", content=BODY, headers=signed(BODY))
        again = await client.post("/hooks/billing/acme", content=BODY, headers=signed(BODY))
    assert first.status_code == 200
    assert first.json() == {"ok": True, "event_id": "evt_1", "deduped": False}
    assert again.json() == {"ok": True, "event_id": "evt_1", "deduped": True}
    assert receiver.handled == []  # queued, not run inline
    await harness.drain()
    (row,) = await harness.rows()
    assert row.state == "done"
    assert row.idempotency_key == "webhook-receiver:billing.events:evt_1"
    assert receiver.handled == [("evt_1", {"id": "evt_1", "amount": 1200})]


@pytest.mark.parametrize(
    ("mangle", "code"),
    [
        (lambda h, b: (h, b + b" "), "X_WEBHOOK_SIGNATURE_INVALID"),  # tampered body
        (
            lambda h, b: (sign_webhook(secret="wrong", event_id="e", topic="t", body=b), b),
            "X_WEBHOOK_SIGNATURE_INVALID",
        ),
        (lambda h, b: ({}, b), "X_WEBHOOK_SIGNATURE_INVALID"),  # unsigned
        (
            lambda h, b: (signed(b, timestamp=int(time.time()) - 3_600), b),
            "X_WEBHOOK_SIGNATURE_STALE",
        ),
    ],
)
async def test_a_tampered_wrongly_signed_or_stale_post_is_401_and_queues_nothing(
    mangle: Any, code: str
) -> None:
    receiver = Receiver()
    harness = JobHarness(jobs=[receiver.job])
    headers, body = mangle(signed(BODY), BODY)
    async with harness, client_for(webhook_app(receiver.job)) as client:
        response = await client.post("/hooks/billing/acme", content=body, headers=headers)
    assert response.status_code == 401
    assert response.json()["code"] == code and response.json()["ok"] is False
    assert await harness.rows() == []


async def test_a_body_over_max_bytes_is_refused_while_it_streams() -> None:
    receiver = Receiver()
    sent = 0

    async def chunks() -> AsyncIterator[bytes]:
        nonlocal sent
        for _ in range(64):  # 4 MiB in 64 KiB chunks, with no content-length
            sent += 1
            yield b"x" * 65_536

    harness = JobHarness(jobs=[receiver.job])
    async with harness, client_for(webhook_app(receiver.job)) as client:
        response = await client.post("/hooks/billing/acme", content=chunks())
    assert response.status_code == 413
    assert response.json()["code"] == "X_BODY_INVALID"
    assert "max_bytes of 1048576" in response.json()["message"]
    assert receiver.verified == 0
    assert sent <= 17  # stopped at the chunk that went over: the rest was never read
    assert await harness.rows() == []


async def test_one_mib_plus_one_is_refused_and_one_mib_is_not() -> None:
    receiver = Receiver()
    async with JobHarness(jobs=[receiver.job]), client_for(webhook_app(receiver.job)) as client:
        over = await client.post("/hooks/billing/acme", content=b"x" * (MIB + 1))
        at = b'"' + b"x" * (MIB - 2) + b'"'
        ok = await client.post("/hooks/billing/acme", content=at, headers=signed(at))
    assert over.status_code == 413 and receiver.verified == 1
    assert ok.status_code == 200


async def test_an_enqueue_the_driver_refuses_answers_503_with_retry_after_30() -> None:
    class RefusingDriver:
        def __getattr__(self, name: str) -> Any:
            raise AttributeError(name)

        name = "refusing"

        async def enqueue(self, *a: Any, **kw: Any) -> Any:
            raise XError("X_DRIVER_UNAVAILABLE", "the database is down")

        enqueue_many = enqueue

        def owns_connection(self, connection: object) -> bool:
            return False

    receiver = Receiver()
    with swap_adapter(JOB_DRIVER, RefusingDriver()):
        async with client_for(webhook_app(receiver.job)) as client:
            response = await client.post("/hooks/billing/acme", content=BODY, headers=signed(BODY))
    assert response.status_code == 503
    assert response.headers["retry-after"] == "30"
    assert response.json()["code"] == "X_WEBHOOK_RECEIVER_UNAVAILABLE"
    assert "database" not in response.text


async def test_a_non_xerror_from_verify_is_400_quoting_no_request_byte() -> None:
    def verify(inbound: Inbound) -> dict[str, Any]:
        return {"event_id": "e", "payload": json.loads(inbound.body)}  # JSONDecodeError

    receiver = Receiver(verify=verify)
    body = b'{"card": "4242-SECRET-TOKEN", oops'
    async with JobHarness(jobs=[receiver.job]), client_for(webhook_app(receiver.job)) as client:
        response = await client.post("/hooks/billing/acme", content=body)
    assert response.status_code == 400
    assert response.json()["code"] == "X_WEBHOOK_EVENT_INVALID"
    assert "SECRET" not in response.text and "oops" not in response.text
    assert "4242" not in response.text


async def test_an_invalid_event_id_is_422_and_never_echoed() -> None:
    for bad in ("", "x" * 257, "tab\there", "\u00e9vt"):
        receiver = Receiver(verify=lambda i, bad=bad: {"event_id": bad, "payload": {}})
        async with (
            JobHarness(jobs=[receiver.job]) as harness,
            client_for(webhook_app(receiver.job)) as client,
        ):
            response = await client.post("/hooks/billing/acme", content=b"{}")
            assert await harness.rows() == []
        assert response.status_code == 422
        assert response.json()["code"] == "X_WEBHOOK_EVENT_ID_INVALID"
        assert not bad or bad not in response.text


async def test_verify_sees_exact_bytes_headers_params_url_and_method() -> None:
    seen: list[Inbound] = []

    def verify(inbound: Inbound) -> dict[str, Any]:
        seen.append(inbound)
        return {"event_id": "e1", "payload": None}

    receiver = Receiver(verify=verify)
    body = b"\x00\xffraw bytes\r\n"
    async with JobHarness(jobs=[receiver.job]), client_for(webhook_app(receiver.job)) as client:
        await client.post(
            "/hooks/billing/acme?x=1", content=body, headers={"X-Billing-Signature": "abc"}
        )
    (inbound,) = seen
    assert inbound.body == body
    assert inbound.headers["x-billing-signature"] == "abc"
    assert inbound.params == {"account": "acme"}
    assert inbound.url == "http://hooks.test/hooks/billing/acme?x=1"
    assert inbound.method == "POST"


async def test_a_challenge_answer_queues_nothing() -> None:
    receiver = Receiver(
        verify=lambda i: {"answer": (200, {"content-type": "text/plain"}, "challenge-ok")}
    )
    async with (
        JobHarness(jobs=[receiver.job]) as harness,
        client_for(webhook_app(receiver.job)) as client,
    ):
        response = await client.post("/hooks/billing/acme", content=b"{}")
        assert await harness.rows() == []
    assert response.status_code == 200 and response.text == "challenge-ok"


async def test_get_runs_the_handshake_and_other_methods_and_paths_are_refused() -> None:
    with_handshake = Receiver(handshake=lambda i: (200, {}, i.url.split("challenge=")[-1])).job
    plain = webhook_receiver(
        name="plain",
        path="/hooks/plain",
        tenant="none",
        verify=lambda i: {"event_id": "e", "payload": 1},
        handle=lambda d: None,
    )
    async with client_for(webhook_app(with_handshake, plain)) as client:
        shake = await client.get("/hooks/billing/acme?challenge=abc123")
        no_get = await client.get("/hooks/plain")
        put = await client.put("/hooks/plain", content=b"")
        missing = await client.post("/hooks/nowhere", content=b"")
    assert shake.status_code == 200 and shake.text == "abc123"
    assert no_get.status_code == 405 and no_get.headers["allow"] == "POST"
    assert put.status_code == 405 and put.json()["code"] == "X_METHOD_NOT_ALLOWED"
    assert missing.status_code == 404 and missing.json()["code"] == "X_NOT_FOUND"


async def test_the_stored_payload_is_marked_sensitive_in_the_input_schema() -> None:
    schema = Receiver().job.describe()["input"]
    assert schema["properties"]["payload"]["x-sensitive"] is True


@pytest.mark.parametrize(
    ("options", "fragment"),
    [
        ({"path": "hooks/relative"}, "relative"),
        ({"path": "/api/hooks"}, "/api"),
        ({"path": "/_x/hooks"}, "/_x"),
        ({"verify": None}, "verify"),
        ({"handle": "nope"}, "handle"),
        ({"handshake": 42}, "handshake"),
        ({"max_bytes": 0}, "max_bytes"),
        ({"max_bytes": True}, "max_bytes"),
        ({"name": ""}, "name"),
        ({"rate_limit": 600}, "rate_limit"),
        ({"path": None}, "path is missing"),
        ({"tenant": None}, "tenant is missing"),
    ],
)
def test_a_bad_declaration_is_x_webhook_receiver_invalid(
    options: dict[str, Any], fragment: str
) -> None:
    fields: dict[str, Any] = {
        "name": "r",
        "path": "/hooks/r",
        "tenant": "none",
        "verify": lambda i: None,
        "handle": lambda d: None,
        **options,
    }
    with pytest.raises(XError) as info:
        webhook_receiver(**{k: v for k, v in fields.items() if v is not None})
    assert info.value.code == "X_WEBHOOK_RECEIVER_INVALID"
    assert fragment in info.value.message


def test_two_receivers_on_one_path_are_refused() -> None:
    one, two = Receiver().job, Receiver().job
    with pytest.raises(XError) as info:
        webhook_app(one, two)
    assert info.value.code == "X_WEBHOOK_RECEIVER_INVALID"


# --- through a real uvicorn on loopback ---------------------------------------------------------


class Served:
    def __init__(self, server: uvicorn.Server, task: asyncio.Task[None]) -> None:
        self.server, self.task = server, task
        sock = server.servers[0].sockets[0]
        self.port = int(sock.getsockname()[1])

    def url(self, path: str) -> str:
        return f"http://127.0.0.1:{self.port}{path}"


async def serve(app: Any) -> Served:
    config = uvicorn.Config(app, host="127.0.0.1", port=0, log_level="warning", lifespan="on")
    server = uvicorn.Server(config)
    task = asyncio.ensure_future(server.serve())
    while not server.started:
        await asyncio.sleep(0.01)
        if task.done():
            task.result()
    return Served(server, task)


async def stop(served: Served) -> None:
    served.server.should_exit = True
    await served.task


async def test_the_receiver_through_uvicorn_on_loopback() -> None:
    receiver = Receiver()
    harness = JobHarness(jobs=[receiver.job])
    async with harness:
        served = await serve(webhook_app(receiver.job))
        try:
            async with httpx.AsyncClient() as client:
                url = served.url("/hooks/billing/acme")
                first = await client.post(url, content=BODY, headers=signed(BODY))
                again = await client.post(url, content=BODY, headers=signed(BODY))
                big = await client.post(url, content=b"x" * (MIB + 1))
        finally:
            await stop(served)
    assert first.json()["deduped"] is False and again.json()["deduped"] is True
    assert big.status_code == 413 and receiver.verified == 2
    await harness.drain()
    assert receiver.handled == [("evt_1", {"id": "evt_1", "amount": 1200})]


async def test_webhook_delivers_to_a_webhook_receiver_end_to_end() -> None:
    """Both halves: webhook() signs and POSTs to a receiver served by uvicorn on loopback, whose
    verify is core's check; the receiver's job then handles the payload."""
    receiver = Receiver()
    ledger = memory_webhook_ledger()
    served_url: list[str] = []
    deliver = webhook(
        name="partner.webhooks",
        tenant="none",
        endpoint=lambda d: WebhookEndpoint(id=d.endpoint_id, url=served_url[0], secret=SECRET),
        event=lambda d: WebhookEvent(id=d.event_id, topic="invoice.paid", body={"n": 7}),
        ledger=ledger,
        allow_private=True,
    )
    harness = JobHarness(jobs=[deliver, receiver.job])
    async with harness:
        served = await serve(webhook_app(receiver.job))
        served_url.append(served.url("/hooks/billing/acme"))
        try:
            await harness.enqueue(deliver, WebhookDelivery(endpoint_id="ep", event_id="evt_9"))
            await harness.drain()
        finally:
            await stop(served)
    assert [a.outcome for a in ledger.attempts] == ["delivered"]
    assert receiver.handled == [("evt_9", {"n": 7})]


def test_without_ultimat3_http_the_receiver_names_the_extra(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    import sys

    monkeypatch.setitem(sys.modules, "ultimat3.http", None)  # import raises ImportError
    with pytest.raises(XError) as info:
        Receiver()
    assert info.value.code == "X_CONFIG_INVALID"
    assert 'pip install "ultimat3-jobs[http]"' in (info.value.fix or "")
