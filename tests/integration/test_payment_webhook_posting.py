"""The spec's worked example (issue #20, with #19): a payment provider's webhook receiver whose
``handle`` enqueues the ledger posting keyed by the provider's payment id. A redelivered webhook,
and a second event about the same payment, post the payment once; the book stays balanced."""

from __future__ import annotations

import hashlib
import hmac
import json
from typing import Any

import httpx

from ultimat3.core import Money
from ultimat3.http import verify_body_hmac, webhook_app
from ultimat3.jobs import Posting, PostingEntry, ledger, memory_ledger_book
from ultimat3.jobs.factories.webhook_receiver import webhook_receiver
from ultimat3.jobs.testing import JobHarness

SECRET = "whk_payments"


def _signed(event: dict[str, Any]) -> tuple[bytes, dict[str, str]]:
    body = json.dumps(event).encode()
    mac = hmac.new(SECRET.encode(), body, hashlib.sha256).hexdigest()
    return body, {"x-pay-signature": f"sha256={mac}"}


async def test_a_payment_webhook_posts_once_per_payment_whatever_the_deliveries() -> None:
    book = memory_ledger_book()
    post_payment = ledger(name="payments.post", tenant="none", book=lambda: book)

    def verify(inbound: Any) -> dict[str, Any]:
        checked = verify_body_hmac(
            body=inbound.body,
            secret=SECRET,
            given=inbound.headers.get("x-pay-signature"),
            encoding="hex",
            prefix="sha256=",
        )
        event = json.loads(checked.text or "")
        return {"event_id": event["id"], "payload": event}

    async def handle(delivery: Any) -> None:
        payment = delivery.payload["data"]
        amount = Money(payment["amount"], payment["currency"])
        await post_payment.enqueue(
            Posting(
                key=payment["id"],  # the provider's id: one posting per payment, forever
                entries=[
                    PostingEntry(account="cash", amount=amount),
                    PostingEntry(account="revenue", amount=-amount),
                ],
            )
        )

    payments = webhook_receiver(
        name="payments.webhook", path="/hooks/pay", tenant="none", verify=verify, handle=handle
    )
    app = webhook_app(payments)
    succeeded = {"id": "evt_1", "data": {"id": "pi_42", "amount": 1250, "currency": "EUR"}}
    # the provider sends a second event about the same payment (e.g. charge.updated)
    updated = {"id": "evt_2", "data": {"id": "pi_42", "amount": 1250, "currency": "EUR"}}
    other = {"id": "evt_3", "data": {"id": "pi_43", "amount": 500, "currency": "JPY"}}
    harness = JobHarness(jobs=[payments, post_payment])
    transport = httpx.ASGITransport(app=app)
    async with harness, httpx.AsyncClient(transport=transport, base_url="http://app") as client:
        answers = []
        for event in (succeeded, succeeded, updated, other):  # evt_1 redelivered
            body, headers = _signed(event)
            answers.append((await client.post("/hooks/pay", content=body, headers=headers)).json())
        await harness.drain()
        runs = await harness.rows()
    assert [a["deduped"] for a in answers] == [False, True, False, False]
    lines = await book.lines_of("pi_42")
    assert [(line.account, line.amount) for line in lines] == [
        ("cash", Money(1250, "EUR")),
        ("revenue", Money(-1250, "EUR")),
    ]
    assert len(await book.lines_of("pi_43")) == 2
    assert set(book.lines) == {"pi_42", "pi_43"}  # evt_2 posted nothing new: same key, same lines
    sums: dict[str, int] = {}
    for (_, currency), total in book.balances().items():
        sums[currency] = sums.get(currency, 0) + total
    assert sums == {"EUR": 0, "JPY": 0}  # balanced per currency
    assert {r.state for r in runs if r.name == "payments.post"} == {"done"}
    assert {r.state for r in runs if r.name == "payments.webhook"} == {"done"}
