"""The chaos soak on Redis (#23): worker processes on a PRIVATE redis-server started with
``appendonly yes`` and ``appendfsync always``, SIGKILLed and SIGSTOP/SIGCONTed at random, the
server itself SIGKILLed and restarted once from its append-only file; at the end the invariants
are checked against the driver's own rows.

    python -m ultimat3_testkit.chaos_redis --jobs 2000 --minutes 2      # longer, on demand

``tests/chaos/test_chaos_soak_redis.py`` runs it bounded. Every address is loopback.

The invariants (each a count of violations; the soak passes when all are 0):

- I1 nothing lost: every enqueued job is ``done``.
- I2 no phantom: the driver holds exactly the enqueued jobs.
- I5 completed steps never re-run: no effect of a step was recorded after the step's
  ``completed`` record (both on the server's clock).
- I6 one owner per settle: every settle that landed (an ``ack`` or ``nack`` past its fence that
  wrote the row's state) was fenced on a (worker, claim) handed out for that job to that worker,
  and no claim settled twice. The record is the server's own: a ``MONITOR`` connection held by
  the soak's driver for the whole soak (re-dialled across the restart) shows each script run
  and the commands it ran, and the append-only file adds every claim the monitor missed while
  it was down (``appendfsync always``: a worker only ever receives a claim that is on disk).
  A settle run while the monitor was down is not seen, so not checked
  (:mod:`ultimat3_testkit.redis_owners`).
- I7 attempts bounded: no row's ``attempts`` is over its ``max_attempts``.
- I8 the keyed cap never exceeded, as the bodies recorded it (an interval a SIGKILL cut short
  ends at the kill; one open across the server's death ends at the death: its slot's lease
  could not be renewed past it and may lapse during the outage).

Not here: I3 (``step.transaction`` is refused on Redis).
Reported, not a violation: ``step.run`` effects that ran twice (at-least-once).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import random
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Final

from pydantic import BaseModel
from redis import Redis as SyncRedis
from redis.asyncio import Redis
from redis.exceptions import RedisError

from ultimat3.core import Signal, new_id, swap_adapter
from ultimat3.jobs import Concurrency, JobContext, Retry, Step, job, job_worker
from ultimat3.jobs.adapter import JOB_DRIVER, MAX_JOB_PAGE, EnqueueRequest, JobRow, job_cursor
from ultimat3_testkit.redis_owners import aof_claims, i6_violations, monitor_owners, script_shas

QUEUE: Final = "rchaos"
CAP: Final = 2
GROUPS: Final = 4
LEASE_MS: Final = 2000
"""The workers' visibility timeout: a slot's lease lasts at most this long past its last
renewal."""
PREFIX: Final = "rchaos"
FX: Final = "rchaos-fx"
"""The list every body appends its effects to: ``kind|job|step|attempt|pid|ms``."""
_PUSH: Final = (
    "local t = redis.call('TIME') local ms = t[1] * 1000 + math.floor(t[2] / 1000) "
    "redis.call('RPUSH', KEYS[1], ARGV[1] .. '|' .. ms) return ms"
)


class Chaos(BaseModel):
    key: str
    mode: str
    group: str = "g0"


_client: dict[str, Redis] = {}


async def _effect(text: str) -> int:
    client = _client["fx"]
    return int(await client.eval(_PUSH, 1, FX, text))


async def mixed_body(c: Chaos, step: Step, ctx: JobContext) -> dict[str, Any]:
    def named(name: str) -> Any:
        async def fn(sig: Signal) -> int:
            await _effect(f"fx|{ctx.job_id}|{name}|{ctx.attempt}|{os.getpid()}")
            return ctx.attempt

        return fn

    if c.mode == "run":
        await step.run("run", named("run"))
    else:
        await step.run("a", named("a"))
        await step.sleep("300ms")
        await step.run("b", named("b"))
    return {"mode": c.mode}


async def capped_body(c: Chaos, step: Step, ctx: JobContext) -> dict[str, Any]:
    tag = f"{ctx.job_id}:{ctx.attempt}:{new_id()}"
    await _effect(f"in|{tag}|{c.group}|{ctx.attempt}|{os.getpid()}")
    await asyncio.sleep(0.03)
    await _effect(f"out|{tag}|{c.group}|{ctx.attempt}|{os.getpid()}")
    return {"mode": c.mode}


MIXED = job(
    input=Chaos,
    idempotency_key=lambda c: c.key,
    name="rchaos.mixed",
    queue=QUEUE,
    retry=Retry(attempts=25, delay="50ms", max_delay="250ms"),
    run=mixed_body,
)
CAPPED = job(
    input=Chaos,
    idempotency_key=lambda c: c.key,
    name="rchaos.capped",
    queue=QUEUE,
    concurrency=Concurrency(key=lambda c: c.group, limit=CAP),
    retry=Retry(attempts=25, delay="50ms", max_delay="250ms"),
    run=capped_body,
)


# --- the worker process ------------------------------------------------------------------------


async def serve(url: str) -> int:
    from ultimat3.jobs_redis import redis_job_driver

    driver = redis_job_driver(url, prefix=PREFIX)
    _client["fx"] = Redis.from_url(url)
    worker = job_worker(
        jobs=[MIXED, CAPPED],
        max_in_flight=8,
        poll_interval_ms=20,
        idle_poll_max_ms=200,
        visibility_timeout_ms=LEASE_MS,
        driver=driver,
    )
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    with swap_adapter(JOB_DRIVER, driver):
        while True:  # the server may be restarting: start once it answers
            try:
                await worker.start()
                break
            except Exception:
                await asyncio.sleep(0.2)
        print("ready", flush=True)
        await stop.wait()
        await worker.drain(signal_name="SIGTERM")
    await driver.close()
    await _client["fx"].aclose()
    return 0


# --- the server ---------------------------------------------------------------------------------


def spare_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
    return port


class PrivateRedis:
    """A redis-server of the soak's own: append-only, fsynced on every write."""

    def __init__(self, folder: Path) -> None:
        self.folder = folder
        self.port = spare_port()
        self.process: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"

    def start(self) -> None:
        self.process = subprocess.Popen(
            [
                "redis-server", "--port", str(self.port), "--bind", "127.0.0.1",
                "--dir", str(self.folder), "--appendonly", "yes", "--appendfsync", "always",
                "--save", "", "--auto-aof-rewrite-percentage", "0", "--daemonize", "no",
                "--logfile", str(self.folder / "redis.log"),
            ],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )  # fmt: skip
        deadline = time.monotonic() + 20
        while True:
            try:
                with SyncRedis(port=self.port, socket_connect_timeout=0.2) as probe:
                    if probe.ping():
                        return
            except RedisError:
                pass
            if self.process.poll() is not None or time.monotonic() > deadline:
                raise AssertionError(f"redis-server on {self.port} did not come up")
            time.sleep(0.05)

    def kill(self) -> None:
        process, self.process = self.process, None
        if process is not None:
            process.kill()
            process.wait(timeout=10)


