"""The same dashboard over the Redis driver, in the same Chromium: the overview's counts are
the driver's, a dead job's timeline shows its failed step, and retry moves it to ready."""

from __future__ import annotations

import os
import uuid
from collections.abc import Iterator
from typing import Any

import pytest
from playwright.sync_api import Page, expect

from ultimat3.jobs.adapter import JobDriver
from ultimat3.jobs.dashboard import jobs_dashboard
from ultimat3.jobs_redis import RedisJobDriver, redis_job_driver

from .conftest import LiveDashboard

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
