"""x jobs ...: every command's JSON answer and exit code, and every refusal, on the memory driver.

Jobs are put on the driver directly (enqueue / claim / nack / step records); no worker runs.
"""

from __future__ import annotations

import asyncio
import json
from typing import Any

import pytest

from ultimat3.core import FrozenClock, new_id
from ultimat3.jobs.adapter import EnqueueRequest, MemoryJobDriver, memory_job_driver
from ultimat3.jobs.cli import main

Capture = pytest.CaptureFixture[str]


@pytest.fixture
def clock() -> FrozenClock:
    return FrozenClock("2026-03-01T12:00:00Z")


@pytest.fixture
def driver(clock: FrozenClock) -> MemoryJobDriver:
    return memory_job_driver(clock=clock)


def put(
    driver: MemoryJobDriver,
    *,
    name: str = "onboard",
    queue: str = "default",
    key: str | None = None,
    tenant: str | None = None,
    delay_ms: int | None = None,
    max_attempts: int = 3,
) -> str:
    job_id = new_id()
    request = EnqueueRequest(
        id=job_id,
        run_id=new_id(),
        name=name,
        queue=queue,
        payload={"org": job_id},
        idempotency_key=key or f"onboard:{job_id}",
        max_attempts=max_attempts,
        tenant_id=tenant,
        delay_ms=delay_ms,
    )
    asyncio.run(driver.enqueue(request))
    return job_id


def claim_one(driver: MemoryJobDriver, queue: str) -> tuple[str, str]:
    claimed = asyncio.run(
        driver.claim(queues=[queue], limit=1, worker_id="w-1", visibility_timeout_ms=30_000)
    )
    assert len(claimed) == 1
    return claimed[0].id, claimed[0].claim


def dead_job(driver: MemoryJobDriver, *, once_step: bool = False) -> str:
    """A dead-lettered job: step ``provision`` completed, ``charge`` failed (or, with
    ``once_step``, started and never finished: an unknown outcome)."""
    queue = f"q-{new_id()}"
    job_id = put(driver, queue=queue, max_attempts=1)
    _, claim = claim_one(driver, queue)

    async def settle() -> None:
        steps = driver.steps
        await steps.record(
            job_id, "provision", state="completed", worker_id="w-1", claim=claim, output={"n": 7}
        )
        error = {"code": "X_STEP_OUTCOME_UNKNOWN", "message": "charge started, never finished"}
        await steps.record(
            job_id,
            "charge",
            state="started" if once_step else "failed",
            worker_id="w-1",
            claim=claim,
            error=None if once_step else error,
        )
        assert await driver.nack(job_id, worker_id="w-1", claim=claim, outcome="dead", error=error)

    asyncio.run(settle())
    return job_id


def run(capsys: Capture, driver: Any, *argv: str) -> tuple[int, Any, str]:
    """Run ``x <argv> --json``; answers the exit code, stdout parsed as JSON (or None) and
    stderr."""
    code = main([*argv, "--json"], driver=driver)
    out, err = capsys.readouterr()
    return code, (json.loads(out) if out.strip() else None), err


def refused(capsys: Capture, driver: Any, *argv: str) -> dict[str, Any]:
    """Run ``x <argv> --json`` expecting exit 1 and nothing on stdout; answers the JSON error."""
    code, out, err = run(capsys, driver, *argv)
    assert code == 1, err
    assert out is None
    error: dict[str, Any] = json.loads(err)["error"]
    return error


# --- list -------------------------------------------------------------------------------------


