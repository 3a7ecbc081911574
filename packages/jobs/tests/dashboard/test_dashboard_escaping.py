"""Every value the dashboard shows is text: job names, queues, inputs, step names, error
messages and fixes carry ``<script>`` payloads, and no page grows a tag because of them."""

from __future__ import annotations

import asyncio
from typing import Any

import httpx
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from ultimat3.core import new_id
from ultimat3.jobs.adapter import EnqueueRequest, JobDriver, memory_job_driver
from ultimat3.jobs.dashboard import jobs_dashboard

BASE = "/admin/jobs"
PAGES = ("/", "/jobs", "/dead", "/tasks")


async def test_xss_payloads_stay_text_on_every_page(
    memory: JobDriver, seed: Any, xss: str, client_for: Any, parse: Any
) -> None:
    seeded = await seed(memory)
    clean = memory_job_driver()
    await seed(clean)  # the same shapes; only the payloads differ
    for actions in (False, True):
        client = client_for(jobs_dashboard(driver=memory, allow_actions=actions))
        for path in (*PAGES, f"/jobs/{seeded.ids['evil']}"):
            r = await client.get(BASE + path)
            assert r.status_code == 200, path
            page = parse(r.text)
            assert page.tags["script"] == 0 and page.tags["img"] == 0, (path, page.tags)
            assert "<script>window.__xss" not in r.text
        r = await client.get(f"{BASE}/jobs/{seeded.ids['evil']}")
        text = parse(r.text).text
        assert f"dash.{xss}" in text  # the name, shown as the text it is
        assert f"boom {xss}" in text  # the error message
        assert f"step{xss}" in text  # the step name


def _tags(html: str, parse: Any) -> dict[str, int]:
    return dict(parse(html).tags)


@settings(
    max_examples=40,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture],
)
@given(
    name=st.text(min_size=1, max_size=40),
    queue=st.text(min_size=1, max_size=20),
    note=st.text(max_size=40),
    message=st.text(max_size=60),
)
def test_any_text_renders_as_itself_and_adds_no_markup(
    parse: Any, name: str, queue: str, note: str, message: str
) -> None:
    """Property: whatever text a job carries, the page's tags are those of a plain job's page,
    and the text reads back exactly."""

    async def pages(n: str, q: str, nt: str, msg: str) -> tuple[str, str]:
        driver = memory_job_driver()
        job_id = new_id()
        await driver.enqueue(
            EnqueueRequest(
                id=job_id,
                run_id=new_id(),
                name=n,
                queue=q,
                payload={"note": nt},
                idempotency_key=f"k:{job_id}",
                max_attempts=1,
            )
        )
        claimed = await driver.claim(
            queues=[q], limit=1, worker_id="w", visibility_timeout_ms=60_000
        )
        error: dict[str, Any] = {"code": None, "message": msg, "meta": {}}
        await driver.nack(
            job_id, worker_id="w", claim=claimed[0].claim, outcome="dead", error=error
        )
        app = jobs_dashboard(driver=driver)
        async with httpx.AsyncClient(
            transport=httpx.ASGITransport(app=app), base_url="http://t"
        ) as c:
            one = (await c.get(f"/jobs/{job_id}")).text
            dead = (await c.get("/dead")).text
        return one, dead

    one, dead = asyncio.run(pages(name, queue, note, message))
    plain_one, plain_dead = asyncio.run(pages("plain", "plainq", "n", "m"))
    assert _tags(one, parse) == _tags(plain_one, parse)
    assert _tags(dead, parse) == _tags(plain_dead, parse)
    text = parse(one).text
    assert name in text and queue in text
    assert message.strip() == "" or message in text
