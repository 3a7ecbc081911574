"""The dashboard's actions on the memory driver: each POST changes exactly what it says through
the introspection, answers the CLI's refusals as a message, and nothing moves without a valid
CSRF token or with actions off."""

from __future__ import annotations

from typing import Any

import httpx
import pytest

from ultimat3.core import capture_log_events
from ultimat3.jobs.adapter import JobDriver
from ultimat3.jobs.dashboard import jobs_dashboard

BASE = "/admin/jobs"


def intro_of(driver: JobDriver) -> Any:
    return driver.introspect  # type: ignore[attr-defined]


async def ready_client(driver: JobDriver, client_for: Any) -> tuple[httpx.AsyncClient, str]:
    """A client that loaded a page (so it holds the CSRF cookie), and the token."""
    client = client_for(jobs_dashboard(driver=driver, allow_actions=True))
    r = await client.get(f"{BASE}/")
    assert "x_jobs_csrf" in r.headers["set-cookie"]
    assert "HttpOnly" in r.headers["set-cookie"] and "SameSite=Strict" in r.headers["set-cookie"]
    assert f"Path={BASE}" in r.headers["set-cookie"]
    token = client.cookies["x_jobs_csrf"]
    assert f'name="csrf" value="{token}"' in r.text
    return client, token


async def test_retry_moves_a_dead_job_to_ready_and_logs_the_action(
    memory: JobDriver, seed: Any, client_for: Any
) -> None:
    seeded = await seed(memory)
    client, token = await ready_client(memory, client_for)
    dead = seeded.ids["dead"]
    page = await client.get(f"{BASE}/jobs/{dead}")
    assert 'data-action="retry"' in page.text and 'data-action="cancel"' not in page.text
    with capture_log_events() as events:
        r = await client.post(f"{BASE}/actions/retry", data={"id": dead, "csrf": token})
    assert r.status_code == 200
    assert f"job {dead} requeued: ready" in r.text
    row = await intro_of(memory).show(dead)
    assert row.state == "ready"
    assert row.steps["load"].state == "completed"  # kept: it replays from storage
    assert [e for e in events if e["event"] == "jobs.dashboard.action"] == [
        {
            "event": "jobs.dashboard.action",
            "level": "info",
            "action": "retry",
            "outcome": "ok",
            "job_id": dead,
        }
    ]


async def test_retry_from_a_step_drops_that_step_and_the_later_ones(
    memory: JobDriver, seed: Any, client_for: Any
) -> None:
    seeded = await seed(memory)
    client, token = await ready_client(memory, client_for)
    dead = seeded.ids["dead"]
    r = await client.post(
        f"{BASE}/actions/retry", data={"id": dead, "from_step": "load", "csrf": token}
    )
    assert r.status_code == 200 and "steps from &#x27;load&#x27; on run again" in r.text
    row = await intro_of(memory).show(dead)
    assert row.state == "ready" and "load" not in row.steps and "charge" not in row.steps


async def test_a_refused_action_shows_the_clis_code_and_changes_nothing(
    memory: JobDriver, seed: Any, client_for: Any
) -> None:
    seeded = await seed(memory)
    client, token = await ready_client(memory, client_for)
    live = seeded.ids["ready"]
    with capture_log_events() as events:
        r = await client.post(f"{BASE}/actions/retry", data={"id": live, "csrf": token})
    assert r.status_code == 409
    assert "X_JOB_NOT_REQUEUEABLE" in r.text and "fix:" in r.text
    assert (await intro_of(memory).show(live)).state == "ready"
    assert [e["outcome"] for e in events if e["event"] == "jobs.dashboard.action"] == [
        "X_JOB_NOT_REQUEUEABLE"
    ]
    r = await client.post(f"{BASE}/actions/cancel", data={"id": seeded.ids["done"], "csrf": token})
    assert r.status_code == 409 and "X_JOB_NOT_CANCELLABLE" in r.text
    r = await client.post(
        f"{BASE}/actions/retry", data={"id": "01a00000-0000-7000-8000-000000000000", "csrf": token}
    )
    assert r.status_code == 404 and "X_JOB_NOT_FOUND" in r.text


