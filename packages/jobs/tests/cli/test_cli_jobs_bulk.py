"""x jobs: ids by unique prefix (an ambiguous one lists its candidates), the last error's code in
the list, a suspended run's tries, the counters' columns, and the bulk retry / cancel by filter
through the introspection's ``*_many`` (with ``--dry-run``) — on the memory driver, and the bulk
path as a real process against real Postgres."""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psycopg
import pytest
from psycopg import sql

from ultimat3.core import FrozenClock, new_id
from ultimat3.jobs.adapter import EnqueueRequest, MemoryJobDriver, memory_job_driver
from ultimat3.jobs.cli import main

Capture = pytest.CaptureFixture[str]


@pytest.fixture
def driver() -> MemoryJobDriver:
    return memory_job_driver(clock=FrozenClock("2026-03-01T12:00:00Z"))


def req(name: str = "send", queue: str = "default", job_id: str | None = None) -> EnqueueRequest:
    return EnqueueRequest(
        id=job_id or new_id(),
        run_id=new_id(),
        name=name,
        queue=queue,
        payload={},
        idempotency_key=new_id(),
        max_attempts=3,
    )


def put(driver: Any, *requests: EnqueueRequest) -> list[str]:
    asyncio.run(driver.enqueue_many(list(requests)))
    return [r.id for r in requests]


def bury(driver: Any, queue: str, code: str | None = "X_JOB_STEP_FAILED") -> str:
    async def go() -> str:
        [held] = await driver.claim(
            queues=[queue], limit=1, worker_id="w", visibility_timeout_ms=30_000
        )
        error = {"code": code, "message": "it broke", "meta": {"type": "TypeError"}}
        assert await driver.nack(
            held.id, worker_id="w", claim=held.claim, outcome="dead", error=error
        )
        return str(held.id)

    return asyncio.run(go())


def run(capsys: Capture, driver: Any, *argv: str) -> tuple[int, Any, str]:
    code = main([*argv, "--json"], driver=driver)
    out, err = capsys.readouterr()
    return code, (json.loads(out) if out.strip() else None), err


def refused(capsys: Capture, driver: Any, *argv: str) -> dict[str, Any]:
    code, out, err = run(capsys, driver, *argv)
    assert code == 1 and out is None, err
    return json.loads(err)["error"]  # type: ignore[no-any-return]


# --- ids by prefix ---------------------------------------------------------------------------


def test_show_takes_a_unique_prefix_and_lists_an_ambiguous_ones_candidates(
    capsys: Capture, driver: MemoryJobDriver
) -> None:
    a, b, c = (
        "0190aaaa-0000-7000-8000-000000000001",
        "0190aaab-0000-7000-8000-000000000002",
        ("0190bbbb-0000-7000-8000-000000000003"),
    )
    put(driver, req(job_id=a), req(job_id=b), req(job_id=c))
    code, out, _ = run(capsys, driver, "jobs", "show", "0190b")
    assert code == 0 and out["id"] == c
    code, out, _ = run(capsys, driver, "jobs", "show", "0190AAAB")  # case does not matter
    assert code == 0 and out["id"] == b
    err = refused(capsys, driver, "jobs", "show", "0190aaa")
    assert err["code"] == "X_JOB_ID_AMBIGUOUS" and err["status"] == 422
    assert a in err["message"] and b in err["message"] and c not in err["message"]
    assert sorted(err["meta"]["candidates"]) == [a, b] and err["fix"]
    assert refused(capsys, driver, "jobs", "show", "0190c")["code"] == "X_JOB_NOT_FOUND"
    assert refused(capsys, driver, "jobs", "show", "zz-top")["code"] == "X_JOB_NOT_FOUND"
    code, out, _ = run(capsys, driver, "jobs", "cancel", "0190b", "--reason", "r")
    assert code == 0 and out["id"] == c and out["state"] == "cancelled"


def test_list_shows_the_last_errors_code(capsys: Capture, driver: MemoryJobDriver) -> None:
    put(driver, req(queue="q1"))
    dead = bury(driver, "q1", code="X_RATE_LIMITED")
    assert main(["jobs", "list"], driver=driver) == 0
    line = next(x for x in capsys.readouterr().out.splitlines() if x.startswith(dead))
    assert "X_RATE_LIMITED" in line and "dead" in line


