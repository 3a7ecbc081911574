"""The dashboard's pages on the memory driver, through httpx's ASGI transport, mounted at
``/admin/jobs``: what each shows, and how many reads each makes."""

from __future__ import annotations

from collections import Counter
from typing import Any

import pytest

from ultimat3.core import CODES, XError, swap_adapter
from ultimat3.jobs import job, task
from ultimat3.jobs.adapter import JOB_DRIVER, JobDriver, memory_job_driver
from ultimat3.jobs.dashboard import JobsDashboard, jobs_dashboard

BASE = "/admin/jobs"


def reads(calls: Counter[str]) -> int:
    return sum(calls.values())


async def test_overview_counts_match_the_drivers_stats_in_five_reads(
    memory: JobDriver, seed: Any, counting: Any, client_for: Any, parse: Any
) -> None:
    seeded = await seed(memory)
    calls: Counter[str] = Counter()
    client = client_for(jobs_dashboard(driver=counting(memory, calls)))
    r = await client.get(f"{BASE}/")
    assert r.status_code == 200
    page = parse(r.text)
    counts = page.by_data("count")
    for s in await memory.stats():
        for state in ("ready", "delayed", "running", "suspended", "failed", "dead"):
            assert counts[f"{s.queue} {state}"] == str(getattr(s, state)), (s.queue, state)
    assert counts[f"{seeded.queues[1]} dead"] == "3"
    paused = page.by_data("paused")
    assert {q for q, said in paused.items() if said == "paused"} == {"held"}
    assert set(paused) == {s.queue for s in await memory.stats()}
    # the last hour's counters: one done, four dead, one failed
    assert "all jobs" in page.by_id("counters")
    assert reads(calls) == 5, calls
    assert calls["driver.stats"] == 1


async def test_overview_refreshes_itself_and_no_page_carries_a_script(
    memory: JobDriver, seed: Any, client_for: Any
) -> None:
    seeded = await seed(memory)
    client = client_for(jobs_dashboard(driver=memory, allow_actions=True))
    r = await client.get(f"{BASE}/")
    assert '<meta http-equiv="refresh" content="5">' in r.text
    assert "script-src" not in r.headers["content-security-policy"]  # default-src 'none'
    assert "default-src 'none'" in r.headers["content-security-policy"]
    for path in ("/", "/jobs", f"/jobs/{seeded.ids['evil']}", "/dead", "/tasks"):
        body = (await client.get(BASE + path)).text.lower()
        assert "<script" not in body, path
        assert "<img" not in body, path


async def test_the_job_list_filters_like_x_jobs_list(
    memory: JobDriver, seed: Any, client_for: Any, parse: Any
) -> None:
    seeded = await seed(memory)
    client = client_for(jobs_dashboard(driver=memory))

    async def ids(**params: str) -> set[str]:
        r = await client.get(f"{BASE}/jobs", params=params)
        assert r.status_code == 200, r.text
        return {seeded_id for seeded_id in seeded.ids.values() if seeded_id in r.text}

    assert await ids(state="dead") == {seeded.ids[k] for k in ("dead", "dead2", "dead3", "evil")}
    assert await ids(queue="work") == {seeded.ids["ready"], seeded.ids["delayed"]}
    assert await ids(name="dash.report") == {seeded.ids["done"]}
    assert await ids(id_prefix=seeded.ids["running"][:30]) == {seeded.ids["running"]}
    assert await ids(created_from="2999-01-01T00:00") == set()
    assert len(await ids(created_to="2999-01-01T00:00+00:00")) == len(seeded.ids)
    # each row names its last error's code
    r = await client.get(f"{BASE}/jobs", params={"state": "dead", "name": "dash.charge"})
    assert r.text.count("X_CHARGE_DECLINED") == 2
    assert "unclassified" in r.text


async def test_the_job_list_pages_through_keyset_cursors_in_three_reads(
    counting: Any, client_for: Any, parse: Any, put: Any
) -> None:
    driver = memory_job_driver()

    made = [await put(driver, queue="pages") for _ in range(7)]
    calls: Counter[str] = Counter()
    client = client_for(jobs_dashboard(driver=counting(driver, calls)))
    seen: list[str] = []
    url: str | None = f"{BASE}/jobs?queue=pages&limit=3"
    pages = 0
    while url:
        calls.clear()
        r = await client.get(url)
        assert r.status_code == 200
        assert reads(calls) <= 3, calls
        seen += [i for i in made if i in r.text]
        url = _link(r.text, "older")
        pages += 1
    assert pages == 3
    assert sorted(seen) == sorted(made) and len(seen) == 7
    # and back: the last page's "newer" link lands on the page before it
    r = await client.get(f"{BASE}/jobs?queue=pages&limit=3")
    second = _link(r.text, "older")
    assert second
    r2 = await client.get(second)
    back = _link(r2.text, "newer")
    assert back
    r3 = await client.get(back)
    assert [i for i in made if i in r3.text] == [i for i in made if i in r.text]