async def test_cancel_and_promote_change_a_live_job(
    memory: JobDriver, seed: Any, client_for: Any
) -> None:
    seeded = await seed(memory)
    client, token = await ready_client(memory, client_for)
    delayed = seeded.ids["delayed"]
    page = await client.get(f"{BASE}/jobs/{delayed}")
    assert 'data-action="promote"' in page.text and 'data-action="cancel"' in page.text
    r = await client.post(f"{BASE}/actions/promote", data={"id": delayed, "csrf": token})
    assert r.status_code == 200 and "promoted" in r.text
    assert (await intro_of(memory).show(delayed)).state == "ready"
    r = await client.post(
        f"{BASE}/actions/cancel", data={"id": delayed, "reason": "duplicate", "csrf": token}
    )
    assert r.status_code == 200
    row = await intro_of(memory).show(delayed)
    assert row.state == "cancelled" and "duplicate" in str(row.last_error)


async def test_pause_and_resume_a_queue_and_a_task(
    memory: JobDriver, seed: Any, client_for: Any
) -> None:
    await seed(memory)
    client, token = await ready_client(memory, client_for)
    r = await client.post(f"{BASE}/actions/pause", data={"queue": "work", "csrf": token})
    assert r.status_code == 200 and "queue work paused" in r.text
    assert set(await intro_of(memory).paused_queues()) == {"work", "held"}
    r = await client.post(f"{BASE}/actions/resume", data={"queue": "held", "csrf": token})
    assert set(await intro_of(memory).paused_queues()) == {"work"}
    r = await client.post(f"{BASE}/actions/pause-task", data={"task": "t.nightly", "csrf": token})
    assert r.status_code == 200 and await intro_of(memory).paused_tasks() == ["t.nightly"]
    r = await client.post(f"{BASE}/actions/resume-task", data={"task": "t.nightly", "csrf": token})
    assert r.status_code == 200 and await intro_of(memory).paused_tasks() == []


async def test_retrying_a_dead_letter_group_moves_only_that_group(
    memory: JobDriver, seed: Any, client_for: Any
) -> None:
    seeded = await seed(memory)
    client, token = await ready_client(memory, client_for)
    r = await client.post(
        f"{BASE}/actions/retry-group",
        data={"name": "dash.charge", "code": "X_CHARGE_DECLINED", "csrf": token},
    )
    assert r.status_code == 200 and "requeued 2 of 2" in r.text
    states = {
        k: (await intro_of(memory).show(seeded.ids[k])).state for k in ("dead", "dead2", "dead3")
    }
    assert states == {"dead": "ready", "dead2": "ready", "dead3": "dead"}
    r = await client.post(
        f"{BASE}/actions/retry-group",
        data={"name": "dash.charge", "code": "X_CHARGE_DECLINED", "csrf": token},
    )
    assert "no dead dash.charge jobs with X_CHARGE_DECLINED are left" in r.text


async def test_one_retry_on_the_dead_letter_page_stays_there(
    memory: JobDriver, seed: Any, client_for: Any
) -> None:
    seeded = await seed(memory)
    client, token = await ready_client(memory, client_for)
    r = await client.post(
        f"{BASE}/actions/retry", data={"id": seeded.ids["dead3"], "back": "/dead", "csrf": token}
    )
    assert r.status_code == 200 and "<h2>Dead letter</h2>" in r.text
    assert seeded.ids["dead3"] not in r.text.split("</div>", 1)[1]  # gone from the groups


