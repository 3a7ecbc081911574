"""``x jobs show`` keeps sensitive values out: the paths a job's input schema marks
``x-sensitive`` (a worker writes them to the driver's redaction catalog at start; ``--app`` reads
them from the declarations directly) and any key naming a secret.

The receiver's case end to end on the real Postgres: a signed POST through ``webhook_app``, a
worker started on the driver, then ``x jobs show`` (text and ``--json``) in a subprocess that
loads no app."""

from __future__ import annotations

import asyncio
import json
import os
import sys
import textwrap
from pathlib import Path
from typing import Any

import httpx
import pytest
from pydantic import BaseModel, Field

from ultimat3.core import new_id, sign_webhook, swap_adapter, verify_webhook_signature
from ultimat3.http import Inbound, webhook_app
from ultimat3.jobs import Job, job, job_worker
from ultimat3.jobs.adapter import (
    JOB_DRIVER,
    REDACTED,
    EnqueueRequest,
    declared_paths,
    memory_job_driver,
    redact_paths,
    sensitive_paths,
)
from ultimat3.jobs.cli import main
from ultimat3.jobs.factories.webhook_receiver import ReceivedWebhook, webhook_receiver
from ultimat3.jobs.postgres import PostgresJobDriver

SECRET = "whk_show_secret"
CARD = "4111-1111-1111-1111"
BODY = json.dumps({"id": "evt_show", "card": CARD, "amount_due": 1200}).encode()
OTHER = "amount_due"
"""The body's other field, looked for by its key: its value (1200) can turn up in a random id."""
X = [sys.executable, "-m", "ultimat3.jobs.cli"]


def receiver() -> Job[ReceivedWebhook, Any]:
    def verify(inbound: Inbound) -> dict[str, Any]:
        checked = verify_webhook_signature(inbound.headers, inbound.body, secret=SECRET)
        return {"event_id": checked.event_id, "payload": json.loads(inbound.body)}

    async def handle(delivery: Any) -> None:
        return None

    return webhook_receiver(
        name="billing.events", path="/hooks/billing", tenant="none", verify=verify, handle=handle
    )


async def post_one(hook: Job[ReceivedWebhook, Any], driver: Any) -> None:
    headers = sign_webhook(secret=SECRET, event_id="evt_show", topic="invoice.paid", body=BODY)
    transport = httpx.ASGITransport(app=webhook_app(hook))
    with swap_adapter(JOB_DRIVER, driver):
        async with httpx.AsyncClient(transport=transport, base_url="http://hooks.test") as c:
            answer = await c.post("/hooks/billing", content=BODY, headers=headers)
    assert answer.status_code == 200, answer.text


async def x(cwd: Path, *argv: str) -> tuple[int, str, str]:
    env = {**os.environ, "PYTHONPATH": str(cwd)}
    proc = await asyncio.create_subprocess_exec(
        *X, *argv, cwd=cwd, env=env, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE
    )
    out, err = await asyncio.wait_for(proc.communicate(), timeout=60)
    assert proc.returncode is not None
    return proc.returncode, out.decode(), err.decode()


async def job_id_of(driver: PostgresJobDriver) -> str:
    (row,) = await driver.introspect.list(name="billing.events")
    return row.id


async def test_a_receiver_job_shows_its_payload_redacted_once_a_worker_declared_it(
    pg_driver: PostgresJobDriver, pg_schema: str, database_url: str, tmp_path: Path
) -> None:
    hook = receiver()
    await post_one(hook, pg_driver)
    worker = job_worker(jobs=[hook], driver=pg_driver)
    await worker.start()  # declares billing.events' x-sensitive paths in x_job_redactions
    await worker.stop()
    job_id = await job_id_of(pg_driver)
    assert (await pg_driver.introspect.show(job_id)).payload["payload"]["card"] == CARD  # stored

    where = ("--database-url", database_url, "--schema", pg_schema)
    code, out, err = await x(tmp_path, "jobs", "show", job_id, *where, "--json")
    assert code == 0, err
    shown = json.loads(out)
    assert shown["payload"] == {"event_id": "evt_show", "payload": REDACTED}
    assert CARD not in out and OTHER not in out

    code, out, err = await x(tmp_path, "jobs", "show", job_id, *where)
    assert code == 0, err
    assert REDACTED in out and CARD not in out and OTHER not in out


