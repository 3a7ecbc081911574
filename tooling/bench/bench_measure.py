"""The measurements: the worker process (a child of ``pg_bench.py``) and what the parent times
around it. Every wait is bounded."""

from __future__ import annotations

import asyncio
import contextlib
import json
import statistics
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import psycopg
from bench_db import pgss_calls, xact_commits
from bench_systems import System, Ultimat3, set_on_body

SCRIPT = Path(__file__).resolve().with_name("pg_bench.py")
SINGLES = 1_000
BULK = 1_000
ENQUEUE_ROUNDS = 5  # interleaved rounds of (a): 1,000 singles and one bulk call per system each
"""Bulk samples per measurement: one call's 20-50 ms is at the mercy of one GC pass or one
scheduling hiccup on a shared 2-core box, so each measurement takes the median of five calls
(fresh keys each), for every system alike."""
LATENCY_SAMPLES = 200
LATENCY_SPACING_S = 0.300  # past the 250 ms notify window: every pickup starts from an idle worker
IDLE_BEFORE_LATENCY_S = 3.0
RELAY_ROWS = 10_000
POLL_TAG = "/* bench-poll */"


class StatementCounter:
    """Counts statements sent through psycopg's async cursors in this process, except on one
    excluded connection (the bench's own poll)."""

    def __init__(self) -> None:
        self.count = 0
        self.excluded: object = None

    def install(self) -> None:
        counter = self
        cursor_cls: Any = psycopg.AsyncCursor
        execute = cursor_cls.execute
        executemany = cursor_cls.executemany

        async def counted_execute(self: Any, *args: Any, **kwargs: Any) -> Any:
            if self.connection is not counter.excluded:
                counter.count += 1
            return await execute(self, *args, **kwargs)

        async def counted_executemany(self: Any, query: Any, params_seq: Any, **kw: Any) -> Any:
            params_seq = list(params_seq)
            if self.connection is not counter.excluded:
                counter.count += len(params_seq)
            return await executemany(self, query, params_seq, **kw)

        cursor_cls.execute = counted_execute
        cursor_cls.executemany = counted_executemany
        self._install_asyncpg()

    def _install_asyncpg(self) -> None:
        """The same count for asyncpg connections (PGQueuer): one per execute / fetch call."""
        try:
            from asyncpg.connection import Connection
        except ImportError:
            return
        counter = self
        cls: Any = Connection
        for method in ("execute", "fetch", "fetchrow", "fetchval"):
            original = getattr(cls, method)

            def make(original: Any) -> Any:
                async def counted(self: Any, *args: Any, **kwargs: Any) -> Any:
                    counter.count += 1
                    return await original(self, *args, **kwargs)

                return counted

            setattr(cls, method, make(original))
        executemany = cls.executemany

        async def counted_many(self: Any, command: Any, args: Any, **kwargs: Any) -> Any:
            args = list(args)
            counter.count += len(args)
            return await executemany(self, command, args, **kwargs)

        cls.executemany = counted_many


def emit(payload: dict[str, Any]) -> None:
    sys.stdout.write(json.dumps(payload) + "\n")
    sys.stdout.flush()


async def child_drain(system: System, dsn: str, jobs: int, timeout_s: float) -> None:
    counter = StatementCounter()
    counter.install()
    seen = 0
    all_started = asyncio.Event()

    def on_body(n: int) -> None:
        nonlocal seen
        seen += 1
        if seen >= jobs:
            all_started.set()

    set_on_body(on_body)
    poll = await psycopg.AsyncConnection.connect(dsn, autocommit=True)
    counter.excluded = poll
    polls = 0
    t0 = time.perf_counter()
    cpu0 = time.process_time()
    worker = await system.start_worker(dsn)
    try:
        await asyncio.wait_for(all_started.wait(), timeout=timeout_s)
        deadline = time.monotonic() + 30
        while True:  # the tail only: every body has run; wait for the settles to land
            cur = await poll.execute(f"{POLL_TAG} {system.remaining_sql}".encode())
            polls += 1
            row = await cur.fetchone()
            if row is not None and int(row[0]) == 0:
                break
            if time.monotonic() > deadline:
                raise TimeoutError(f"{row[0] if row else '?'} jobs never settled")
            await asyncio.sleep(0.005)
        elapsed = time.perf_counter() - t0
        cpu = time.process_time() - cpu0
        statements = counter.count
    finally:
        await worker.stop()
        await poll.close()
    emit(
        {
            "event": "result",
            "seconds": elapsed,
            "jobs_per_s": jobs / elapsed,
            "bodies": seen,
            "statements": statements,
            "own_commits": polls,
            "cpu_ms_per_job": cpu * 1000 / jobs,
            "ours_from": getattr(sys.modules.get("ultimat3.jobs"), "__file__", None),
        }
    )