def test_list_answers_rows_newest_first_with_filters(
    capsys: Capture, driver: MemoryJobDriver, clock: FrozenClock
) -> None:
    first = put(driver, queue="emails", tenant="org-1")
    clock.advance("1s")
    second = put(driver, name="digest", queue="emails", tenant="org-2")
    clock.advance("1s")
    third = put(driver, queue="default", delay_ms=60_000)

    code, out, _ = run(capsys, driver, "jobs", "list")
    assert code == 0
    assert [r["id"] for r in out["jobs"]] == [third, second, first]
    assert out["next"] is None and out["previous"] is None and out["backfills"] == []
    row = out["jobs"][0]
    assert row["state"] == "delayed" and row["queue"] == "default" and row["attempts"] == 0
    assert row["run_at"] == "2026-03-01T12:01:02+00:00"
    assert row["idempotency_key"] == f"onboard:{third}"

    assert [
        r["id"] for r in run(capsys, driver, "jobs", "list", "--queue", "emails")[1]["jobs"]
    ] == [
        second,
        first,
    ]
    by_name = run(capsys, driver, "jobs", "list", "--name", "digest")[1]["jobs"]
    assert [r["id"] for r in by_name] == [second]
    by_state = run(capsys, driver, "jobs", "list", "--state", "delayed")[1]["jobs"]
    assert [r["id"] for r in by_state] == [third]
    by_tenant = run(capsys, driver, "jobs", "list", "--tenant", "org-1")[1]["jobs"]
    assert [r["id"] for r in by_tenant] == [first]
    by_prefix = run(capsys, driver, "jobs", "list", "--id-prefix", second[:30])[1]["jobs"]
    assert [r["id"] for r in by_prefix] == [second]


def test_list_pages_with_the_next_and_previous_cursors(
    capsys: Capture, driver: MemoryJobDriver, clock: FrozenClock
) -> None:
    ids = []
    for _ in range(5):
        ids.append(put(driver))
        clock.advance("1s")
    newest = ids[::-1]

    _, page1, _ = run(capsys, driver, "jobs", "list", "--limit", "2")
    assert [r["id"] for r in page1["jobs"]] == newest[:2]
    assert page1["previous"] is None and page1["next"]

    _, page2, _ = run(capsys, driver, "jobs", "list", "--limit", "2", "--after", page1["next"])
    assert [r["id"] for r in page2["jobs"]] == newest[2:4]
    assert page2["next"] and page2["previous"]

    _, page3, _ = run(capsys, driver, "jobs", "list", "--limit", "2", "--after", page2["next"])
    assert [r["id"] for r in page3["jobs"]] == newest[4:]
    assert page3["next"] is None

    _, back, _ = run(capsys, driver, "jobs", "list", "--limit", "2", "--before", page3["previous"])
    assert [r["id"] for r in back["jobs"]] == newest[2:4]


def test_list_refuses_a_page_over_max_job_page(capsys: Capture, driver: MemoryJobDriver) -> None:
    error = refused(capsys, driver, "jobs", "list", "--limit", "201")
    assert error["code"] == "X_JOB_PAGE_INVALID"
    assert "200" in error["message"]


def test_list_refuses_a_cursor_no_page_produced(capsys: Capture, driver: MemoryJobDriver) -> None:
    error = refused(capsys, driver, "jobs", "list", "--after", "not-a-cursor")
    assert error["code"] == "X_JOB_PAGE_INVALID"
    assert error["fix"]


def test_list_with_after_and_before_is_a_usage_error(
    capsys: Capture, driver: MemoryJobDriver
) -> None:
    code, out, err = run(capsys, driver, "jobs", "list", "--after", "a", "--before", "b")
    assert code == 2 and out is None
    assert json.loads(err)["error"]["code"] == "X_INVARIANT"


def test_list_includes_the_backfill_passes_in_flight(
    capsys: Capture, driver: MemoryJobDriver
) -> None:
    async def passes() -> str:
        running = await driver.backfills.begin("reindex", job_id=None, cursor={"after": 0})
        await driver.backfills.advance(running.id, rows=120, cursor={"after": 120})
        done = await driver.backfills.begin("old", job_id=None, cursor=None)
        await driver.backfills.finish(done.id, state="done")
        return running.id

    running_id = asyncio.run(passes())
    _, out, _ = run(capsys, driver, "jobs", "list")
    assert [(b["id"], b["rows"], b["cursor"]) for b in out["backfills"]] == [
        (running_id, 120, {"after": 120})
    ]