class Monitor:
    """``MONITOR`` on the private server for the whole soak, read on a thread of its own and
    re-dialled whenever the connection drops (the server's death); the lines as Redis wrote
    them. What runs while it is not connected is not seen: ``dials`` counts the connections."""

    MARK: Final = "rchaos-monitor-end"

    def __init__(self, port: int) -> None:
        self.port = port
        self.lines: list[str] = []
        self.dials = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="rchaos-monitor", daemon=True)

    def start(self) -> None:
        self._thread.start()
        deadline = time.monotonic() + 20
        while not self.dials:
            if time.monotonic() > deadline:
                raise AssertionError("MONITOR did not attach")
            time.sleep(0.01)

    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                with socket.create_connection(("127.0.0.1", self.port), timeout=0.5) as s:
                    s.sendall(b"MONITOR\r\n")
                    s.settimeout(0.2)
                    tail = b""
                    dialled = False
                    while not self._stop.is_set():
                        try:
                            chunk = s.recv(1 << 20)
                        except TimeoutError:
                            continue
                        if not chunk:
                            break
                        *done, tail = (tail + chunk).split(b"\r\n")
                        if not dialled and done:  # "+OK": attached
                            dialled = True
                            self.dials += 1
                        self.lines.extend(x[1:].decode("utf-8", "replace") for x in done)
            except OSError:
                time.sleep(0.01)

    def finish(self) -> None:
        """Everything the server ran so far read (a marker sent last has come back), then
        stop."""
        with SyncRedis(port=self.port) as client:
            client.echo(self.MARK)
        deadline = time.monotonic() + 60
        seen = 0
        while not any(self.MARK in x for x in self.lines[seen:]):
            seen = max(0, len(self.lines) - 1)
            if time.monotonic() > deadline:
                raise AssertionError("the MONITOR stream did not catch up")
            time.sleep(0.05)
        self.close()

    def close(self) -> None:
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join(timeout=5)