async def child_latency(system: System, dsn: str, samples: int, timeout_s: float) -> None:
    starts: dict[int, int] = {}
    done = asyncio.Event()

    def on_body(n: int) -> None:
        starts.setdefault(n, time.monotonic_ns())
        if len(starts) >= samples:
            done.set()

    set_on_body(on_body)
    worker = await system.start_worker(dsn)
    try:
        emit({"event": "ready"})
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(done.wait(), timeout=timeout_s)
    finally:
        emit({"event": "result", "starts": {str(k): v for k, v in starts.items()}})
        await worker.stop()


@dataclass
class Child:
    proc: asyncio.subprocess.Process
    stderr: list[bytes] = field(default_factory=list)
    reader: asyncio.Future[None] | None = None

    async def line(self, within_s: float) -> dict[str, Any]:
        assert self.proc.stdout is not None
        deadline = time.monotonic() + within_s
        while True:
            left = deadline - time.monotonic()
            if left <= 0:
                raise TimeoutError("the worker process said nothing in time")
            raw = await asyncio.wait_for(self.proc.stdout.readline(), timeout=left)
            if not raw:
                err = b"".join(self.stderr).decode(errors="replace")[-3000:]
                raise RuntimeError(f"the worker process ended early:\n{err}")
            text = raw.decode().strip()
            if text.startswith("{"):
                return dict(json.loads(text))

    async def finish(self, within_s: float = 60) -> None:
        try:
            await asyncio.wait_for(self.proc.wait(), timeout=within_s)
        except TimeoutError:
            self.proc.kill()
            await self.proc.wait()