def test_list_prints_a_table_without_json(capsys: Capture, driver: MemoryJobDriver) -> None:
    job_id = put(driver, queue="emails")
    assert main(["jobs", "list"], driver=driver) == 0
    out = capsys.readouterr().out
    assert out.splitlines()[0].split() == [
        "ID",
        "NAME",
        "QUEUE",
        "STATE",
        "TRIES",
        "RUN",
        "AT",
        "LAST",
        "ERROR",
        "KEY",
    ]
    assert job_id in out and "emails" in out and "0/3" in out


# --- show ------------------------------------------------------------------------------------


def test_show_answers_the_row_with_its_steps(capsys: Capture, driver: MemoryJobDriver) -> None:
    job_id = dead_job(driver)
    code, out, _ = run(capsys, driver, "jobs", "show", job_id)
    assert code == 0
    assert out["id"] == job_id and out["state"] == "dead"
    assert out["attempts"] == 1 and out["max_attempts"] == 1
    assert out["last_error"]["code"] == "X_STEP_OUTCOME_UNKNOWN"
    assert out["steps"]["provision"] == {
        "name": "provision",
        "state": "completed",
        "executions": 1,
        "output": {"n": 7},
        "error": None,
        "updated_at": "2026-03-01T12:00:00+00:00",
    }
    assert out["steps"]["charge"]["state"] == "failed"
    assert out["backfill"] is None


def test_show_names_the_backfill_pass_of_a_backfill_job(
    capsys: Capture, driver: MemoryJobDriver
) -> None:
    job_id = put(driver)
    asyncio.run(driver.backfills.begin("reindex", job_id=job_id, cursor=None))
    _, out, _ = run(capsys, driver, "jobs", "show", job_id)
    assert out["backfill"]["name"] == "reindex" and out["backfill"]["job_id"] == job_id


def test_show_refuses_an_id_nobody_queued(capsys: Capture, driver: MemoryJobDriver) -> None:
    error = refused(capsys, driver, "jobs", "show", "0190b5a2-0000-7000-8000-00000000dead")
    assert error["code"] == "X_JOB_NOT_FOUND"
    assert "0190b5a2-0000-7000-8000-00000000dead" in error["message"]


def test_show_prints_the_steps_without_json(capsys: Capture, driver: MemoryJobDriver) -> None:
    job_id = dead_job(driver)
    assert main(["jobs", "show", job_id], driver=driver) == 0
    out = capsys.readouterr().out
    assert "dead" in out and "X_STEP_OUTCOME_UNKNOWN" in out
    assert "provision" in out and "charge" in out


def test_a_refusal_without_json_prints_the_code_and_the_fix(
    capsys: Capture, driver: MemoryJobDriver
) -> None:
    assert main(["jobs", "show", "0190b5a2-0000-7000-8000-00000000dead"], driver=driver) == 1
    captured = capsys.readouterr()
    assert captured.out == ""
    first, second = captured.err.splitlines()[:2]
    assert first.startswith("X_JOB_NOT_FOUND: ")
    assert second.strip().startswith("fix: ")


# --- retry -----------------------------------------------------------------------------------


def test_retry_requeues_a_dead_job_keeping_its_completed_steps(
    capsys: Capture, driver: MemoryJobDriver
) -> None:
    job_id = dead_job(driver)
    code, out, _ = run(capsys, driver, "jobs", "retry", job_id)
    assert code == 0
    assert out["id"] == job_id and out["state"] == "ready" and out["attempts"] == 0
    steps = asyncio.run(driver.introspect.show(job_id)).steps
    assert set(steps) == {"provision", "charge"}


def test_retry_from_step_drops_that_step_and_the_later_ones(
    capsys: Capture, driver: MemoryJobDriver
) -> None:
    job_id = dead_job(driver)
    code, _, _ = run(capsys, driver, "jobs", "retry", job_id, "--from-step", "provision")
    assert code == 0
    assert asyncio.run(driver.introspect.show(job_id)).steps == {}


def test_retry_refuses_a_live_job(capsys: Capture, driver: MemoryJobDriver) -> None:
    job_id = put(driver)
    error = refused(capsys, driver, "jobs", "retry", job_id)
    assert error["code"] == "X_JOB_NOT_REQUEUEABLE"
    assert error["meta"]["state"] == "ready"