@pytest.mark.parametrize(
    ("tamper", "status", "code"),
    [
        ("no-cookie", 403, "X_FORBIDDEN"),
        ("wrong-token", 403, "X_FORBIDDEN"),
        ("no-token", 403, "X_FORBIDDEN"),
        ("foreign-origin", 403, "X_FORBIDDEN"),
        ("json-body", 415, "X_BODY_INVALID"),
        ("huge-body", 413, "X_BODY_INVALID"),
        ("missing-field", 400, "X_BODY_INVALID"),
    ],
)
async def test_a_forged_or_malformed_post_is_refused_and_moves_nothing(
    memory: JobDriver, seed: Any, client_for: Any, tamper: str, status: int, code: str
) -> None:
    seeded = await seed(memory)
    client, token = await ready_client(memory, client_for)
    dead = seeded.ids["dead"]
    data: dict[str, str] = {"id": dead, "csrf": token}
    headers: dict[str, str] = {}
    content: bytes | None = None
    if tamper == "no-cookie":
        client.cookies.clear()
    elif tamper == "wrong-token":
        data["csrf"] = "x" * 43
    elif tamper == "no-token":
        del data["csrf"]
    elif tamper == "foreign-origin":
        headers["origin"] = "http://evil.test"
    elif tamper == "json-body":
        headers["content-type"] = "application/json"
        content = b'{"id": "x"}'
    elif tamper == "huge-body":
        data["pad"] = "x" * 70_000
    elif tamper == "missing-field":
        del data["id"]
    if content is not None:
        r = await client.post(f"{BASE}/actions/retry", content=content, headers=headers)
    else:
        r = await client.post(f"{BASE}/actions/retry", data=data, headers=headers)
    assert r.status_code == status
    assert code in r.text
    assert (await intro_of(memory).show(dead)).state == "dead"


async def test_read_only_by_default_offers_no_form_and_refuses_a_post(
    memory: JobDriver, seed: Any, client_for: Any
) -> None:
    seeded = await seed(memory)
    client = client_for(jobs_dashboard(driver=memory))
    for path in ("/", f"/jobs/{seeded.ids['dead']}", "/dead", "/tasks"):
        r = await client.get(BASE + path)
        assert 'method="post"' not in r.text, path
        assert "set-cookie" not in r.headers
    r = await client.post(f"{BASE}/actions/retry", data={"id": seeded.ids["dead"], "csrf": "x"})
    assert r.status_code == 403 and "read-only" in r.text and "allow_actions=True" in r.text
    assert (await intro_of(memory).show(seeded.ids["dead"])).state == "dead"


async def test_an_action_redirects_so_a_reload_never_repeats_it(
    memory: JobDriver, seed: Any, client_for: Any
) -> None:
    seeded = await seed(memory)
    client, token = await ready_client(memory, client_for)
    dead = seeded.ids["dead"]
    r = await client.post(
        f"{BASE}/actions/retry", data={"id": dead, "csrf": token}, follow_redirects=False
    )
    assert r.status_code == 303 and r.headers["location"] == f"{BASE}/jobs/{dead}"
    assert "x_jobs_flash=" in r.headers["set-cookie"]
    shown = await client.get(r.headers["location"])
    assert "requeued: ready" in shown.text
    again = await client.get(r.headers["location"])  # the reload: the page, not the action
    assert "requeued" not in again.text
    assert (await intro_of(memory).show(dead)).state == "ready"


async def test_a_forged_flash_cookie_is_only_ever_text(
    memory: JobDriver, client_for: Any, xss: str, parse: Any
) -> None:
    import base64
    import json

    client = client_for(jobs_dashboard(driver=memory))
    forged = json.dumps({"text": xss, "ok": False, "code": xss, "fix": xss}).encode()
    client.cookies.set("x_jobs_flash", base64.urlsafe_b64encode(forged).decode().rstrip("="))
    r = await client.get(f"{BASE}/")
    assert parse(r.text).tags["script"] == 0 and xss in parse(r.text).text
    client.cookies.set("x_jobs_flash", "not base64 at all!")
    r = await client.get(f"{BASE}/")
    assert r.status_code == 200 and 'class="banner' not in r.text