async def spawn(system: str, dsn: str, mode: str, count: int, limit_s: float) -> Child:
    proc = await asyncio.create_subprocess_exec(
        sys.executable,
        str(SCRIPT),
        "--child",
        system,
        "--mode",
        mode,
        "--dsn",
        dsn,
        "--count",
        str(count),
        "--timeout",
        str(limit_s),
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    child = Child(proc)

    async def drain_stderr() -> None:
        assert proc.stderr is not None
        while chunk := await proc.stderr.read(65536):
            child.stderr.append(chunk)
            if len(child.stderr) > 200:
                del child.stderr[:100]

    child.reader = asyncio.ensure_future(drain_stderr())
    return child


async def measure_enqueue_interleaved(
    systems: dict[str, System], dsns: dict[str, str], rounds: int = ENQUEUE_ROUNDS
) -> dict[str, dict[str, float]]:
    """(a) for every system at once, in turns: each round runs 1,000 single enqueues of each
    system, one system after another (the order reversed every other round: ABC CBA ...), then
    one ``enqueue_many(1,000)`` of each, the same way. A system's figure is the median of its
    rounds. Measured one system after another, seconds apart, the figures of a shared VM whose
    speed moves minute to minute differ by more than the gap between the systems; in turns,
    every system meets the same machine state."""
    opened: list[System] = []
    try:
        for name, system in systems.items():
            await system.install(dsns[name])
            await system.open(dsns[name])
            opened.append(system)
            for i in range(20):  # warm-up: pool open, prepared statements
                await system.enqueue_one(10_000_000 + i)
            await system.enqueue_bulk(list(range(20_000_000, 20_000_000 + BULK)))
        singles: dict[str, list[float]] = {name: [] for name in systems}
        bulks: dict[str, list[float]] = {name: [] for name in systems}
        order = list(systems)
        for turn in range(rounds):
            seq = order if turn % 2 == 0 else order[::-1]
            for name in seq:
                base = 1_000_000 * (turn + 1)
                t0 = time.perf_counter()
                for i in range(SINGLES):
                    await systems[name].enqueue_one(base + i)
                singles[name].append(SINGLES / (time.perf_counter() - t0))
            for name in seq:
                base = 30_000_000 + turn * BULK
                batch = list(range(base, base + BULK))
                t0 = time.perf_counter()
                await systems[name].enqueue_bulk(batch)
                bulks[name].append(BULK / (time.perf_counter() - t0))
    finally:
        for system in opened:
            await system.close()
    return {
        name: {"single": statistics.median(singles[name]), "bulk": statistics.median(bulks[name])}
        for name in systems
    }


async def measure_drain(
    system: System, admin_dsn: str, db: str, dsn: str, jobs: int, use_pgss: bool
) -> dict[str, float | None]:
    await system.install(dsn)
    await system.open(dsn)
    try:
        for start in range(0, jobs, BULK):
            await system.enqueue_bulk(list(range(start, min(jobs, start + BULK))))
    finally:
        await system.close()
    async with await psycopg.AsyncConnection.connect(dsn, autocommit=True) as conn:
        await conn.execute("VACUUM ANALYZE")
    if use_pgss:
        await pgss_calls(dsn, db, reset=True)
    before = await xact_commits(admin_dsn, db)
    timeout = max(60.0, jobs / 100)
    child = await spawn(system.name, dsn, "drain", jobs, timeout)
    try:
        result = await child.line(timeout + 60)
    finally:
        await child.finish()
    after = await xact_commits(admin_dsn, db)
    commits = after - before - int(result["own_commits"])
    if result.get("ours_from"):
        print(f"    (the worker ran ultimat3.jobs from {result['ours_from']})", flush=True)
    statements = result["statements"]
    if use_pgss:
        statements = await pgss_calls(dsn, db, reset=False)
    return {
        "drain": float(result["jobs_per_s"]),
        "commits": commits / jobs,
        "statements": None if statements is None else float(statements) / jobs,
        "cpu": float(result["cpu_ms_per_job"]),
    }


def percentile(values: list[float], p: float) -> float:
    ordered = sorted(values)
    rank = max(1, min(len(ordered), round(p / 100 * len(ordered) + 0.4999)))
    return ordered[rank - 1]


async def measure_latency(system: System, dsn: str) -> dict[str, float]:
    await system.install(dsn)
    timeout = IDLE_BEFORE_LATENCY_S + LATENCY_SAMPLES * LATENCY_SPACING_S + 30
    child = await spawn(system.name, dsn, "latency", LATENCY_SAMPLES, timeout)
    committed: dict[int, int] = {}
    try:
        ready = await child.line(60)
        assert ready["event"] == "ready", ready
        await system.open(dsn)
        try:
            await asyncio.sleep(IDLE_BEFORE_LATENCY_S)  # let the worker go idle
            begin = time.monotonic()
            for i in range(LATENCY_SAMPLES):
                await system.enqueue_one(i)
                committed[i] = time.monotonic_ns()
                wait = begin + (i + 1) * LATENCY_SPACING_S - time.monotonic()
                if wait > 0:
                    await asyncio.sleep(wait)
        finally:
            await system.close()
        result = await child.line(timeout + 10)
    finally:
        await child.finish()
    starts = {int(k): int(v) for k, v in result["starts"].items()}
    lat = [(starts[i] - committed[i]) / 1e6 for i in committed if i in starts]
    if len(lat) < LATENCY_SAMPLES:
        raise RuntimeError(f"only {len(lat)} of {LATENCY_SAMPLES} jobs were picked up")
    # p99 of 200 is the third-worst pickup; the worst is printed beside it
    return {"p50": percentile(lat, 50), "p99": percentile(lat, 99), "max": max(lat)}


async def measure_relay(dsn: str) -> tuple[float, str]:
    ours = Ultimat3()
    await ours.install(dsn)
    await ours.open(dsn)
    try:
        return await ours.relay(dsn, RELAY_ROWS)
    finally:
        await ours.close()