def test_retry_refuses_an_unknown_id(capsys: Capture, driver: MemoryJobDriver) -> None:
    assert (
        refused(capsys, driver, "jobs", "retry", "0190b5a2-0000-7000-8000-00000000dead")["code"]
        == "X_JOB_NOT_FOUND"
    )


# --- cancel ----------------------------------------------------------------------------------


def test_cancel_stops_a_live_job_with_the_reason(capsys: Capture, driver: MemoryJobDriver) -> None:
    job_id = put(driver)
    code, out, _ = run(capsys, driver, "jobs", "cancel", job_id, "--reason", "customer left")
    assert code == 0
    assert out["state"] == "cancelled"
    assert out["last_error"]["code"] == "X_ABORTED"
    assert out["last_error"]["message"] == "customer left"


def test_cancel_refuses_a_finished_job(capsys: Capture, driver: MemoryJobDriver) -> None:
    job_id = dead_job(driver)
    error = refused(capsys, driver, "jobs", "cancel", job_id)
    assert error["code"] == "X_JOB_NOT_CANCELLABLE"
    assert asyncio.run(driver.introspect.show(job_id)).state == "dead"


# --- resolve-step ----------------------------------------------------------------------------


def test_resolve_step_ran_records_the_output_as_completed(
    capsys: Capture, driver: MemoryJobDriver
) -> None:
    job_id = dead_job(driver, once_step=True)
    code, out, _ = run(
        capsys,
        driver,
        "jobs",
        "resolve-step",
        job_id,
        "charge",
        "--ran",
        "--output",
        '{"id": "ch_1"}',
    )
    assert code == 0
    assert out["job_id"] == job_id and out["step"] == "charge" and out["ran"] is True
    assert out["record"]["state"] == "completed"
    assert out["record"]["output"] == {"id": "ch_1"}
    step = asyncio.run(driver.introspect.show(job_id)).steps["charge"]
    assert step.state == "completed" and step.output == {"id": "ch_1"}


def test_resolve_step_not_ran_forgets_the_step(capsys: Capture, driver: MemoryJobDriver) -> None:
    job_id = dead_job(driver, once_step=True)
    code, out, _ = run(capsys, driver, "jobs", "resolve-step", job_id, "charge", "--not-ran")
    assert code == 0
    assert out["ran"] is False and out["record"] is None
    assert "charge" not in asyncio.run(driver.introspect.show(job_id)).steps


def test_resolve_step_refuses_bad_json_naming_the_flag(
    capsys: Capture, driver: MemoryJobDriver
) -> None:
    job_id = dead_job(driver, once_step=True)
    error = refused(
        capsys, driver, "jobs", "resolve-step", job_id, "charge", "--ran", "--output", "{id: 1"
    )
    assert error["code"] == "X_INVARIANT"
    assert "--output" in error["message"]
    assert error["meta"] == {"flag": "--output"}
    assert asyncio.run(driver.introspect.show(job_id)).steps["charge"].state == "started"


def test_resolve_step_ran_needs_an_output(capsys: Capture, driver: MemoryJobDriver) -> None:
    job_id = dead_job(driver, once_step=True)
    error = refused(capsys, driver, "jobs", "resolve-step", job_id, "charge", "--ran")
    assert error["code"] == "X_INVARIANT" and "--output" in error["message"]


def test_resolve_step_not_ran_takes_no_output(capsys: Capture, driver: MemoryJobDriver) -> None:
    job_id = dead_job(driver, once_step=True)
    error = refused(
        capsys, driver, "jobs", "resolve-step", job_id, "charge", "--not-ran", "--output", "1"
    )
    assert error["code"] == "X_INVARIANT" and "--output" in error["message"]


def test_resolve_step_needs_ran_or_not_ran(capsys: Capture, driver: MemoryJobDriver) -> None:
    code, out, err = run(capsys, driver, "jobs", "resolve-step", "id", "charge")
    assert code == 2 and out is None
    assert "--ran" in json.loads(err)["error"]["message"]