def owners_check(lines: Sequence[str], folder: Path, report: Report, v: dict[str, int]) -> None:
    """I6 from the monitored lines and the append-only file's claims (``folder``: the server's
    ``--dir``)."""
    from ultimat3.jobs_redis._scripts import script_sources

    base = "{" + PREFIX + "}:"
    seen = monitor_owners(lines, script_shas(script_sources()), base)
    on_disk: set[tuple[str, str, str]] = set()
    for path in sorted((folder / "appendonlydir").glob("*.incr.aof")):
        on_disk |= aof_claims(path.read_bytes(), base)
    claims = seen.claims | on_disk
    report.claims = len(claims)
    report.claims_unmonitored = len(claims - seen.claims)
    report.claims_not_on_disk = len(seen.claims - on_disk)
    report.settles = len(seen.settles)
    v["I6 settle not by its one owner"] = i6_violations(claims, seen.settles)


# --- the soak -----------------------------------------------------------------------------------


@dataclass
class Report:
    jobs: int
    seconds: float = 0.0
    kills: int = 0
    stops: int = 0
    restarts: int = 0
    violations: dict[str, int] = field(default_factory=dict)
    run_duplicates: int = 0
    run_jobs: int = 0
    max_cap_seen: int = 0
    claims: int = 0
    """Claims handed out (I6's record: the monitored stream and the append-only file)."""
    claims_unmonitored: int = 0
    """Of those, the ones only the append-only file holds (run while the monitor was down)."""
    claims_not_on_disk: int = 0
    """Claims the monitor saw that the append-only file lacks: 0 while the file is the whole
    record of claims that I6 relies on for the monitor's holes (a check of that reasoning)."""
    settles: int = 0
    """Settles seen landing (I6's record), each fenced on one claim."""
    monitor_dials: int = 0
    crashes: int = 0
    """Crashes on record over every row (lapses whose worker was known dead)."""
    events: list[str] = field(default_factory=list)
    """The chaos as it happened, on the server's clock (ms): restarts and stops."""
    overlaps: list[str] = field(default_factory=list)
    """When I8 fails: the intervals of the over-full group at its peak (job, pid, in, out)."""

    @property
    def ok(self) -> bool:
        return all(v == 0 for v in self.violations.values())


def _requests(n: int, rng: random.Random) -> tuple[list[EnqueueRequest], dict[str, str]]:
    out: list[EnqueueRequest] = []
    modes: dict[str, str] = {}
    for i in range(n):
        mode = rng.choice(("run", "run", "sleep", "capped"))
        key = f"rchaos-{i}"
        req = EnqueueRequest(
            id=new_id(),
            run_id=new_id(),
            name="rchaos.capped" if mode == "capped" else "rchaos.mixed",
            queue=QUEUE,
            payload={"key": key, "mode": mode, "group": f"g{i % GROUPS}"},
            idempotency_key=key,
            max_attempts=25,
            concurrency_key=f"g{i % GROUPS}" if mode == "capped" else None,
        )
        out.append(req)
        modes[req.id] = mode
    return out, modes


class _Worker:
    def __init__(self, url: str, folder: Path) -> None:
        self.out = folder / f"worker-{time.monotonic_ns()}.txt"
        with open(self.out, "wb") as out:
            self.proc = subprocess.Popen(
                [sys.executable, "-m", "ultimat3_testkit.chaos_redis", "--worker", url],
                stdout=out,
                stderr=subprocess.STDOUT,
            )
        self.pid = self.proc.pid

    def signal(self, sig: signal.Signals) -> None:
        if self.proc.poll() is None:
            os.kill(self.pid, sig)

    def tail(self) -> str:
        return self.out.read_text(errors="replace")[-1500:]