def _link(html: str, label: str) -> str | None:
    """The href of the pager link labelled ``label`` (unescaped)."""
    import html as htmllib
    import re

    arrow = "older →" if label == "older" else "← newer"
    m = re.search(r'<a href="([^"]+)">' + re.escape(arrow) + "</a>", html)
    return htmllib.unescape(m.group(1)) if m else None


@pytest.mark.parametrize(
    ("query", "code", "needle"),
    [
        ("state=bogus", "X_INVARIANT", "state 'bogus'"),
        ("limit=many", "X_JOB_PAGE_INVALID", "limit 'many'"),
        ("limit=500", "X_JOB_PAGE_INVALID", "500"),
        ("after=not-a-cursor", "X_JOB_PAGE_INVALID", "cursor"),
        ("created_from=yesterday", "X_INVARIANT", "created_from 'yesterday'"),
    ],
)
async def test_a_bad_filter_is_refused_with_its_code_and_a_fix(
    memory: JobDriver, client_for: Any, query: str, code: str, needle: str
) -> None:
    client = client_for(jobs_dashboard(driver=memory))
    r = await client.get(f"{BASE}/jobs?{query}")
    assert r.status_code == (CODES[code].status or 400)  # the code's own status, else 400
    assert code in r.text
    assert needle in r.text.replace("&#x27;", "'")
    assert "fix:" in r.text


async def test_one_job_shows_its_timeline_error_and_redacted_input_in_two_reads(
    memory: JobDriver, seed: Any, counting: Any, client_for: Any, parse: Any
) -> None:
    seeded = await seed(memory)
    calls: Counter[str] = Counter()
    client = client_for(jobs_dashboard(driver=counting(memory, calls)))
    r = await client.get(f"{BASE}/jobs/{seeded.ids['dead']}")
    assert r.status_code == 200
    assert reads(calls) == 2, calls
    page = parse(r.text)
    timeline = page.by_id("timeline")
    assert timeline.index("load") < timeline.index("charge")
    assert "completed" in timeline and "failed" in timeline
    assert "X_CHARGE_DECLINED" in timeline
    assert "X_CHARGE_DECLINED" in page.by_id("last-error")
    assert "card declined by the vendor" in page.by_id("last-error")
    payload = page.by_id("payload")
    assert "tok_live_123" not in r.text
    assert '"card_token": "[redacted]"' in payload
    assert '"amount": 5' in payload
    # read-only: no actions offered
    assert "<form" not in r.text.replace('class="filters"', "")


async def test_a_job_nobody_queued_is_404_with_x_job_not_found(
    memory: JobDriver, client_for: Any
) -> None:
    client = client_for(jobs_dashboard(driver=memory))
    r = await client.get(f"{BASE}/jobs/01a00000-0000-7000-8000-000000000000")
    assert r.status_code == 404
    assert "X_JOB_NOT_FOUND" in r.text


async def test_the_dead_letter_groups_by_name_and_error_code_in_one_read(
    memory: JobDriver, seed: Any, counting: Any, client_for: Any, parse: Any
) -> None:
    seeded = await seed(memory)
    calls: Counter[str] = Counter()
    client = client_for(jobs_dashboard(driver=counting(memory, calls)))
    r = await client.get(f"{BASE}/dead")
    assert reads(calls) == 1, calls
    rows = parse(r.text).by_id("dead")
    assert "dash.charge" in rows
    assert "X_CHARGE_DECLINED2" in rows.replace(" ", "")  # the group of two
    assert "unclassified" in rows
    for key in ("dead", "dead2", "dead3", "evil"):
        assert seeded.ids[key] in r.text
    assert seeded.ids["failed"] not in r.text