def test_resolve_step_refuses_a_step_already_completed(
    capsys: Capture, driver: MemoryJobDriver
) -> None:
    job_id = dead_job(driver)
    error = refused(
        capsys, driver, "jobs", "resolve-step", job_id, "provision", "--ran", "--output", "1"
    )
    assert error["code"] == "X_INVARIANT"


def test_resolve_step_refuses_an_unknown_job(capsys: Capture, driver: MemoryJobDriver) -> None:
    error = refused(
        capsys,
        driver,
        "jobs",
        "resolve-step",
        "0190b5a2-0000-7000-8000-00000000dead",
        "charge",
        "--not-ran",
    )
    assert error["code"] == "X_JOB_NOT_FOUND"


# --- promote, remove -------------------------------------------------------------------------


def test_promote_makes_a_delayed_job_due_now(
    capsys: Capture, driver: MemoryJobDriver, clock: FrozenClock
) -> None:
    job_id = put(driver, delay_ms=3_600_000)
    code, out, _ = run(capsys, driver, "jobs", "promote", job_id)
    assert code == 0
    assert out["state"] == "ready" and out["run_at"] == clock.now().isoformat()


def test_promote_refuses_a_job_that_is_already_due(
    capsys: Capture, driver: MemoryJobDriver
) -> None:
    assert refused(capsys, driver, "jobs", "promote", put(driver))["code"] == "X_INVARIANT"


def test_remove_deletes_a_finished_job(capsys: Capture, driver: MemoryJobDriver) -> None:
    job_id = dead_job(driver)
    code, out, _ = run(capsys, driver, "jobs", "remove", job_id)
    assert code == 0 and out == {"removed": job_id}
    assert refused(capsys, driver, "jobs", "show", job_id)["code"] == "X_JOB_NOT_FOUND"


def test_remove_refuses_a_running_job(capsys: Capture, driver: MemoryJobDriver) -> None:
    job_id = put(driver, queue="busy")
    claim_one(driver, "busy")
    assert refused(capsys, driver, "jobs", "remove", job_id)["code"] == "X_JOB_NOT_REMOVABLE"


# --- queues ----------------------------------------------------------------------------------


def test_pause_resume_and_paused(capsys: Capture, driver: MemoryJobDriver) -> None:
    code, out, _ = run(capsys, driver, "jobs", "pause", "emails")
    assert code == 0 and out == {"queue": "emails", "paused": True}
    assert run(capsys, driver, "jobs", "paused")[1] == {"queues": ["emails"], "tasks": []}

    put(driver, queue="emails")
    claimed = asyncio.run(
        driver.claim(queues=["emails"], limit=1, worker_id="w", visibility_timeout_ms=1000)
    )
    assert claimed == []

    code, out, _ = run(capsys, driver, "jobs", "resume", "emails")
    assert code == 0 and out == {"queue": "emails", "paused": False}
    assert run(capsys, driver, "jobs", "paused")[1] == {"queues": [], "tasks": []}


def test_stats_counts_jobs_per_queue_and_state_and_marks_paused(
    capsys: Capture, driver: MemoryJobDriver
) -> None:
    put(driver, queue="emails")
    put(driver, queue="emails", delay_ms=1000)
    run(capsys, driver, "jobs", "pause", "emails")
    code, out, _ = run(capsys, driver, "jobs", "stats")
    assert code == 0
    [emails] = out["queues"]
    assert emails["queue"] == "emails" and emails["ready"] == 1 and emails["delayed"] == 1
    assert emails["paused"] is True


def test_workers_lists_the_registered_workers(capsys: Capture, driver: MemoryJobDriver) -> None:
    assert run(capsys, driver, "jobs", "workers")[1] == {"workers": []}
    asyncio.run(
        driver.register_worker(
            "w-9", host="box", queues=["default"], slots=4, visibility_timeout_ms=30_000
        )
    )
    asyncio.run(driver.worker_heartbeat("w-9", in_flight=["job-1"]))
    code, out, _ = run(capsys, driver, "jobs", "workers")
    assert code == 0
    [worker] = out["workers"]
    assert worker["id"] == "w-9" and worker["host"] == "box" and worker["slots"] == 4
    assert worker["queues"] == ["default"] and worker["in_flight"] == ["job-1"]