def test_list_names_a_plain_exceptions_type_where_it_has_no_code(
    capsys: Capture, driver: MemoryJobDriver
) -> None:
    put(driver, req(queue="q2"))
    dead = bury(driver, "q2", code=None)  # a TypeError from the body: stored with no code
    assert main(["jobs", "list"], driver=driver) == 0
    line = next(x for x in capsys.readouterr().out.splitlines() if x.startswith(dead))
    assert "TypeError" in line and "dead" in line


def test_a_suspended_run_reads_as_waiting_not_as_never_tried(
    capsys: Capture, driver: MemoryJobDriver
) -> None:
    [job_id] = put(driver, req(queue="qs"))

    async def suspend() -> None:
        [held] = await driver.claim(
            queues=["qs"], limit=1, worker_id="w", visibility_timeout_ms=30_000
        )
        await driver.steps.record(
            job_id, "one", state="completed", worker_id="w", claim=held.claim, output=1
        )
        assert await driver.nack(
            job_id,
            worker_id="w",
            claim=held.claim,
            outcome="suspend",
            wait_event="paid",
            delay_ms=3_600_000,
        )

    asyncio.run(suspend())
    assert main(["jobs", "list", "--state", "suspended"], driver=driver) == 0
    line = next(x for x in capsys.readouterr().out.splitlines() if x.startswith(job_id))
    assert "0/3 waiting" in line
    assert main(["jobs", "show", job_id], driver=driver) == 0
    state = next(x for x in capsys.readouterr().out.splitlines() if x.startswith("state"))
    assert "0 of 3 attempts spent" in state and "1 of 1 recorded steps done" in state
    assert "suspension spends no attempt" in state


def test_the_counters_columns_say_what_they_measure(
    capsys: Capture, driver: MemoryJobDriver
) -> None:
    [job_id] = put(driver, req(queue="qc", name="timed"))

    async def ack() -> None:
        [held] = await driver.claim(
            queues=["qc"], limit=1, worker_id="w", visibility_timeout_ms=30_000
        )
        assert await driver.ack(job_id, worker_id="w", claim=held.claim, duration_ms=40)

    asyncio.run(ack())
    assert main(["jobs", "counters", "--job", "timed"], driver=driver) == 0
    out = capsys.readouterr().out
    assert "DONE RUN MS (SUM)" in out and "DONE RUN MS (AVG)" in out and "DURATION MS" not in out
    assert "final attempt" in out


# --- bulk ------------------------------------------------------------------------------------


def test_bulk_retry_by_state_and_name_with_a_dry_run_first(
    capsys: Capture, driver: MemoryJobDriver
) -> None:
    put(driver, *(req(name="send", queue="qb") for _ in range(3)), req(name="other", queue="qb"))
    dead = [bury(driver, "qb") for _ in range(4)]
    code, out, _ = run(
        capsys, driver, "jobs", "retry", "--state", "dead", "--name", "send", "--dry-run"
    )
    assert code == 0 and out["dry_run"] is True and out["would_touch"] == 3
    assert {r["id"] for r in out["first"]} < set(dead)
    assert sorted(r.state for r in asyncio.run(driver.introspect.list(queue="qb"))) == ["dead"] * 4
    code, out, _ = run(capsys, driver, "jobs", "retry", "--state", "dead", "--name", "send")
    assert code == 0 and out["requeued"] == 3 and out["left"] == 0
    states: dict[str, list[str]] = {
        r.name: [] for r in asyncio.run(driver.introspect.list(queue="qb"))
    }
    for r in asyncio.run(driver.introspect.list(queue="qb")):
        states[r.name].append(r.state)
    assert states == {"send": ["ready"] * 3, "other": ["dead"]}
    assert main(["jobs", "retry", "--state", "dead", "--queue", "qb"], driver=driver) == 0
    assert "requeued 1 dead job(s)" in capsys.readouterr().out


def test_bulk_cancel_by_queue_touches_every_live_state(
    capsys: Capture, driver: MemoryJobDriver
) -> None:
    put(driver, *(req(queue="doomed") for _ in range(3)), req(queue="kept"))
    asyncio.run(
        driver.claim(queues=["doomed"], limit=1, worker_id="w", visibility_timeout_ms=30_000)
    )
    code, out, _ = run(capsys, driver, "jobs", "cancel", "--queue", "doomed", "--dry-run")
    assert code == 0 and out["would_touch"] == 3
    code, out, _ = run(capsys, driver, "jobs", "cancel", "--queue", "doomed", "--reason", "retired")
    assert code == 0 and out["cancelled"] == 3
    assert out["states"] == {"ready": 2, "delayed": 0, "running": 1, "suspended": 0}
    rows = asyncio.run(driver.introspect.list(queue="doomed"))
    assert {r.state for r in rows} == {"cancelled"}
    assert all(r.last_error and "retired" in r.last_error["message"] for r in rows)
    assert [r.state for r in asyncio.run(driver.introspect.list(queue="kept"))] == ["ready"]


