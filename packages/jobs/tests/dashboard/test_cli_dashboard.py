"""``x dashboard``: serves the dashboard standalone (a real process over Postgres, stopped by
SIGTERM), read-only unless ``--allow-actions``; and its refusals."""

from __future__ import annotations

import io
import json
import os
import signal
import socket
import subprocess
import sys
import textwrap
import time
from pathlib import Path
from typing import Any

import httpx
import pytest

from ultimat3.jobs.adapter import memory_job_driver
from ultimat3.jobs.cli import main_async

APP = """
from pydantic import BaseModel
from ultimat3.jobs import job, task

class Day(BaseModel):
    day: str

@job(input=Day, name="ops.rollup", idempotency_key=lambda i: i.day)
async def rollup(input, step, ctx):
    return None

nightly = task(name="ops.nightly", cron="5 4 * * *", enqueue=lambda occ: (rollup, {"day": "d"}))
JOBS = [rollup, nightly]
"""


def _serve(args: list[str], cwd: Path, env: dict[str, str]) -> tuple[subprocess.Popen[str], str]:
    proc = subprocess.Popen(
        [sys.executable, "-m", "ultimat3.jobs.cli", "dashboard", "--port", "0", *args],
        cwd=cwd,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    assert proc.stderr is not None
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        line = proc.stderr.readline()
        if "x dashboard: http://" in line:
            return proc, line.split("x dashboard: ", 1)[1].split(" ", 1)[0]
        if not line and proc.poll() is not None:
            break
    proc.kill()
    raise AssertionError(f"x dashboard did not start: {proc.communicate()}")


def test_x_dashboard_serves_the_store_read_only_and_stops_on_sigterm(
    database_url: str, pg_schema: str, tmp_path: Path
) -> None:
    (tmp_path / "opsapp.py").write_text(textwrap.dedent(APP))
    env = {**os.environ, "DATABASE_URL": database_url}
    proc, url = _serve(["--schema", pg_schema, "--app", "opsapp:JOBS", "--json"], tmp_path, env)
    try:
        assert url.startswith("http://127.0.0.1:")
        with httpx.Client(base_url=url) as client:
            r = client.get("/")
            assert r.status_code == 200 and "<h2>Queues</h2>" in r.text
            assert 'method="post"' not in r.text
            tasks = client.get("/tasks")
            assert "5 4 * * *" in tasks.text and "04:05:00Z" in tasks.text
            refused = client.post("/actions/pause", data={"queue": "default"})
            assert refused.status_code == 403 and "read-only" in refused.text
    finally:
        proc.send_signal(signal.SIGTERM)
        out, err = proc.communicate(timeout=30)
    assert proc.returncode == 0, err
    answer = json.loads(out)
    assert answer["stopped_by"] == "SIGTERM" and answer["allow_actions"] is False


def test_x_dashboard_with_allow_actions_offers_the_forms(
    database_url: str, pg_schema: str, tmp_path: Path
) -> None:
    env = {**os.environ, "DATABASE_URL": database_url}
    proc, url = _serve(["--schema", pg_schema, "--allow-actions", "--title", "Ops"], tmp_path, env)
    try:
        with httpx.Client(base_url=url) as client:
            page = client.get("/tasks")
            assert "<h1>Ops</h1>" in page.text and "x_jobs_csrf" in page.headers["set-cookie"]
            token = client.cookies["x_jobs_csrf"]
            r = client.post("/actions/pause-task", data={"task": "ops.nightly", "csrf": token})
            assert r.status_code == 303
            assert "task ops.nightly paused" in client.get(r.headers["location"]).text
    finally:
        proc.send_signal(signal.SIGTERM)
        proc.communicate(timeout=30)
    assert proc.returncode == 0


async def _refusal(argv: list[str]) -> tuple[int, dict[str, Any]]:
    out, err = io.StringIO(), io.StringIO()
    code = await main_async(
        ["dashboard", "--json", *argv], driver=memory_job_driver(), stdout=out, stderr=err
    )
    return code, json.loads(err.getvalue())["error"]


async def test_a_port_that_is_no_port_is_refused() -> None:
    code, error = await _refusal(["--port", "70000"])
    assert code == 1 and error["code"] == "X_CONFIG_INVALID" and "--port 70000" in error["message"]


async def test_a_port_in_use_is_refused_naming_it() -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        code, error = await _refusal(["--port", str(port)])
    assert code == 1 and error["code"] == "X_CONFIG_INVALID"
    assert f"127.0.0.1:{port}" in error["message"] and "--port" in error["fix"]


async def test_an_app_that_is_not_there_is_refused() -> None:
    code, error = await _refusal(["--app", "no_such_module_here:JOBS", "--port", "0"])
    assert (
        code == 1
        and error["code"] == "X_CONFIG_INVALID"
        and "no_such_module_here" in error["message"]
    )


async def test_without_the_extra_it_names_the_extra(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "uvicorn", None)
    code, error = await _refusal(["--port", "0"])
    assert code == 1 and error["code"] == "X_CONFIG_INVALID"
    assert "ultimat3-jobs[dashboard]" in error["fix"]
