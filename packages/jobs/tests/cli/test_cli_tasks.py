"""x tasks list|pause|resume and x scheduler, driven as a user would, against the real Postgres
server: in-process through ``main_async`` for the answers, and ``x scheduler`` as a real process
that leads, fires, and stops on SIGTERM."""

from __future__ import annotations

import asyncio
import io
import json
import os
import signal
import subprocess
import sys
import textwrap
import threading
import time
import uuid
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest

from ultimat3.jobs.cli._main import main_async
from ultimat3.jobs.postgres import PostgresJobDriver

APP = """
from typing import Any

from pydantic import BaseModel

from ultimat3.jobs import job, task


class Day(BaseModel):
    day: str


@job(input=Day, idempotency_key=lambda i: f"report:{i.day}", name="report")
async def report(input: Day, step: Any, ctx: Any) -> None:
    return None


nightly = task(
    name="reports.nightly",
    cron="17 3 * * *",
    tz="Europe/Berlin",
    enqueue=lambda at: (report, {"day": at.at.date().isoformat()}),
)
minutely = task(
    name="minutely",
    cron="* * * * *",
    catch_up="none",
    enqueue=lambda at: (report, {"day": at.at.isoformat()}),
)

TASKS = [report, nightly, minutely]
JOBS_ONLY = [report]
"""


