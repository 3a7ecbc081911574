"""x worker --app module:attribute: imports the app's jobs, runs them with job_worker on the
resolved driver until SIGTERM or SIGINT, then drains; and its refusals."""

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

from ultimat3.jobs import job
from ultimat3.jobs.adapter import job_driver


class Ping(BaseModel):
    n: int


RAN: list[int] = []
DRIVERS: list[str] = []


async def ping(input: Ping, step: Any, ctx: Any) -> int:
    out = await step.run("record", lambda signal: RAN.append(input.n) or input.n)
    DRIVERS.append(job_driver().name)
    # once this run has settled, stop the worker the way an orchestrator would
    asyncio.get_running_loop().call_later(0.05, os.kill, os.getpid(), signal.{signal})
    return out


JOBS = [job(input=Ping, idempotency_key=lambda i: f"ping:{{i.n}}", name="ping", run=ping)]
NOT_A_LIST = JOBS[0]
EMPTY: list[Any] = []
"""


@pytest.fixture
def app(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Any:
    """Write an app module; answers a function ``app(signal='SIGTERM') -> module name``."""
    monkeypatch.syspath_prepend(str(tmp_path))
    names: list[str] = []

    def write(sig: str = "SIGTERM") -> str:
        name = f"cli_worker_app_{uuid.uuid4().hex}"
        (tmp_path / f"{name}.py").write_text(textwrap.dedent(APP.format(signal=sig)))
        names.append(name)
        return name

    yield write
    for name in names:
        sys.modules.pop(name, None)


def put_ping(driver: MemoryJobDriver, n: int) -> str:
    job_id = new_id()
    request = EnqueueRequest(
        id=job_id,
        run_id=new_id(),
        name="ping",
        queue="default",
        payload={"n": n},
        idempotency_key=f"ping:{n}",
        max_attempts=3,
    )
    asyncio.run(driver.enqueue(request))
    return job_id


def run_worker(argv: list[str], driver: MemoryJobDriver) -> int:
    """``main(argv)``, with a watchdog that sends SIGTERM if the worker is still up after 20 s,
    so a worker that never stops fails the test instead of hanging it."""
    watchdog = threading.Timer(20, os.kill, (os.getpid(), signal.SIGTERM))
    watchdog.start()
    try:
        return main(argv, driver=driver)
    finally:
        watchdog.cancel()


@pytest.mark.parametrize("sig", ["SIGTERM", "SIGINT"])
def test_worker_runs_the_apps_jobs_until_a_signal_then_drains(
    capsys: Capture, app: Any, sig: str
) -> None:
    module = app(sig)
    driver = memory_job_driver(name="cli-test")
    job_id = put_ping(driver, 7)

    code = run_worker(["worker", "--app", f"{module}:JOBS", "--json"], driver)
    captured = capsys.readouterr()
    assert code == 0, captured.err
    out = json.loads(captured.out)
    assert out["app"] == f"{module}:JOBS" and out["signal"] == sig
    assert out["stats"]["completed"] == 1 and out["stats"]["draining"] is True
    assert f"{sig} received: draining" in captured.err

    row = asyncio.run(driver.introspect.show(job_id))
    assert row.state == "done" and row.result == 7
    loaded = sys.modules[module]
    assert loaded.RAN == [7]
    assert loaded.DRIVERS == ["cli-test"]  # the driver is ambient for enqueues in a body
    assert asyncio.run(driver.introspect.workers()) == []  # deregistered at the end


def test_worker_passes_queues_and_max_in_flight(capsys: Capture, app: Any) -> None:
    module = app()
    driver = memory_job_driver()
    put_ping(driver, 1)
    argv = ["worker", "--app", f"{module}:JOBS", "--queues", "default,other"]
    code = run_worker([*argv, "--max-in-flight", "2", "--json"], driver)
    captured = capsys.readouterr()
    assert code == 0, captured.err
    stats = json.loads(captured.out)["stats"]
    assert stats["queues"] == ["default", "other"] and stats["max_in_flight"] == 2


def test_worker_refuses_a_max_in_flight_of_zero(capsys: Capture, app: Any) -> None:
    module = app()
    argv = ["worker", "--app", f"{module}:JOBS", "--max-in-flight", "0", "--json"]
    assert main(argv, driver=memory_job_driver()) == 1
    error = json.loads(capsys.readouterr().err)["error"]
    assert error["code"] in ("X_INVARIANT", "X_CONFIG_INVALID")
    assert "max_in_flight" in error["message"]


@pytest.mark.parametrize(
    ("spec", "words"),
    [
        ("{m}", "module:attribute"),
        ("{m}:MISSING", "no attribute"),
        ("{m}:RAN", "empty list"),
        ("{m}:EMPTY", "empty list"),
        ("no_such_module_for_x_worker:JOBS", "no module named"),
    ],
)
def test_worker_refuses_an_app_that_is_not_a_list_of_jobs(
    capsys: Capture, app: Any, spec: str, words: str
) -> None:
    module = app()
    argv = ["worker", "--app", spec.format(m=module), "--json"]
    assert main(argv, driver=memory_job_driver()) == 1
    error = json.loads(capsys.readouterr().err)["error"]
    assert error["code"] == "X_CONFIG_INVALID"
    assert words in error["message"]


def test_worker_accepts_a_single_job_as_well_as_a_list(capsys: Capture, app: Any) -> None:
    module = app()
    driver = memory_job_driver()
    job_id = put_ping(driver, 9)
    assert run_worker(["worker", "--app", f"{module}:NOT_A_LIST", "--json"], driver) == 0
    assert json.loads(capsys.readouterr().out)["stats"]["completed"] == 1
    assert asyncio.run(driver.introspect.show(job_id)).state == "done"


def test_worker_refuses_an_attribute_that_is_neither_a_job_nor_a_list(
    capsys: Capture, app: Any
) -> None:
    module = app()
    argv = ["worker", "--app", f"{module}:asyncio", "--json"]
    assert main(argv, driver=memory_job_driver()) == 1
    error = json.loads(capsys.readouterr().err)["error"]
    assert error["code"] == "X_CONFIG_INVALID" and "not a list of jobs" in error["message"]


def test_worker_refuses_an_empty_queue_name(capsys: Capture, app: Any) -> None:
    module = app()
    argv = ["worker", "--app", f"{module}:JOBS", "--queues", "default,,x", "--json"]
    assert main(argv, driver=memory_job_driver()) == 1
    error = json.loads(capsys.readouterr().err)["error"]
    assert error["code"] == "X_INVARIANT" and "--queues" in error["message"]


def test_worker_needs_app(capsys: Capture) -> None:
    assert main(["worker"], driver=memory_job_driver()) == 2
    assert "--app" in capsys.readouterr().err
