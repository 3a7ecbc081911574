"""A poison job beside ordinary ones, and a worker process that runs them (issue 23: a poison
job harms only itself).

``python -m ultimat3_testkit.poison_app --driver postgres --dsn ... --schema ...`` (or
``--driver redis --url ... --prefix ...``) runs ``job_worker`` over :data:`JOBS` and writes
every log event of the ``ultimat3`` logger as one JSON line to ``--events``. The poison's step
SIGKILLs its own process (``os.kill(os.getpid(), 9)``); an ordinary job's step sleeps
``pause_ms`` and returns. :func:`run_poison_scenario` is the test's side: it queues the jobs,
restarts the worker after each death and answers every row once all have settled.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import logging
import os
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Final

from pydantic import BaseModel

from ultimat3.core import Signal, swap_adapter
from ultimat3.jobs import Job, JobContext, Retry, Step, job, job_worker
from ultimat3.jobs.adapter import JOB_DRIVER, JobDetail, JobDriver, driver_introspect

QUEUE: Final = "poison"
TERMINAL: Final = frozenset({"done", "dead", "failed", "cancelled"})


class Work(BaseModel):
    key: str
    pause_ms: int = 300


async def innocent_body(work: Work, step: Step, ctx: JobContext) -> Any:
    async def fn(sig: Signal) -> dict[str, Any]:
        await asyncio.sleep(work.pause_ms / 1000)
        return {"key": work.key, "attempt": ctx.attempt, "pid": os.getpid()}

    return await step.run("work", fn)


async def poison_body(work: Work, step: Step, ctx: JobContext) -> None:
    async def fn(sig: Signal) -> None:
        await asyncio.sleep(0.05)  # the others are in flight by now
        os.kill(os.getpid(), signal.SIGKILL)

    await step.run("boom", fn)


INNOCENT_JOB: Final[Job[Work, Any]] = job(
    input=Work,
    idempotency_key=lambda w: w.key,
    name="poison.innocent",
    queue=QUEUE,
    retry=Retry(attempts=3, delay="50ms"),
    run=innocent_body,
)
POISON_JOB: Final[Job[Work, None]] = job(
    input=Work,
    idempotency_key=lambda w: w.key,
    name="poison.kills",
    queue=QUEUE,
    retry=Retry(attempts=3, delay="50ms"),
    run=poison_body,
)
JOBS: Final[list[Job[Any, Any]]] = [INNOCENT_JOB, POISON_JOB]


def make_driver(kind: str, target: str, space: str, *, pool: int = 10) -> JobDriver:
    """``postgres`` (``target`` a DSN, ``space`` the schema) or ``redis`` (a URL, the prefix)."""
    if kind == "postgres":
        from ultimat3.jobs.postgres import postgres_job_driver

        return postgres_job_driver(target, schema=space, max_size=pool)
    from ultimat3.jobs_redis import redis_job_driver

    return redis_job_driver(target, prefix=space)


class JsonLines(logging.Handler):
    """Every structured ``log_event`` as one JSON line, flushed at once."""

    def __init__(self, path: str) -> None:
        super().__init__(logging.DEBUG)
        self._file = open(path, "a", encoding="utf-8", buffering=1)  # noqa: SIM115

    def emit(self, record: logging.LogRecord) -> None:
        name = getattr(record, "event", None)
        if name is None:
            return
        line = {"event": name, "t": time.time(), "pid": os.getpid()}
        line.update(getattr(record, "x_fields", {}))
        self._file.write(json.dumps(line, default=str) + "\n")


async def serve(args: argparse.Namespace) -> int:
    driver = make_driver(args.driver, args.target, args.space, pool=args.max_in_flight + 2)
    worker = job_worker(
        jobs=JOBS,
        max_in_flight=args.max_in_flight,
        poll_interval_ms=20,
        idle_poll_max_ms=200,
        visibility_timeout_ms=args.visibility_ms,
        driver=driver,
    )
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    with swap_adapter(JOB_DRIVER, driver):
        await worker.start()
        await stop.wait()
        await worker.drain(signal_name="SIGTERM")
    await driver.close()
    return 0


def main(argv: Sequence[str]) -> int:
    p = argparse.ArgumentParser(prog="ultimat3_testkit.poison_app")
    p.add_argument("--driver", choices=("postgres", "redis"), required=True)
    p.add_argument("--target", required=True, help="the DSN or the Redis URL")
    p.add_argument("--space", required=True, help="the schema or the key prefix")
    p.add_argument("--events", required=True)
    p.add_argument("--max-in-flight", type=int, default=8)
    p.add_argument("--visibility-ms", type=int, default=1000)
    p.add_argument("--go-file", default=None, help="start the worker once this file exists")
    args = p.parse_args(list(argv))
    if args.driver == "postgres":  # imported before the wait, so the go starts it at once
        import ultimat3.jobs.postgres
    else:
        import ultimat3.jobs_redis  # noqa: F401
    if args.go_file:  # a standby: imported and ready, it starts the moment it is told
        while not os.path.exists(args.go_file):
            time.sleep(0.01)
    logger = logging.getLogger("ultimat3")
    logger.setLevel(logging.DEBUG)
    logger.addHandler(JsonLines(args.events))
    logger.propagate = False
    return asyncio.run(serve(args))


# --- the test's side ----------------------------------------------------------------------------


@dataclass
class PoisonRun:
    """What :func:`run_poison_scenario` saw: every row at the end, the worker deaths, the
    events every worker logged."""

    poison: JobDetail
    innocents: list[JobDetail]
    deaths: int
    starts: int
    events: list[dict[str, Any]] = field(default_factory=list)
    seconds: float = 0.0


def _start_worker(argv: list[str], output: Path) -> subprocess.Popen[bytes]:
    with open(output, "wb") as out:
        return subprocess.Popen(
            [sys.executable, "-m", "ultimat3_testkit.poison_app", *argv],
            stdout=out,
            stderr=subprocess.STDOUT,
        )


async def run_poison_scenario(
    kind: str,
    target: str,
    space: str,
    *,
    innocents: int = 40,
    max_in_flight: int = 8,
    visibility_ms: int = 1000,
    timeout_s: float = 60.0,
) -> PoisonRun:
    """Queue ``innocents`` ordinary jobs with the poison among them, run one worker process at a
    time (restarted after each death) until every row settled, and answer the rows."""
    started = time.monotonic()
    driver = make_driver(kind, target, space, pool=2)
    folder = Path(tempfile.mkdtemp(prefix="x-poison-"))
    events_path = folder / "events.jsonl"
    events_path.touch()
    procs: list[subprocess.Popen[bytes]] = []
    try:
        with swap_adapter(JOB_DRIVER, driver):
            half = innocents // 2
            ids = [(await INNOCENT_JOB.enqueue(Work(key=f"innocent-{i}"))).id for i in range(half)]
            poison_id = (await POISON_JOB.enqueue(Work(key="poison"))).id
            ids += [
                (await INNOCENT_JOB.enqueue(Work(key=f"innocent-{i}"))).id
                for i in range(half, innocents)
            ]
        intro = driver_introspect(driver)
        assert intro is not None
        deaths = 0
        argv = [
            "--driver", kind, "--target", target, "--space", space,
            "--events", str(events_path),
            "--max-in-flight", str(max_in_flight),
            "--visibility-ms", str(visibility_ms),
        ]  # fmt: skip

        def standby() -> subprocess.Popen[bytes]:
            n = len(procs)
            go = folder / f"go-{n}"
            return _start_worker([*argv, "--go-file", str(go)], folder / f"output-{n}.txt")

        procs.append(standby())
        (folder / "go-0").touch()
        procs.append(standby())  # the next worker, imported and waiting for its go
        while True:
            if procs[-2].poll() is not None:  # the running worker died: its standby goes
                deaths += procs[-2].returncode == -signal.SIGKILL
                (folder / f"go-{len(procs) - 1}").touch()
                procs.append(standby())
            page = await intro.list(queue=QUEUE, limit=innocents + 1)
            if len(page) == innocents + 1 and all(r.state in TERMINAL for r in page):
                rows = [await intro.show(i) for i in [poison_id, *ids]]
                break
            if time.monotonic() - started > timeout_s:
                states = {r.id: (r.state, r.attempts, r.crashes) for r in page}
                raise AssertionError(
                    f"the poison scenario did not settle in {timeout_s} s: {states} "
                    f"(worker output in {folder})"
                )
            await asyncio.sleep(0.1)
        procs[-2].send_signal(signal.SIGTERM)
        try:
            procs[-2].wait(timeout=15)
        except subprocess.TimeoutExpired:
            procs[-2].kill()
        events = [
            json.loads(line)
            for line in events_path.read_text(encoding="utf-8").splitlines()
            if line.strip().startswith("{") and line.strip().endswith("}")
        ]
        return PoisonRun(
            poison=rows[0],
            innocents=rows[1:],
            deaths=deaths,
            starts=len(procs) - 1,
            events=events,
            seconds=time.monotonic() - started,
        )
    finally:
        for proc in procs:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
        await driver.close()


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