@pytest.mark.parametrize(
    ("argv", "code", "said"),
    [
        (["jobs", "retry"], "X_INVARIANT", "no job id and no filter"),
        (["jobs", "retry", "--queue", "q"], "X_INVARIANT", "--state"),
        (["jobs", "retry", "--state", "ready"], "X_JOB_NOT_REQUEUEABLE", "ready"),
        (["jobs", "retry", new_id(), "--state", "dead"], "X_INVARIANT", "not both"),
        (["jobs", "retry", "--state", "dead", "--from-step", "s"], "X_INVARIANT", "--from-step"),
        (["jobs", "cancel"], "X_INVARIANT", "no job id and no filter"),
        (["jobs", "cancel", "--state", "dead"], "X_JOB_NOT_CANCELLABLE", "dead"),
    ],
)
def test_bulk_refusals_name_the_offence(
    capsys: Capture, driver: MemoryJobDriver, argv: list[str], code: str, said: str
) -> None:
    err = refused(capsys, driver, *argv)
    assert err["code"] == code and said in err["message"] and err["fix"]


# --- against real Postgres, as a process ------------------------------------------------------


@pytest.fixture
def pg_schema_url() -> Iterator[tuple[str, str]]:
    url = os.environ.get("DATABASE_URL") or "postgresql://postgres@127.0.0.1:5432/test"
    schema = f"x_bulk_{uuid.uuid4().hex[:16]}"
    try:
        yield url, schema
    finally:
        with psycopg.connect(url, autocommit=True) as conn:
            conn.execute(sql.SQL("DROP SCHEMA IF EXISTS {} CASCADE").format(sql.Identifier(schema)))


def x(*argv: str, url: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "ultimat3.jobs.cli", *argv, "--json"],
        env={**os.environ, "DATABASE_URL": url},
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=60,
    )


def test_bulk_operations_and_prefixes_on_postgres(
    tmp_path: Path, pg_schema_url: tuple[str, str]
) -> None:
    from ultimat3.jobs.postgres import postgres_job_driver

    url, schema = pg_schema_url
    assert x("db", "migrate", "--schema", schema, url=url, cwd=tmp_path).returncode == 0

    async def setup() -> list[str]:
        d = postgres_job_driver(url, schema=schema)
        try:
            ids = put_async = [r.id for r in [req(queue="pq") for _ in range(3)]]
            await d.enqueue_many([req(queue="pq", job_id=i) for i in put_async])
            held = await d.claim(
                queues=["pq"], limit=2, worker_id="w", visibility_timeout_ms=30_000
            )
            for h in held:
                assert await d.nack(
                    h.id,
                    worker_id="w",
                    claim=h.claim,
                    outcome="dead",
                    error={"code": "X_JOB_STEP_FAILED", "message": "m"},
                )
            return ids
        finally:
            await d.close()

    ids = asyncio.run(setup())
    dry = x(
        "jobs",
        "retry",
        "--schema",
        schema,
        "--state",
        "dead",
        "--queue",
        "pq",
        "--dry-run",
        url=url,
        cwd=tmp_path,
    )
    assert dry.returncode == 0, dry.stderr
    assert json.loads(dry.stdout)["would_touch"] == 2
    done = x(
        "jobs",
        "retry",
        "--schema",
        schema,
        "--state",
        "dead",
        "--queue",
        "pq",
        url=url,
        cwd=tmp_path,
    )
    assert json.loads(done.stdout)["requeued"] == 2
    cancel = x("jobs", "cancel", "--schema", schema, "--queue", "pq", url=url, cwd=tmp_path)
    assert json.loads(cancel.stdout)["cancelled"] == 3
    shown = x("jobs", "show", "--schema", schema, ids[0][:30], url=url, cwd=tmp_path)
    assert shown.returncode == 0, shown.stderr
    assert (
        json.loads(shown.stdout)["id"] == ids[0]
        and json.loads(shown.stdout)["state"] == "cancelled"
    )