async def _rows(driver: Any) -> list[JobRow]:
    out: list[JobRow] = []
    after = None
    while True:
        page = await driver.introspect.list(queue=QUEUE, limit=MAX_JOB_PAGE, after=after)
        out += page
        if len(page) < MAX_JOB_PAGE:
            return out
        after = job_cursor(page[-1])


async def soak(*, jobs: int, seconds: float, workers: int = 3, seed: int = 23) -> Report:
    """One soak on a fresh private redis-server (deleted afterwards); answers the report."""
    from ultimat3.jobs_redis import redis_job_driver

    rng = random.Random(seed)
    base = Path(tempfile.mkdtemp(prefix="x-chaos-redis-"))
    server = PrivateRedis(base)
    procs: list[_Worker] = []
    report = Report(jobs=jobs)
    started = time.monotonic()
    kills: dict[int, int] = {}
    """A killed worker's pid -> the server's clock at the kill (ms)."""
    driver = None
    monitor: Monitor | None = None
    try:
        server.start()
        monitor = Monitor(server.port)
        monitor.start()
        driver = redis_job_driver(server.url, prefix=PREFIX)
        requests, modes = _requests(jobs, rng)
        for i in range(0, len(requests), 500):
            await driver.enqueue_many(requests[i : i + 500])
        ids = {r.id for r in requests}

        def start() -> _Worker:
            proc = _Worker(server.url, base)
            procs.append(proc)
            return proc

        alive = [start() for _ in range(workers)]

        async def settled() -> bool:
            try:
                return all(r.state == "done" for r in await _rows(driver)) and True
            except Exception:
                return False  # the server is restarting

        async def server_ms() -> int:
            assert driver is not None
            for _ in range(100):
                try:
                    return await driver.now_ms()
                except Exception:
                    await asyncio.sleep(0.1)
            return int(time.time() * 1000)

        server_killed: list[int] = []
        chaos_started = time.monotonic()
        restart_at = chaos_started + min(seconds / 2, 8.0)
        restarted = False
        while time.monotonic() - chaos_started < seconds:
            if restarted and report.kills >= 3 and await settled():
                break
            await asyncio.sleep(rng.uniform(1.0, 2.0))
            if not restarted and time.monotonic() >= restart_at:
                kill_ms = await server_ms()
                server_killed.append(kill_ms)
                report.events.append(f"server killed at {kill_ms}")
                server.kill()  # kill -9: what appendfsync always put on disk is all there is
                for proc in alive:
                    kills.setdefault(proc.pid, kill_ms)  # no body outlives the server's record
                await asyncio.to_thread(server.start)  # the same port, the same folder
                restarted = True
                report.restarts += 1
                continue
            victim = rng.choice(alive)
            if rng.random() < 0.6:
                victim.signal(signal.SIGKILL)
                await asyncio.to_thread(victim.proc.wait, 10)
                kills[victim.pid] = await server_ms()
                report.kills += 1
                alive[alive.index(victim)] = start()
            else:
                stop_ms = await server_ms()
                victim.signal(signal.SIGSTOP)
                await asyncio.sleep(rng.uniform(0.2, 0.6))
                victim.signal(signal.SIGCONT)
                report.events.append(f"pid {victim.pid} stopped {stop_ms}..{await server_ms()}")
                report.stops += 1
        deadline = time.monotonic() + max(120.0, seconds)
        while not await settled():
            if time.monotonic() > deadline:
                states: dict[str, int] = {}
                for r in await _rows(driver):
                    states[r.state] = states.get(r.state, 0) + 1
                tails = "\n".join(p.tail() for p in alive)
                raise AssertionError(f"not settled: {states}\nworkers:\n{tails}")
            await asyncio.sleep(0.5)
        for proc in alive:
            proc.signal(signal.SIGTERM)
        for proc in alive:
            await asyncio.to_thread(proc.proc.wait, 30)
        await asyncio.to_thread(monitor.finish)
        report.monitor_dials = monitor.dials
        owners_check(monitor.lines, base, report, report.violations)
        await _check(driver, server.url, ids, modes, kills, report, server_killed)
    finally:
        if monitor is not None:
            monitor.close()
        for proc in procs:
            if proc.proc.poll() is None:
                proc.proc.kill()
                proc.proc.wait()
        if driver is not None:
            await driver.close()
        server.kill()
        shutil.rmtree(base, ignore_errors=True)
    report.seconds = round(time.monotonic() - started, 1)
    return report