async def test_show_with_app_redacts_what_no_worker_declared_yet(
    pg_driver: PostgresJobDriver, pg_schema: str, database_url: str, tmp_path: Path
) -> None:
    hook = receiver()
    await post_one(hook, pg_driver)  # no worker ever started: the catalog is empty
    assert await pg_driver.redactions.lookup(["billing.events"]) == {}
    job_id = await job_id_of(pg_driver)
    (tmp_path / "hookapp.py").write_text(
        textwrap.dedent(
            """
            from ultimat3.jobs.factories.webhook_receiver import webhook_receiver

            async def handle(delivery):
                return None

            JOBS = [webhook_receiver(name="billing.events", path="/hooks/billing",
                                     tenant="none", verify=lambda inbound: {}, handle=handle)]
            """
        )
    )
    where = ("--database-url", database_url, "--schema", pg_schema, "--json")
    code, out, err = await x(tmp_path, "jobs", "show", job_id, "--app", "hookapp:JOBS", *where)
    assert code == 0, err
    assert json.loads(out)["payload"]["payload"] == REDACTED and CARD not in out

    code, out, err = await x(tmp_path, "jobs", "show", job_id, "--app", "nowhere:JOBS", *where)
    assert code == 1 and out == ""
    error = json.loads(err)["error"]
    assert error["code"] == "X_CONFIG_INVALID" and "nowhere" in error["message"]
    assert "x jobs show" in error["fix"]


async def test_the_postgres_catalog_is_a_union_of_whole_paths(pg_driver: PostgresJobDriver) -> None:
    catalog = pg_driver.redactions
    await catalog.declare({"a": [("x", "y")], "b": [()]})
    await catalog.declare({"a": [("x",), ("x", "y")]})  # ["x"] is not held by ["x", "y"]
    await catalog.declare({"a": [("z",)]})
    await catalog.declare({"a": [("x",)]})  # an older worker marking less un-redacts nothing
    assert await catalog.lookup(["a", "b", "c"]) == {
        "a": [("x", "y"), ("x",), ("z",)],
        "b": [()],
    }


# --- the memory driver, in process ---------------------------------------------------------------


class Card(BaseModel):
    number: str = Field(json_schema_extra={"x-sensitive": True})
    brand: str


class Order(BaseModel):
    order: str
    card: Card | None = None
    cards: list[Card] = []
    notes: dict[str, str] = Field(default={}, json_schema_extra={"x-sensitive": True})


def test_sensitive_paths_follow_refs_lists_maps_and_optionals() -> None:
    paths = sensitive_paths(Order.model_json_schema())
    assert sorted(paths) == [("card", "number"), ("cards", "*", "number"), ("notes",)]
    value = {
        "order": "o-1",
        "card": {"number": "4242", "brand": "visa"},
        "cards": [{"number": "5555", "brand": "mc"}, {"brand": "amex"}],
        "notes": {"a": "b"},
    }
    assert redact_paths(value, paths) == {
        "order": "o-1",
        "card": {"number": REDACTED, "brand": "visa"},
        "cards": [{"number": REDACTED, "brand": "mc"}, {"brand": "amex"}],
        "notes": REDACTED,
    }
    assert redact_paths({"order": "o", "card": None}, paths) == {"order": "o", "card": None}


def test_show_on_memory_redacts_declared_paths_and_secret_key_names(
    capsys: pytest.CaptureFixture[str],
) -> None:
    async def body(order: Order, step: Any, ctx: Any) -> None:
        return None

    checkout = job(input=Order, idempotency_key=lambda o: o.order, name="checkout", run=body)
    driver = memory_job_driver()
    job_id = new_id()
    payload = {"order": "o-1", "card": {"number": "4242", "brand": "visa"}, "api_token": "t0k"}
    request = EnqueueRequest(
        id=job_id,
        run_id=new_id(),
        name="checkout",
        queue="default",
        payload=payload,
        idempotency_key="o-1",
        max_attempts=3,
    )
    asyncio.run(driver.enqueue(request))
    asyncio.run(driver.redactions.declare(declared_paths([checkout])))
    assert main(["jobs", "show", job_id, "--json"], driver=driver) == 0
    shown = json.loads(capsys.readouterr().out)
    assert shown["payload"] == {
        "order": "o-1",
        "card": {"number": REDACTED, "brand": "visa"},
        "api_token": REDACTED,
    }


async def test_the_dashboard_job_page_shows_the_receiver_payload_redacted(
    pg_driver: PostgresJobDriver,
) -> None:
    from ultimat3.jobs.dashboard import jobs_dashboard

    hook = receiver()
    await post_one(hook, pg_driver)
    worker = job_worker(jobs=[hook], driver=pg_driver)
    await worker.start()
    await worker.stop()
    job_id = await job_id_of(pg_driver)
    transport = httpx.ASGITransport(app=jobs_dashboard(driver=pg_driver))
    async with httpx.AsyncClient(transport=transport, base_url="http://dash.test") as client:
        page = await client.get(f"/jobs/{job_id}")
    assert page.status_code == 200
    assert REDACTED in page.text and "evt_show" in page.text
    assert CARD not in page.text and OTHER not in page.text