@pytest.fixture
def app(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[str]:
    """A module of the app's own, importable from the working directory as x would find it."""
    module = f"tasks_app_{uuid.uuid4().hex}"
    (tmp_path / f"{module}.py").write_text(textwrap.dedent(APP))
    monkeypatch.chdir(tmp_path)
    monkeypatch.syspath_prepend(str(tmp_path))
    yield module
    sys.modules.pop(module, None)


async def x(driver: PostgresJobDriver, *argv: str) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    code = await main_async(list(argv), driver=driver, env={}, stdout=out, stderr=err)
    return code, out.getvalue(), err.getvalue()


async def test_tasks_list_shows_cron_zone_paused_last_fire_and_next_run(
    pg_driver: PostgresJobDriver, app: str
) -> None:
    module = sys.modules.get(app) or __import__(app)
    nightly = module.nightly
    occurrence = int(datetime(2026, 3, 29, 1, 17, tzinfo=UTC).timestamp() * 1000)
    assert await pg_driver.fire_task(nightly.name, occurrence, nightly.requests(occurrence))
    code, out, err = await x(pg_driver, "tasks", "pause", "minutely", "--json")
    assert code == 0, err
    assert json.loads(out) == {"task": "minutely", "paused": True}

    before = datetime.now(UTC)
    code, out, err = await x(pg_driver, "tasks", "list", "--app", f"{app}:TASKS", "--json")
    assert code == 0, err
    rows = {r["name"]: r for r in json.loads(out)["tasks"]}
    assert list(rows) == ["reports.nightly", "minutely"]
    for row in rows.values():
        assert set(row) == {"name", "cron", "tz", "catch_up", "paused", "last_fire", "next_run"}
    got = rows["reports.nightly"]
    assert (got["cron"], got["tz"], got["catch_up"], got["paused"]) == (
        "17 3 * * *",
        "Europe/Berlin",
        "latest",
        False,
    )
    assert got["last_fire"]["occurrence_ms"] == occurrence
    assert got["last_fire"]["occurrence"] == "2026-03-29T01:17:00+00:00"
    next_run = datetime.fromisoformat(got["next_run"])
    assert next_run > before
    assert next_run == nightly.next_run(before)  # the scheduler's own resolver
    assert next_run.utcoffset() is not None and next_run.strftime("%H:%M") == "03:17"
    assert rows["minutely"]["paused"] is True
    assert rows["minutely"]["last_fire"] is None

    code, out, _ = await x(pg_driver, "tasks", "list", "--app", f"{app}:TASKS")
    assert code == 0
    lines = out.splitlines()
    assert lines[0].split() == ["NAME", "CRON", "TZ", "PAUSED", "LAST", "FIRE", "NEXT", "RUN"]
    assert "reports.nightly  17 3 * * *" in lines[1] and "2026-03-29 01:17:00Z" in lines[1]

    code, out, _ = await x(pg_driver, "tasks", "resume", "minutely", "--json")
    assert code == 0 and json.loads(out)["paused"] is False
    assert await pg_driver.introspect.paused_tasks() == []


async def test_without_app_it_lists_what_the_store_knows(
    pg_driver: PostgresJobDriver,
) -> None:
    await pg_driver.fire_task("orphan", 60_000, [])
    await pg_driver.introspect.pause_task("quiet")
    code, out, err = await x(pg_driver, "tasks", "list", "--json")
    assert code == 0, err
    rows = json.loads(out)["tasks"]
    assert [(r["name"], r["paused"], r["cron"], r["next_run"]) for r in rows] == [
        ("orphan", False, None, None),
        ("quiet", True, None, None),
    ]
    assert rows[0]["last_fire"]["occurrence_ms"] == 60_000


async def test_an_app_list_without_tasks_is_refused_with_the_code_and_a_fix(
    pg_driver: PostgresJobDriver, app: str
) -> None:
    code, out, err = await x(pg_driver, "tasks", "list", "--app", f"{app}:JOBS_ONLY")
    assert code == 1 and out == ""
    assert err.startswith("X_CONFIG_INVALID: ") and "holds no task" in err
    assert "  fix: " in err
    code, _, err = await x(pg_driver, "scheduler", "--app", f"{app}:JOBS_ONLY", "--json")
    assert code == 1
    assert json.loads(err)["error"]["code"] == "X_CONFIG_INVALID"


def test_x_scheduler_leads_fires_and_stops_on_sigterm(app: str, database_url: str) -> None:
    schema = f"x_cli_{uuid.uuid4().hex[:16]}"
    env = {**os.environ, "DATABASE_URL": database_url}
    env.pop("REDIS_URL", None)
    cwd = Path.cwd()

    def cli(*argv: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [sys.executable, "-m", "ultimat3.jobs.cli", *argv, "--schema", schema],
            env=env,
            cwd=cwd,
            capture_output=True,
            text=True,
            timeout=60,
        )

    try:
        assert cli("db", "migrate").returncode == 0
        command = ["scheduler", "--app", f"{app}:TASKS", "--schema", schema, "--json"]
        proc = subprocess.Popen(
            [sys.executable, "-m", "ultimat3.jobs.cli", *command],
            env=env,
            cwd=cwd,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        lines: list[str] = []
        assert proc.stderr is not None
        reader = threading.Thread(target=lambda: lines.extend(proc.stderr or []), daemon=True)
        reader.start()
        try:
            deadline = time.monotonic() + 30
            while "x scheduler: leading\n" not in lines:
                assert proc.poll() is None, "".join(lines)
                assert time.monotonic() < deadline, "".join(lines)
                time.sleep(0.05)
            # a minutely task that never fired starts from one minute before the lead: the
            # current minute fires at once
            fires: list[dict[str, Any]] = []
            while not fires:
                listed = cli("tasks", "list", "--app", f"{app}:TASKS", "--json")
                assert listed.returncode == 0, listed.stderr
                fires = [
                    r["last_fire"] for r in json.loads(listed.stdout)["tasks"] if r["last_fire"]
                ]
                assert time.monotonic() < deadline
                time.sleep(0.1)
            jobs = json.loads(cli("jobs", "list", "--json").stdout)["jobs"]
            # one job per fire: a minute boundary crossed since the first fire adds one more
            assert jobs and {j["name"] for j in jobs} == {"report"}
            assert len(jobs) <= 2
            proc.send_signal(signal.SIGTERM)
            # stdout only: stderr is the reader thread's (communicate() would race it for lines)
            assert proc.stdout is not None
            out = proc.stdout.read()
            proc.wait(timeout=30)
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.communicate()
        reader.join(timeout=5)
        for pipe in (proc.stdout, proc.stderr):
            if pipe is not None:
                pipe.close()
        assert proc.returncode == 0, "".join(lines)
        answer = json.loads(out)
        assert answer["signal"] == "SIGTERM"
        assert answer["stats"]["fired"] >= 1 and answer["stats"]["leading"] is False
        assert "x scheduler: SIGTERM received: stopping\n" in lines
    finally:
        asyncio.run(_drop(database_url, schema))


async def _drop(url: str, schema: str) -> None:
    from ultimat3_testkit.engine_drivers import drop_schema

    await drop_schema(url, schema)