def test_counters_answers_the_window_and_its_totals(
    capsys: Capture, driver: MemoryJobDriver, clock: FrozenClock
) -> None:
    dead_job(driver)
    job_id = put(driver, name="digest", queue="digests")
    _, claim = claim_one(driver, "digests")
    assert asyncio.run(driver.ack(job_id, worker_id="w-1", claim=claim, duration_ms=40))

    code, out, _ = run(capsys, driver, "jobs", "counters")
    assert code == 0
    assert out["window_ms"] == 3_600_000
    assert out["since"] == "2026-03-01T11:00:00+00:00"
    assert out["totals"] == {"done": 1, "retried": 0, "failed": 0, "dead": 1, "duration_ms": 40}
    assert {(r["job"], r["done"], r["dead"]) for r in out["rows"]} == {
        ("onboard", 0, 1),
        ("digest", 1, 0),
    }

    _, only, _ = run(capsys, driver, "jobs", "counters", "--job", "digest", "--since", "15m")
    assert [r["job"] for r in only["rows"]] == ["digest"]
    assert only["totals"]["done"] == 1 and only["totals"]["dead"] == 0


def test_counters_refuses_a_window_that_is_not_a_duration(
    capsys: Capture, driver: MemoryJobDriver
) -> None:
    error = refused(capsys, driver, "jobs", "counters", "--since", "yesterday")
    assert error["code"] == "X_DURATION_INVALID" and "--since" in error["message"]


# --- drain, and a driver without introspect ----------------------------------------------------


def test_drain_refuses_a_target_that_is_not_durable_before_any_driver_is_resolved(
    capsys: Capture,
) -> None:
    code = main(["jobs", "drain", "--to", "memory", "--json"], env={})
    captured = capsys.readouterr()
    assert code == 1 and captured.out == ""
    error = json.loads(captured.err)["error"]
    assert error["code"] == "X_CONFIG_INVALID" and "lost when x exits" in error["message"]
    assert "--to redis" in error["fix"]


def test_drain_needs_a_target(capsys: Capture) -> None:
    code = main(["jobs", "drain", "--json"], env={})
    error = json.loads(capsys.readouterr().err)["error"]
    assert code == 2 and "--to" in error["message"]


class BareDriver:
    """A hand-rolled driver with no introspect and no backfills: every required member, no
    optional one."""

    def __init__(self) -> None:
        self._inner = memory_job_driver()
        self.name = "bare"
        self.steps = self._inner.steps
        for member in (
            "now_ms",
            "owns_connection",
            "enqueue",
            "enqueue_many",
            "claim",
            "ack",
            "nack",
            "heartbeat",
            "progress",
            "wake_waiters",
            "stats",
            "close",
        ):
            setattr(self, member, getattr(self._inner, member))


def test_list_on_a_driver_without_introspect_has_nothing_to_list(capsys: Capture) -> None:
    code, out, err = run(capsys, BareDriver(), "jobs", "list")
    assert code == 0
    assert out == {"jobs": [], "next": None, "previous": None, "backfills": []}
    assert "no introspect" in err


@pytest.mark.parametrize(
    "argv",
    [
        ("jobs", "show", "x"),
        ("jobs", "retry", "x"),
        ("jobs", "cancel", "x"),
        ("jobs", "resolve-step", "x", "s", "--not-ran"),
        ("jobs", "promote", "x"),
        ("jobs", "pause", "q"),
        ("jobs", "paused"),
        ("jobs", "workers"),
        ("jobs", "counters"),
    ],
)
def test_the_operator_surface_on_a_driver_without_introspect_is_not_implemented(
    capsys: Capture, argv: tuple[str, ...]
) -> None:
    error = refused(capsys, BareDriver(), *argv)
    assert error["code"] == "X_NOT_IMPLEMENTED"
    assert "bare" in error["message"]


def test_stats_works_on_a_driver_without_introspect(capsys: Capture) -> None:
    bare = BareDriver()
    put(bare._inner)
    code, out, _ = run(capsys, bare, "jobs", "stats")
    assert code == 0
    assert out["queues"][0]["ready"] == 1 and "paused" not in out["queues"][0]