async def test_the_tasks_page_shows_cron_next_fire_paused_and_backfills(
    memory: JobDriver, client_for: Any, parse: Any
) -> None:
    from pydantic import BaseModel

    class Empty(BaseModel):
        pass

    @job(input=Empty, idempotency_key=lambda i: "nightly")
    async def nightly(input: Empty, step: Any, ctx: Any) -> None:
        return None

    report = task(name="reports.nightly", cron="17 3 * * *", enqueue=nightly)
    intro: Any = memory.introspect  # type: ignore[attr-defined]
    await intro.pause_task("reports.nightly")
    ledger: Any = memory.backfills  # type: ignore[attr-defined]
    await ledger.begin("users.reindex", job_id=None, cursor={"after": 42})
    client = client_for(jobs_dashboard(driver=memory, tasks=[report]))
    r = await client.get(f"{BASE}/tasks")
    page = parse(r.text)
    tasks = page.by_id("tasks")
    assert "17 3 * * *" in tasks and "UTC" in tasks
    assert page.by_data("task-paused") == {"reports.nightly": "paused"}
    assert "03:17:00Z" in tasks  # the next fire, from next_task_run
    assert "users.reindex" in page.by_id("backfills")


async def test_without_a_driver_it_reads_the_installed_one(client_for: Any, put: Any) -> None:
    driver = memory_job_driver()

    job_id = await put(driver, queue="installed")
    client = client_for(jobs_dashboard())
    with swap_adapter(JOB_DRIVER, driver):
        r = await client.get(f"{BASE}/jobs")
    assert job_id in r.text


async def test_a_driver_without_introspect_shows_stats_and_refuses_the_rest(
    client_for: Any, put: Any
) -> None:
    inner = memory_job_driver()

    await put(inner, queue="bare")

    class Bare:
        name = "bare"

        def __getattr__(self, name: str) -> Any:
            if name in ("introspect", "backfills"):
                raise AttributeError(name)
            return getattr(inner, name)

    client = client_for(jobs_dashboard(driver=Bare()))
    r = await client.get(f"{BASE}/")
    assert r.status_code == 200 and "bare" in r.text and "no introspect" in r.text
    r = await client.get(f"{BASE}/jobs")
    assert r.status_code == 501 and "X_NOT_IMPLEMENTED" in r.text


async def test_links_and_the_stylesheet_live_under_the_mount(
    memory: JobDriver, client_for: Any
) -> None:
    client = client_for(jobs_dashboard(driver=memory, title="Acme jobs"))
    r = await client.get(f"{BASE}/")
    assert f'href="{BASE}/jobs"' in r.text and f'href="{BASE}/static/dashboard.css"' in r.text
    assert "<h1>Acme jobs</h1>" in r.text
    css = await client.get(f"{BASE}/static/dashboard.css")
    assert css.status_code == 200 and css.headers["content-type"].startswith("text/css")
    assert (await client.get(f"{BASE}/nowhere")).status_code == 404
    assert (await client.post(f"{BASE}/jobs")).status_code == 405
    assert (await client.get(f"{BASE}/actions/retry")).status_code == 405
    assert (await client.post(f"{BASE}/actions/explode")).status_code == 404
    head = await client.head(f"{BASE}/")
    assert head.status_code == 200 and head.content == b""


@pytest.mark.parametrize(
    ("kwargs", "needle"),
    [
        ({"title": ""}, "title"),
        ({"allow_actions": "yes"}, "allow_actions"),
        ({"tasks": "reports.nightly"}, "tasks"),
        ({"tasks": [object()]}, "tasks"),
        ({"driver": object()}, "driver"),
    ],
)
def test_jobs_dashboard_refuses_a_bad_argument(kwargs: dict[str, Any], needle: str) -> None:
    with pytest.raises(XError) as caught:
        jobs_dashboard(**kwargs)
    assert caught.value.code == "X_CONFIG_INVALID"
    assert needle in caught.value.message and caught.value.fix


def test_jobs_dashboard_answers_the_asgi_app() -> None:
    app = jobs_dashboard()
    assert isinstance(app, JobsDashboard)
    assert app.allow_actions is False and app.title == "Jobs"


async def test_it_answers_the_lifespan_protocol() -> None:
    sent: list[dict[str, Any]] = []
    inbox = [{"type": "lifespan.startup"}, {"type": "lifespan.shutdown"}]

    async def receive() -> dict[str, Any]:
        return inbox.pop(0)

    async def send(message: dict[str, Any]) -> None:
        sent.append(message)

    await jobs_dashboard()({"type": "lifespan"}, receive, send)  # type: ignore[arg-type]
    assert [m["type"] for m in sent] == [
        "lifespan.startup.complete",
        "lifespan.shutdown.complete",
    ]


async def test_with_no_driver_installed_a_page_says_so_with_the_fix(client_for: Any) -> None:
    from ultimat3.core import installed_adapter

    assert installed_adapter(JOB_DRIVER) is None  # nothing installed in this test
    r = await client_for(jobs_dashboard()).get(f"{BASE}/")
    assert r.status_code == 503
    assert "X_ADAPTER_MISSING" in r.text and "install_job_driver" in r.text
