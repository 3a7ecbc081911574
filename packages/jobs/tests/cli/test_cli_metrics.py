"""``x worker --metrics-port``: a real worker process on the real Postgres serves its
OpenTelemetry metrics in Prometheus format on /metrics, scraped over HTTP; and its refusals (the
``prometheus`` extra missing, a port in use, a port out of range)."""

from __future__ import annotations

import asyncio
import json
import os
import queue
import re
import signal
import socket
import subprocess
import sys
import textwrap
import threading
import time
import urllib.request
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from ultimat3.core import XError, new_id
from ultimat3.jobs.adapter import EnqueueRequest
from ultimat3.jobs.cli._metrics import EXTRA_FIX, require_extra
from ultimat3.jobs.postgres import migrate, postgres_job_driver

APP = """
from typing import Any

from pydantic import BaseModel

from ultimat3.jobs import job


class Ping(BaseModel):
    n: int


async def ping(input: Ping, step: Any, ctx: Any) -> int:
    return await step.run("double", lambda signal: input.n * 2)


JOBS = [
    job(input=Ping, idempotency_key=lambda i: f"ping:{i.n}", name="ping", queue="pings", run=ping)
]
"""

X_WORKER = [sys.executable, "-m", "ultimat3.jobs.cli", "worker"]


@pytest.fixture
def app_dir(tmp_path: Path) -> tuple[Path, str]:
    module = f"cli_metrics_app_{uuid.uuid4().hex}"
    (tmp_path / f"{module}.py").write_text(textwrap.dedent(APP))
    return tmp_path, module


@pytest.fixture
def schema(database_url: str) -> Iterator[str]:
    from ultimat3_testkit.engine_drivers import drop_schema

    name = f"x_metrics_{uuid.uuid4().hex[:16]}"
    asyncio.run(migrate(database_url, schema=name))
    try:
        yield name
    finally:
        asyncio.run(drop_schema(database_url, name))


def env_for(database_url: str) -> dict[str, str]:
    env = {**os.environ, "DATABASE_URL": database_url}
    env.pop("REDIS_URL", None)
    return env


def start_worker(cwd: Path, env: dict[str, str], *argv: str) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [*X_WORKER, *argv],
        env=env,
        cwd=cwd,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


class Lines:
    """The process's stderr, read on a thread so the test can wait for one line with a
    deadline."""

    def __init__(self, proc: subprocess.Popen[str]) -> None:
        self.seen: list[str] = []
        self._q: queue.Queue[str | None] = queue.Queue()
        assert proc.stderr is not None
        stream = proc.stderr

        def pump() -> None:
            for line in stream:
                self._q.put(line)
            self._q.put(None)

        threading.Thread(target=pump, daemon=True).start()

    def wait_for(self, pattern: str, timeout: float = 30) -> re.Match[str]:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            try:
                line = self._q.get(timeout=max(0.0, deadline - time.monotonic()))
            except queue.Empty:
                break
            if line is None:
                break
            self.seen.append(line)
            found = re.search(pattern, line)
            if found:
                return found
        raise AssertionError(f"no stderr line matched {pattern!r}: {self.seen}")

    def rest(self) -> str:
        while True:
            line = self._q.get(timeout=30)
            if line is None:
                return "".join(self.seen)
            self.seen.append(line)


def scrape(url: str) -> tuple[str, str]:
    with urllib.request.urlopen(url, timeout=5) as response:
        return response.headers.get("Content-Type", ""), response.read().decode()


def enqueue_ping(database_url: str, schema: str, n: int) -> str:
    job_id = new_id()

    async def go() -> None:
        driver = postgres_job_driver(database_url, schema=schema)
        try:
            await driver.enqueue(
                EnqueueRequest(
                    id=job_id,
                    run_id=new_id(),
                    name="ping",
                    queue="pings",
                    payload={"n": n},
                    idempotency_key=f"ping:{n}",
                    max_attempts=3,
                )
            )
        finally:
            await driver.close()

    asyncio.run(go())
    return job_id


