"""x worker --log-level / --log-format configure the root logger (a dead letter prints its
traceback), and x jobs show prints the last error's traceback (``--json`` carries it)."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import sys
import textwrap
import threading
import uuid
from pathlib import Path
from typing import Any

import pytest

from ultimat3.core import new_id
from ultimat3.jobs.adapter import EnqueueRequest, MemoryJobDriver, memory_job_driver
from ultimat3.jobs.cli import main

Capture = pytest.CaptureFixture[str]

APP = """
import asyncio
import os
import signal
from typing import Any

from pydantic import BaseModel

from ultimat3.jobs import Retry, job


class Ping(BaseModel):
    n: int


def refund_order(n: int) -> None:
    raise RuntimeError(f"refund {n} refused by the bank")


async def ping(input: Ping, step: Any, ctx: Any) -> None:
    asyncio.get_running_loop().call_later(0.1, os.kill, os.getpid(), signal.SIGTERM)
    refund_order(input.n)


JOBS = [job(input=Ping, idempotency_key=lambda i: f"p:{i.n}", name="ping", run=ping,
            retry=Retry(attempts=1))]
"""


@pytest.fixture
def app(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Any:
    monkeypatch.syspath_prepend(str(tmp_path))
    name = f"cli_logs_app_{uuid.uuid4().hex}"
    (tmp_path / f"{name}.py").write_text(textwrap.dedent(APP))
    yield name
    sys.modules.pop(name, None)


def _put(driver: MemoryJobDriver, n: int) -> str:
    job_id = new_id()
    request = EnqueueRequest(
        id=job_id, run_id=new_id(), name="ping", queue="default", payload={"n": n},
        idempotency_key=f"p:{n}", max_attempts=1,
    )  # fmt: skip
    asyncio.run(driver.enqueue(request))
    return job_id


def _run(argv: list[str], driver: MemoryJobDriver) -> int:
    watchdog = threading.Timer(20, os.kill, (os.getpid(), signal.SIGTERM))
    watchdog.start()
    try:
        return main(argv, driver=driver)
    finally:
        watchdog.cancel()


def test_a_dead_letter_prints_a_json_line_with_its_traceback(capsys: Capture, app: str) -> None:
    driver = memory_job_driver()
    job_id = _put(driver, 3)
    assert _run(["worker", "--app", f"{app}:JOBS", "--log-format", "json"], driver) == 0
    err = capsys.readouterr().err
    records = [json.loads(line) for line in err.splitlines() if line.startswith("{")]
    [dead] = [r for r in records if r.get("event") == "jobs.run.dead-lettered"]
    assert dead["level"] == "error" and dead["logger"] == "ultimat3"
    assert dead["job"] == "ping" and dead["job_id"] == job_id and dead["attempt"] == 1
    assert dead["queue"] == "default"
    assert "refund_order" in dead["traceback"] and "refused by the bank" in dead["traceback"]
    assert not [r for r in records if r.get("event") == "jobs.run.completed"]  # DEBUG only


def test_text_format_at_debug_prints_one_line_a_record(capsys: Capture, app: str) -> None:
    driver = memory_job_driver()
    _put(driver, 4)
    argv = ["worker", "--app", f"{app}:JOBS", "--log-level", "debug", "--log-format", "text"]
    assert _run(argv, driver) == 0
    err = capsys.readouterr().err
    [line] = [x for x in err.splitlines() if "jobs.run.dead-lettered" in x]
    assert " ERROR ultimat3 jobs.run.dead-lettered job=ping " in line
    assert "Traceback (most recent call last)" in err


@pytest.mark.parametrize(
    ("flag", "value"), [("--log-level", "loud"), ("--log-format", "xml")]
)  # fmt: skip
def test_an_unknown_log_level_or_format_is_refused_before_anything_runs(
    capsys: Capture, app: str, flag: str, value: str
) -> None:
    driver = memory_job_driver()
    job_id = _put(driver, 5)
    assert main(["worker", "--app", f"{app}:JOBS", flag, value, "--json"], driver=driver) == 1
    error = json.loads(capsys.readouterr().err)["error"]
    assert error["code"] == "X_CONFIG_INVALID" and flag in error["message"]
    assert value in error["message"]
    assert asyncio.run(driver.introspect.show(job_id)).state == "ready"  # nothing ran


def test_jobs_show_prints_the_last_errors_traceback(capsys: Capture, app: str) -> None:
    driver = memory_job_driver()
    job_id = _put(driver, 6)
    assert _run(["worker", "--app", f"{app}:JOBS"], driver) == 0
    capsys.readouterr()
    assert main(["jobs", "show", job_id], driver=driver) == 0
    out = capsys.readouterr().out
    assert "last error's traceback" in out and "refund_order" in out
    assert main(["jobs", "show", job_id, "--json"], driver=driver) == 0
    shown = json.loads(capsys.readouterr().out)
    assert "refund_order" in shown["last_error"]["traceback"]


def test_worker_queues_is_read_when_queues_is_not_given(capsys: Capture, app: str) -> None:
    driver = memory_job_driver()
    _put(driver, 7)
    env = {"WORKER_QUEUES": "default,integrations"}
    watchdog = threading.Timer(20, os.kill, (os.getpid(), signal.SIGTERM))
    watchdog.start()
    try:
        assert main(["worker", "--app", f"{app}:JOBS", "--json"], driver=driver, env=env) == 0
    finally:
        watchdog.cancel()
    stats = json.loads(capsys.readouterr().out)["stats"]
    assert stats["queues"] == ["default", "integrations"]
    argv = ["worker", "--app", f"{app}:JOBS", "--queues", "default", "--json"]
    _put(driver, 8)
    watchdog = threading.Timer(20, os.kill, (os.getpid(), signal.SIGTERM))
    watchdog.start()
    try:
        assert main(argv, driver=driver, env=env) == 0  # --queues wins
    finally:
        watchdog.cancel()
    assert json.loads(capsys.readouterr().out)["stats"]["queues"] == ["default"]