async def _check(
    driver: Any,
    url: str,
    ids: set[str],
    modes: dict[str, str],
    kills: dict[int, int],
    report: Report,
    server_killed: Sequence[int] = (),
) -> None:
    rows = await _rows(driver)
    v = report.violations
    by_id = {r.id: r for r in rows}
    v["I1 lost"] = sum(1 for i in ids if i not in by_id or by_id[i].state != "done")
    v["I2 phantom"] = sum(1 for r in rows if r.id not in ids)
    v["I7 attempts over max"] = sum(1 for r in rows if r.attempts > r.max_attempts)
    report.crashes = sum(r.crashes for r in rows)
    with SyncRedis.from_url(url) as raw:
        lines = [x.decode() for x in raw.lrange(FX, 0, -1)]
    effects: dict[tuple[str, str], list[int]] = {}
    spans: dict[str, dict[str, Any]] = {}
    for line in lines:
        kind, tag, what, _attempt, pid, ms = line.split("|")
        if kind == "fx":
            effects.setdefault((tag, what), []).append(int(ms))
        else:
            span = spans.setdefault(tag, {"grp": what, "pid": int(pid)})
            span[kind] = int(ms)
    rerun = 0
    for job_id in (i for i, m in modes.items() if m in ("run", "sleep")):
        detail = await driver.introspect.show(job_id)
        for name, rec in detail.steps.items():
            if rec.state != "completed" or rec.updated_at is None:
                continue
            done_ms = int(rec.updated_at.timestamp() * 1000)
            rerun += sum(1 for at in effects.get((job_id, name), []) if at > done_ms)
    v["I5 completed step re-ran"] = rerun
    run_ids = [i for i, m in modes.items() if m == "run"]
    report.run_jobs = len(run_ids)
    report.run_duplicates = sum(1 for i in run_ids if len(effects.get((i, "run"), [])) > 1)
    intervals = []
    for tag, span in spans.items():
        if "in" not in span:
            continue
        end = span.get("out", kills.get(span["pid"], 2**62))
        for down in server_killed:
            # open across the server's death: no renewal reached the server after it, so the
            # slot's lease lapsed unrenewed somewhere between its last renewal (before the
            # death) and LEASE_MS after it, and the restarted server may hand the slot on from
            # then (the body's "out" record only waited for the restarted server). The soak
            # cannot see that renewal, so the body counts until the death.
            if span["in"] < down < end:
                end = down
        intervals.append((span["grp"], span["in"], end, tag, span["pid"]))
    peak = 0
    for grp, s, _e, _tag, _pid in intervals:
        over = [i for i in intervals if i[0] == grp and i[1] <= s < i[2]]
        if len(over) > peak:
            peak = len(over)
            if peak > CAP:
                report.overlaps = [f"group {g} job {j} pid {p}: {b}..{e}" for g, b, e, j, p in over]
    report.max_cap_seen = peak
    v["I8 cap exceeded"] = max(0, peak - CAP)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m ultimat3_testkit.chaos_redis")
    parser.add_argument("--worker", default=None, help=argparse.SUPPRESS)
    parser.add_argument("--jobs", type=int, default=2000)
    parser.add_argument("--minutes", type=float, default=1.0)
    parser.add_argument("--workers", type=int, default=3)
    parser.add_argument("--seed", type=int, default=int.from_bytes(os.urandom(2)))
    args = parser.parse_args(argv)
    if args.worker:
        return asyncio.run(serve(args.worker))
    report = asyncio.run(
        soak(jobs=args.jobs, seconds=args.minutes * 60, workers=args.workers, seed=args.seed)
    )
    print(json.dumps({**report.__dict__, "ok": report.ok, "seed": args.seed}, indent=2))
    return 0 if report.ok else 1


if __name__ == "__main__":
    sys.exit(main())