def test_a_worker_process_serves_its_metrics_on_slash_metrics(
    app_dir: tuple[Path, str], schema: str, database_url: str
) -> None:
    cwd, module = app_dir
    worker = start_worker(
        cwd,
        env_for(database_url),
        "--app",
        f"{module}:JOBS",
        "--schema",
        schema,
        "--max-in-flight",
        "4",
        "--metrics-port",
        "0",  # the system picks a free port; the worker prints it
        "--json",
    )
    lines = Lines(worker)
    try:
        url = lines.wait_for(r"metrics on (http://127\.0\.0\.1:\d+/metrics)").group(1)
        lines.wait_for(r"running; SIGTERM")
        content_type, before = scrape(url)
        assert content_type.startswith("text/plain")
        assert re.search(r'^job_worker_capacity\{.*worker_id=".+"\} 4\.0$', before, re.M), before
        assert 'outcome="done"' not in before  # nothing ran yet

        enqueue_ping(database_url, schema, 21)
        idle = re.compile(r"^job_worker_in_flight\{.*\} 0\.0$", re.M)
        deadline = time.monotonic() + 30
        after = before
        while time.monotonic() < deadline and not (
            'outcome="done"' in after and idle.search(after)  # the run counted, then let go
        ):
            time.sleep(0.1)
            after = scrape(url)[1]
        done = re.search(
            r'^jobs_total\{[^}]*outcome="done"[^}]*queue="pings"[^}]*\} (\S+)$', after, re.M
        )
        assert done is not None, after
        assert float(done.group(1)) == 1.0
        assert idle.search(after), after
        # Prometheus's text exposition format, TYPE lines included
        assert "# TYPE jobs_total counter" in after

        worker.send_signal(signal.SIGTERM)
        out, _ = worker.communicate(timeout=30)
    finally:
        if worker.poll() is None:
            worker.kill()
            worker.communicate()
    assert worker.returncode == 0, lines.rest()
    assert json.loads(out)["stats"]["completed"] == 1
    port = int(url.rsplit(":", 1)[1].split("/")[0])
    with socket.socket() as s:  # the endpoint closed with the worker
        assert s.connect_ex(("127.0.0.1", port)) != 0


def test_a_port_in_use_is_refused_before_the_worker_starts(
    app_dir: tuple[Path, str], database_url: str
) -> None:
    cwd, module = app_dir
    with socket.socket() as holder:
        holder.bind(("127.0.0.1", 0))
        holder.listen()
        port = holder.getsockname()[1]
        ran = subprocess.run(
            [*X_WORKER, "--app", f"{module}:JOBS", "--metrics-port", str(port), "--json"],
            env=env_for(database_url),
            cwd=cwd,
            capture_output=True,
            text=True,
            timeout=60,
        )
    assert ran.returncode != 0
    error = json.loads(ran.stderr[ran.stderr.index("{") :])["error"]
    assert error["code"] == "X_CONFIG_INVALID"
    assert f"127.0.0.1:{port}" in error["message"]
    assert "--metrics-port" in error["fix"]
    assert "running;" not in ran.stderr  # refused before the worker claimed anything


@pytest.mark.parametrize("missing", ["prometheus_client", "opentelemetry.exporter.prometheus"])
def test_the_missing_extra_is_refused_with_the_pip_line(
    missing: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setitem(sys.modules, missing, None)  # what `import` meets when it is not installed
    with pytest.raises(XError) as exc:
        require_extra()
    assert exc.value.code == "X_CONFIG_INVALID"
    assert missing in exc.value.message and "--metrics-port" in exc.value.message
    assert exc.value.fix == EXTRA_FIX == 'pip install "ultimat3-jobs[prometheus]"'


def test_the_missing_extra_refuses_the_command_itself(
    app_dir: tuple[Path, str], database_url: str
) -> None:
    cwd, module = app_dir
    blocked = "import sys; sys.modules['prometheus_client'] = None\n"
    code = blocked + (
        "from ultimat3.jobs.cli import main\n"
        f"raise SystemExit(main(['worker', '--app', '{module}:JOBS', '--metrics-port', '0']))\n"
    )
    ran = subprocess.run(
        [sys.executable, "-c", code],
        env=env_for(database_url),
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert ran.returncode != 0
    assert "X_CONFIG_INVALID" in ran.stderr
    assert "prometheus_client is not installed" in ran.stderr
    assert 'pip install "ultimat3-jobs[prometheus]"' in ran.stderr


@pytest.mark.parametrize("port", ["-1", "65536"])
def test_a_port_out_of_range_is_refused(
    app_dir: tuple[Path, str], database_url: str, port: str
) -> None:
    cwd, module = app_dir
    ran = subprocess.run(
        [*X_WORKER, "--app", f"{module}:JOBS", "--metrics-port", port, "--json"],
        env=env_for(database_url),
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert ran.returncode != 0
    error = json.loads(ran.stderr[ran.stderr.index("{") :])["error"]
    assert error["code"] == "X_CONFIG_INVALID"
    assert f"--metrics-port {port} is not a TCP port" in error["message"]
