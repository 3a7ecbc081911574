"""The dashboard in a real headless Chromium, served by uvicorn on loopback inside a Starlette
app (mounted at ``/admin/jobs``) over a real Postgres driver, with a real worker running the
shop's jobs: jobs in every state, then clicking through. The last test runs it over Redis."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import uuid
from collections.abc import Callable, Iterator
from typing import Any

import psycopg
import pytest
from playwright.sync_api import Page, expect
from pydantic import BaseModel
from starlette.applications import Starlette
from starlette.routing import Mount

from ultimat3.core import new_id
from ultimat3.jobs import JobContext, JobWorker, Retry, Step, job, job_worker, task
from ultimat3.jobs.adapter import EnqueueRequest, JobDriver
from ultimat3.jobs.dashboard import jobs_dashboard
from ultimat3.jobs.postgres import migrate, postgres_job_driver
from ultimat3.jobs_redis import RedisJobDriver, redis_job_driver

from .conftest import LiveDashboard

MOUNT = "/admin/jobs"
FAILING = {"charge": True}
"""The card vendor is down until a test says otherwise."""


class Cart(BaseModel):
    cart: str


class Org(BaseModel):
    org: str


async def load_cart(cart: str) -> dict[str, Any]:
    return {"cart": cart, "total": 42}


async def take_payment(cart: Any) -> str:
    if FAILING["charge"]:
        raise ConnectionError("card vendor timed out")
    return f"ch_{cart['cart']}"


@job(
    input=Cart,
    name="shop.charge",
    queue="payments",
    idempotency_key=lambda i: f"charge:{i.cart}",
    retry=Retry(attempts=1),
)
async def charge(input: Cart, step: Step, ctx: JobContext) -> dict[str, str]:
    cart = await step.run("load", lambda signal: load_cart(input.cart))
    payment = await step.run("charge", lambda signal: take_payment(cart))
    return {"payment": str(payment)}


@job(input=Org, name="shop.onboard", queue="onboarding", idempotency_key=lambda i: i.org)
async def onboard(input: Org, step: Step, ctx: JobContext) -> None:
    await step.run("welcome", lambda signal: load_cart(input.org))
    await step.sleep("1h")
    await step.run("nudge", lambda signal: load_cart(input.org))


@job(input=Org, name="shop.report", queue="reports", idempotency_key=lambda i: f"r:{i.org}")
async def report(input: Org, step: Step, ctx: JobContext) -> dict[str, int]:
    await step.run("render", lambda signal: load_cart(input.org))
    return {"pages": 3}


nightly = task(
    name="shop.nightly-report", cron="17 3 * * *", enqueue=lambda occ: (report, {"org": "all"})
)


def raw(name: str, queue: str, payload: Any, *, delay_ms: int | None = None) -> EnqueueRequest:
    job_id = new_id()
    return EnqueueRequest(
        id=job_id,
        run_id=new_id(),
        name=name,
        queue=queue,
        payload=payload,
        idempotency_key=f"{name}:{job_id}",
        max_attempts=1 if name == "shop.charge" else 3,
        delay_ms=delay_ms,
    )


async def seed_shop(driver: JobDriver, xss: str) -> dict[str, str]:
    intro: Any = driver.introspect  # type: ignore[attr-defined]
    ids: dict[str, str] = {}

    async def put(key: str, req: EnqueueRequest) -> str:
        ids[key] = (await driver.enqueue(req)).id
        return ids[key]

    await put("dead-1", raw("shop.charge", "payments", {"cart": "c1"}))
    await put("dead-2", raw("shop.charge", "payments", {"cart": "c2"}))
    await put("suspended", raw("shop.onboard", "onboarding", {"org": "acme"}))
    await put("done", raw("shop.report", "reports", {"org": "acme"}))
    await put("delayed", raw("shop.report", "reports", {"org": "later"}, delay_ms=3_600_000))
    await put("ready", raw("shop.report", "inbox", {"org": "waiting"}))
    await put("cancelled", raw("shop.report", "inbox", {"org": "nope"}))
    await intro.cancel(ids["cancelled"], "not needed")
    await put("held", raw("shop.report", "held", {"org": "held"}))
    await intro.pause_queue("held")
    # running: held by a worker of another deployment, on a queue ours does not serve
    await put("running", raw("shop.report", "slow", {"org": "slow"}))
    await driver.claim(
        queues=["slow"], limit=1, worker_id="w-elsewhere", visibility_timeout_ms=600_000
    )
    # attacker-controlled text in a name, a queue, an input, a step and an error
    evil_q = f"evil{xss}"
    evil = await put("evil", raw(f"shop.{xss}", evil_q, {"note": xss}))
    got = await driver.claim(
        queues=[evil_q], limit=1, worker_id="w-seed", visibility_timeout_ms=60_000
    )
    err = {"code": None, "message": f"boom {xss}", "fix": xss, "meta": {"x": xss}, "status": None}
    await driver.steps.record(
        evil, f"step{xss}", state="failed", worker_id="w-seed", claim=got[0].claim, error=err
    )
    await driver.nack(evil, worker_id="w-seed", claim=got[0].claim, outcome="dead", error=err)
    ledger: Any = driver.backfills  # type: ignore[attr-defined]
    await ledger.begin("users.reindex", job_id=ids["done"], cursor={"after": 42})
    return ids


class Shop:
    def __init__(
        self, live: LiveDashboard, ids: dict[str, str], worker: JobWorker, schema: str
    ) -> None:
        self.live, self.ids, self.worker, self.schema = live, ids, worker, schema

    @property
    def url(self) -> str:
        return self.live.url + MOUNT

    def state(self, key: str) -> str:
        intro: Any = self.live.driver.introspect  # type: ignore[attr-defined]
        return str(self.live.call(intro.show(self.ids[key])).state)

    def wait_state(self, key: str, state: str) -> None:
        intro: Any = self.live.driver.introspect  # type: ignore[attr-defined]

        async def probe() -> bool:
            return bool((await intro.show(self.ids[key])).state == state)

        self.live.wait_for(probe, f"{key} to be {state}")


def app_of(driver: JobDriver) -> Starlette:
    dashboard = jobs_dashboard(
        driver=driver, title="Shop jobs", allow_actions=True, tasks=[nightly]
    )
    return Starlette(routes=[Mount(MOUNT, app=dashboard)])


@pytest.fixture(scope="module")
def shop(database_url: str, xss: str) -> Iterator[Shop]:
    schema = f"x_dash_{uuid.uuid4().hex[:12]}"

    async def open_driver() -> JobDriver:
        await migrate(database_url, schema=schema)
        return postgres_job_driver(database_url, schema=schema)

    live = LiveDashboard(open_driver, app_of)
    worker = job_worker(
        jobs=[charge, onboard, report],
        driver=live.driver,
        handle_signals=False,
        poll_interval_ms=50,
        idle_poll_max_ms=200,
    )

    async def close(driver: JobDriver) -> None:
        await worker.stop()
        await driver.close()
        async with await psycopg.AsyncConnection.connect(database_url, autocommit=True) as conn:
            await conn.execute(f'DROP SCHEMA IF EXISTS "{schema}" CASCADE')

    try:
        ids = live.call(seed_shop(live.driver, xss))
        live.call(worker.start())
        shop = Shop(live, ids, worker, schema)
        for key, state in (
            ("dead-1", "dead"),
            ("dead-2", "dead"),
            ("suspended", "suspended"),
            ("done", "done"),
        ):
            shop.wait_state(key, state)
        yield shop
    finally:
        live.stop(close)


def marked(page: Page, attr: str) -> dict[str, str]:
    """``{value of data-<attr>: its text}`` over the page."""
    cells = page.locator(f"[data-{attr}]")
    return {
        cells.nth(i).get_attribute(f"data-{attr}") or "": cells.nth(i).inner_text()
        for i in range(cells.count())
    }


def test_the_overview_counts_match_x_jobs_stats(
    shop: Shop, page: Page, database_url: str, shots: Callable[[Page, str], Any]
) -> None:
    page.goto(shop.url + "/")
    expect(page.locator("h2").first).to_have_text("Queues")
    shown = marked(page, "count")
    paused = marked(page, "paused")
    out = subprocess.run(
        [
            sys.executable,
            "-m",
            "ultimat3.jobs.cli",
            "jobs",
            "stats",
            "--json",
            "--database-url",
            database_url,
            "--schema",
            shop.schema,
        ],
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    stats = json.loads(out.stdout)["queues"]
    assert stats, out
    for row in stats:
        for state in ("ready", "delayed", "running", "suspended", "failed", "dead"):
            assert shown[f"{row['queue']} {state}"] == str(row[state]), (row["queue"], state)
        assert paused[row["queue"]] == ("paused" if row["paused"] else "no")
    assert shown["payments dead"] == "2" and shown["held ready"] == "1"
    expect(page.locator("#workers")).to_contain_text("payments")
    shots(page, "overview")


def test_a_dead_jobs_timeline_shows_the_failed_step_and_retry_completes_it(
    shop: Shop, page: Page, shots: Callable[[Page, str], Any]
) -> None:
    page.goto(shop.url + "/dead")
    group = page.locator("#dead tr", has_text="shop.charge")
    expect(group).to_contain_text("2")
    shots(page, "dead-letter")
    page.click(f"a:text('{shop.ids['dead-1']}')")
    timeline = page.locator("#timeline")
    failed = timeline.locator("tr", has_text="charge").filter(has_text="failed")
    expect(failed).to_contain_text("card vendor timed out")
    expect(timeline.locator("tr", has_text="load")).to_contain_text("completed")
    expect(page.locator("#last-error")).to_contain_text("ConnectionError")
    shots(page, "job")
    FAILING["charge"] = False
    try:
        page.locator('#actions button[data-action="retry"]').first.click()
        expect(page.locator(".banner.ok")).to_contain_text("requeued: ready")
        shop.wait_state("dead-1", "done")  # the worker ran it again
    finally:
        FAILING["charge"] = True
    page.reload()
    expect(page.locator("#fields")).to_contain_text("done")
    expect(timeline.locator("tr", has_text="load")).to_contain_text("replayed from storage")
    expect(timeline.locator("tr", has_text="charge")).to_contain_text("completed")


def test_pause_pauses_the_queue_and_resume_resumes_it(shop: Shop, page: Page) -> None:
    intro: Any = shop.live.driver.introspect  # type: ignore[attr-defined]
    page.goto(shop.url + "/")
    row = page.locator("#queues tr", has_text="reports")
    row.locator('button[data-action="pause"]').click()
    expect(page.locator(".banner.ok")).to_contain_text("queue reports paused")
    expect(page.locator('[data-paused="reports"]')).to_have_text("paused")
    assert "reports" in shop.live.call(intro.paused_queues())
    page.locator("#queues tr", has_text="reports").locator('button[data-action="resume"]').click()
    expect(page.locator('[data-paused="reports"]')).to_have_text("no")
    assert "reports" not in shop.live.call(intro.paused_queues())


def test_the_job_list_filters_and_the_tasks_page_reads_the_store(
    shop: Shop, page: Page, shots: Callable[[Page, str], Any]
) -> None:
    page.goto(shop.url + "/jobs")
    page.select_option("select[name=state]", "suspended")
    page.click("form.filters button")
    rows = page.locator("#jobs tbody tr")
    expect(rows).to_have_count(1)
    expect(rows.first).to_contain_text(shop.ids["suspended"])
    page.goto(shop.url + "/jobs")
    shots(page, "jobs")
    page.goto(shop.url + "/tasks")
    expect(page.locator("#tasks")).to_contain_text("17 3 * * *")
    expect(page.locator("#backfills")).to_contain_text("users.reindex")
    shots(page, "tasks")


def test_xss_payloads_stay_text(shop: Shop, page: Page, xss: str) -> None:
    for path in ("/", "/jobs", "/dead", f"/jobs/{shop.ids['evil']}"):
        page.goto(shop.url + path)
        assert page.locator("script").count() == 0, path
        assert page.locator("img").count() == 0, path
        assert page.evaluate("() => window.__xss") is None, path
    body = page.locator("body").inner_text()
    assert f"shop.{xss}" in body and f"boom {xss}" in body and f"step{xss}" in body


# --- the same dashboard over Redis ------------------------------------------------------------

REDIS_URL = os.environ.get("REDIS_URL", "redis://127.0.0.1:6379/0")


@pytest.fixture(scope="module")
def on_redis(seed: Any) -> Iterator[tuple[LiveDashboard, Any]]:
    prefix = f"t-dash-{uuid.uuid4().hex[:12]}"

    async def open_driver() -> JobDriver:
        return redis_job_driver(REDIS_URL, prefix=prefix)

    async def close(driver: JobDriver) -> None:
        assert isinstance(driver, RedisJobDriver)
        try:
            async for key in driver.client.scan_iter(match="{" + prefix + "}:*", count=1000):
                await driver.client.delete(key)
        finally:
            await driver.close()

    live = LiveDashboard(open_driver, lambda d: jobs_dashboard(driver=d, allow_actions=True))
    try:
        seeded = live.call(seed(live.driver))
        yield live, seeded
    finally:
        live.stop(close)


def test_on_redis_the_overview_counts_and_retry_work(
    on_redis: tuple[LiveDashboard, Any], page: Page
) -> None:
    live, seeded = on_redis
    page.goto(live.url + "/")
    cells = page.locator("[data-count]")
    shown = {
        cells.nth(i).get_attribute("data-count"): cells.nth(i).inner_text()
        for i in range(cells.count())
    }
    stats = live.call(live.driver.stats())
    assert stats
    for s in stats:
        for state in ("ready", "delayed", "running", "suspended", "failed", "dead"):
            assert shown[f"{s.queue} {state}"] == str(getattr(s, state)), (s.queue, state)
    expect(page.locator('[data-paused="held"]')).to_have_text("paused")
    dead = seeded.ids["dead"]
    page.goto(f"{live.url}/jobs/{dead}")
    failed = page.locator("#timeline tr", has_text="charge")
    expect(failed).to_contain_text("failed")
    expect(failed).to_contain_text("X_CHARGE_DECLINED")
    page.locator('#actions button[data-action="retry"]').first.click()
    expect(page.locator(".banner.ok")).to_contain_text("requeued: ready")
    intro: Any = live.driver.introspect  # type: ignore[attr-defined]
    assert live.call(intro.show(dead)).state == "ready"
    assert page.locator("script").count() == 0
