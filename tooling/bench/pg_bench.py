"""Side-by-side benchmark of ultimat3's Postgres job driver against PGQueuer, Oban for Python
and Procrastinate, on ONE Postgres, in one run (issue 5, "Benchmarks").

    bash tooling/bench/setup_peers.sh                      # once: .x/bench-venv
    .x/bench-venv/bin/python tooling/bench/pg_bench.py [--only ultimat3,pgqueuer] [--jobs 10000]

Every system gets a fresh database (``bench_<system>``, dropped and re-created for every
measurement) on the server named by ``--dsn`` (default ``$DATABASE_URL`` or
postgresql://postgres@127.0.0.1:5432/test). Measured, 3 times each (the table shows medians):

(a) 1,000 single enqueues, rows/s; one bulk enqueue of 1,000, rows/s.
(b) drain of ``--jobs`` pre-enqueued no-op jobs by ONE worker process (a child process), from
    the worker's start to the moment the database holds every job settled.
(c) pickup latency of an idle worker (a child process): 200 enqueues ~20 ms apart from this
    process; latency = the body's start minus the enqueue's return (its commit), both on
    CLOCK_MONOTONIC; p50 and p99.
(d) ours only: outbox relay rows/s over 10,000 staged rows.
(e) server work per no-op job during (b): commits from ``pg_stat_database.xact_commit``
    deltas, statements from ``pg_stat_statements`` when the server preloads it, else counted
    in the worker process at psycopg's cursor (``n/a`` for PGQueuer on asyncpg).

Every loop is bounded in count and time; a system that fails is reported, not retried.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import statistics
import sys
import time
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit, urlunsplit

import psycopg
from psycopg.conninfo import conninfo_to_dict, make_conninfo

sys.path.insert(0, str(Path(__file__).resolve().parent))

from bench_systems import SYSTEMS, System, Ultimat3, set_on_body

SCRIPT = Path(__file__).resolve()

DEFAULT_DSN = "postgresql://postgres@127.0.0.1:5432/test"
SINGLES = 1_000
BULK = 1_000
LATENCY_SAMPLES = 200
LATENCY_SPACING_S = 0.020
IDLE_BEFORE_LATENCY_S = 3.0
RELAY_ROWS = 10_000
POLL_TAG = "/* bench-poll */"


# --- databases ------------------------------------------------------------------------------


def dsn_for(base: str, dbname: str) -> str:
    """``base`` pointed at ``dbname``, kept a URL when it is one (asyncpg reads only URLs)."""
    if base.startswith(("postgresql://", "postgres://")):
        return urlunsplit(urlsplit(base)._replace(path=f"/{dbname}"))
    params = conninfo_to_dict(base)
    params["dbname"] = dbname
    return make_conninfo(**params)


async def admin_exec(admin_dsn: str, sql: str, params: Sequence[Any] = ()) -> list[Any]:
    async with await psycopg.AsyncConnection.connect(admin_dsn, autocommit=True) as conn:
        cur = await conn.execute(sql.encode() if not params else sql, params or None)
        return await cur.fetchall() if cur.description else []


async def fresh_db(admin_dsn: str, name: str) -> str:
    await admin_exec(admin_dsn, f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
    await admin_exec(admin_dsn, f'CREATE DATABASE "{name}"')
    return dsn_for(admin_dsn, name)


def db_name(system: str) -> str:
    return "bench_" + system.replace("-", "_")


async def drop_db(admin_dsn: str, name: str) -> None:
    await admin_exec(admin_dsn, f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


async def xact_commits(admin_dsn: str, name: str) -> int:
    """``xact_commit`` of database ``name`` once its backends have gone (a backend flushes its
    counts when it exits) and the figure has stopped moving (bounded: 3 s)."""
    deadline = time.monotonic() + 3.0
    last: int | None = None
    while True:
        rows = await admin_exec(
            admin_dsn,
            "SELECT (SELECT count(*) FROM pg_stat_activity WHERE datname = %s), "
            "(SELECT xact_commit FROM pg_stat_database WHERE datname = %s)",
            (name, name),
        )
        backends, commits = int(rows[0][0]), int(rows[0][1] or 0)
        if (backends == 0 and commits == last) or time.monotonic() > deadline:
            return commits
        last = commits if backends == 0 else None
        await asyncio.sleep(0.15)


async def pgss_available(dsn: str) -> bool:
    """Whether pg_stat_statements can be created AND read (it needs shared_preload_libraries)."""
    try:
        async with await psycopg.AsyncConnection.connect(dsn, autocommit=True) as conn:
            await conn.execute("CREATE EXTENSION IF NOT EXISTS pg_stat_statements")
            await conn.execute("SELECT 1 FROM pg_stat_statements LIMIT 1")
    except psycopg.Error:
        return False
    return True


async def pgss_calls(dsn: str, name: str, *, reset: bool) -> int:
    async with await psycopg.AsyncConnection.connect(dsn, autocommit=True) as conn:
        if reset:
            await conn.execute("SELECT pg_stat_statements_reset()")
            return 0
        cur = await conn.execute(
            "SELECT coalesce(sum(s.calls), 0) FROM pg_stat_statements s "
            "JOIN pg_database d ON d.oid = s.dbid WHERE d.datname = %s "
            "AND s.query NOT LIKE '%%bench-poll%%' AND s.query NOT LIKE '%%pg_stat_statements%%'",
            (name,),
        )
        row = await cur.fetchone()
        return int(row[0]) if row else 0


# --- the worker process (child) ---------------------------------------------------------------


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


async def child_main(args: argparse.Namespace) -> None:
    system = SYSTEMS[args.child]()
    if args.mode == "drain":
        await child_drain(system, args.dsn, args.count, args.timeout)
    else:
        await child_latency(system, args.dsn, args.count, args.timeout)


# --- the parent: measurements -----------------------------------------------------------------


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


async def measure_enqueue(system: System, dsn: str) -> dict[str, float]:
    await system.install(dsn)
    await system.open(dsn)
    try:
        for i in range(20):  # warm-up: pool open, prepared statements
            await system.enqueue_one(10_000_000 + i)
        await system.enqueue_bulk(list(range(20_000_000, 20_000_000 + BULK)))
        t0 = time.perf_counter()
        for i in range(SINGLES):
            await system.enqueue_one(i)
        singles = SINGLES / (time.perf_counter() - t0)
        batch = list(range(30_000_000, 30_000_000 + BULK))
        t0 = time.perf_counter()
        await system.enqueue_bulk(batch)
        bulk = BULK / (time.perf_counter() - t0)
    finally:
        await system.close()
    return {"single": singles, "bulk": bulk}


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
    return {"p50": percentile(lat, 50), "p99": percentile(lat, 99)}


async def measure_relay(dsn: str) -> tuple[float, str]:
    ours = Ultimat3()
    await ours.install(dsn)
    await ours.open(dsn)
    try:
        return await ours.relay(dsn, RELAY_ROWS)
    finally:
        await ours.close()


# --- the parent: orchestration and the table ---------------------------------------------------


@dataclass(frozen=True)
class Metric:
    key: str
    label: str
    higher_is_better: bool
    target: str
    fmt: str = "{:,.0f}"


METRICS: tuple[Metric, ...] = (
    Metric("single", "single enqueue, rows/s", True, ">= best peer"),
    Metric("bulk", "bulk enqueue (1 call of 1,000), rows/s", True, ">= best peer"),
    Metric("drain", "drain no-op jobs, 1 process, jobs/s", True, ">= best peer (aim 1.5x)"),
    Metric("p50", "idle pickup p50, ms", False, "<= 3 ms", "{:.1f}"),
    Metric("p99", "idle pickup p99, ms", False, "<= 5 ms", "{:.1f}"),
    Metric("relay", "outbox relay 10,000 rows, rows/s", True, ">= 10,000"),
    Metric("commits", "commits per no-op job (drain)", False, "<= 0.2", "{:.3f}"),
    Metric("statements", "statements per no-op job (drain)", False, "<= 0.3", "{:.3f}"),
    Metric("cpu", "worker process CPU per job, ms (drain)", False, "-", "{:.3f}"),
)


@dataclass
class Results:
    samples: dict[tuple[str, str], list[float]] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)
    loads: list[float] = field(default_factory=list)

    def add(self, system: str, key: str, value: float | None) -> None:
        if value is not None:
            self.samples.setdefault((system, key), []).append(value)

    def median(self, system: str, key: str) -> float | None:
        got = self.samples.get((system, key))
        return statistics.median(got) if got else None


async def guarded(
    results: Results, label: str, fn: Callable[[], Awaitable[dict[str, Any]]]
) -> dict[str, Any]:
    t0 = time.perf_counter()
    load = os.getloadavg()[0]
    results.loads.append(load)
    try:
        out = await fn()
    except Exception as exc:
        note = f"{label}: FAILED {type(exc).__name__}: {str(exc)[:400]}"
        print(f"  {note}", flush=True)
        results.notes.append(note)
        return {}
    shown = ", ".join(
        f"{k}={v:,.3f}" if isinstance(v, float) else f"{k}={v}" for k, v in out.items()
    )
    took = time.perf_counter() - t0
    print(f"  {label}: {shown} ({took:.1f} s, load {load:.2f})", flush=True)
    return out


def render_table(results: Results, systems: list[str]) -> str:
    peers = [s for s in systems if not s.startswith("ultimat3")]
    header = ["metric", *systems, "ours / best peer", "target"]
    rows: list[list[str]] = []
    for m in METRICS:
        row = [m.label]
        for s in systems:
            v = results.median(s, m.key)
            row.append("n/a" if v is None else m.fmt.format(v))
        ours = results.median("ultimat3", m.key)
        peer_values = [v for p in peers if (v := results.median(p, m.key)) is not None]
        if ours is None or not peer_values:
            row.append("-")
        else:
            best = max(peer_values) if m.higher_is_better else min(peer_values)
            ratio = ours / best if best else float("inf")
            better = ratio >= 1 if m.higher_is_better else ratio <= 1
            row.append(f"{ratio:.2f}x {'ok' if better else 'behind'}")
        row.append(m.target)
        rows.append(row)
    widths = [max(len(r[i]) for r in [header, *rows]) for i in range(len(header))]
    line = "| " + " | ".join(h.ljust(w) for h, w in zip(header, widths, strict=True)) + " |"
    sep = "|" + "|".join("-" * (w + 2) for w in widths) + "|"
    body = [
        "| " + " | ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)) + " |" for r in rows
    ]
    return "\n".join([line, sep, *body])


async def parent_main(args: argparse.Namespace) -> int:
    systems = [s.strip() for s in args.only.split(",") if s.strip()]
    unknown = [s for s in systems if s not in SYSTEMS]
    if unknown:
        print(f"unknown system(s): {', '.join(unknown)}; known: {', '.join(SYSTEMS)}")
        return 2
    admin = args.dsn
    started = time.perf_counter()
    results = Results()
    probe = await fresh_db(admin, "bench_probe")
    use_pgss = await pgss_available(probe)
    await drop_db(admin, "bench_probe")
    info = await admin_exec(
        admin, "SELECT version(), current_setting('fsync'), current_setting('synchronous_commit')"
    )
    print(f"server: {info[0][0]}; fsync={info[0][1]}; synchronous_commit={info[0][2]}")
    print(f"cpus: {os.cpu_count()}; python: {sys.version.split()[0]}; event loop: asyncio")
    print(f"ultimat3 tree: {git_state()}")
    if use_pgss:
        print("statements: pg_stat_statements")
    else:
        results.notes.append(
            "pg_stat_statements is not loadable on this server (shared_preload_libraries is "
            "empty): statements per job are counted in the worker process at the client "
            "library (psycopg cursor execute, asyncpg execute/fetch*; top-level statements, "
            "as pg_stat_statements would count them); commits are "
            "pg_stat_database.xact_commit deltas of the system's own database"
        )
        print(f"note: {results.notes[-1]}")
    for s in systems:
        print(f"settings {s}: {SYSTEMS[s]().settings}")
    for rep in range(1, args.repeat + 1):
        print(f"--- run {rep} of {args.repeat}", flush=True)
        for name in systems:
            system = SYSTEMS[name]()
            db = db_name(name)

            async def enqueue(system: System = system, db: str = db) -> dict[str, Any]:
                return await measure_enqueue(system, await fresh_db(admin, db))

            async def drain(system: System = system, db: str = db) -> dict[str, Any]:
                dsn = await fresh_db(admin, db)
                return await measure_drain(system, admin, db, dsn, args.jobs, use_pgss)

            async def latency(system: System = system, db: str = db) -> dict[str, Any]:
                return await measure_latency(system, await fresh_db(admin, db))

            steps = (("enqueue", enqueue), ("drain", drain), ("latency", latency))
            if name == "ultimat3-floor":  # the same enqueue as ours; no wake of its own
                steps = (("drain", drain),)
            for label, fn in steps:
                for key, value in (await guarded(results, f"{name} {label}", fn)).items():
                    results.add(name, key, value)
        if "ultimat3" in systems:

            async def relay() -> dict[str, Any]:
                rate, what = await measure_relay(await fresh_db(admin, db_name("ultimat3")))
                if what not in results.notes:
                    results.notes.append(f"relay measured as: {what}")
                return {"relay": rate}

            for key, value in (await guarded(results, "ultimat3 relay", relay)).items():
                results.add("ultimat3", key, value)
    for name in systems:
        await drop_db(admin, db_name(name))
    print()
    print(
        f"medians of {args.repeat} runs; --jobs {args.jobs}; "
        f"total {time.perf_counter() - started:.0f} s"
    )
    if results.loads:
        print(
            f"1-min load average at the start of each measurement: min "
            f"{min(results.loads):.2f}, median {statistics.median(results.loads):.2f}, max "
            f"{max(results.loads):.2f} (on {os.cpu_count()} cpus; other work on the machine "
            "shows up as noise)"
        )
    print(render_table(results, systems))
    for note in results.notes:
        print(f"- {note}")
    return 0


def git_state() -> str:
    """The commit the editable ultimat3 install runs, and whether its jobs package is dirty."""
    import subprocess

    root = SCRIPT.parents[2]
    try:
        head = subprocess.run(
            ["git", "-C", str(root), "rev-parse", "--short", "HEAD"],
            capture_output=True,
            text=True,
            check=True,
            timeout=10,
        ).stdout.strip()
        dirty = subprocess.run(
            ["git", "-C", str(root), "status", "--porcelain", "packages/core", "packages/jobs"],
            capture_output=True,
            text=True,
            check=True,
            timeout=10,
        ).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return "unknown (no git)"
    return f"{head}{' + uncommitted changes in packages/core|jobs' if dirty else ''}"


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--only", default=",".join(SYSTEMS), help="systems, comma-separated")
    p.add_argument("--jobs", type=int, default=10_000, help="jobs to drain (default 10000)")
    p.add_argument("--repeat", type=int, default=3, help="runs per measurement (median shown)")
    p.add_argument(
        "--dsn",
        default=os.environ.get("DATABASE_URL", DEFAULT_DSN),
        help="a database on the server to use for CREATE/DROP DATABASE bench_*",
    )
    p.add_argument("--child", help=argparse.SUPPRESS)
    p.add_argument("--mode", choices=("drain", "latency"), help=argparse.SUPPRESS)
    p.add_argument("--count", type=int, default=0, help=argparse.SUPPRESS)
    p.add_argument("--timeout", type=float, default=60.0, help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    if args.jobs < 1 or args.repeat < 1:
        p.error("--jobs and --repeat must be >= 1")
    return args


def main() -> int:
    args = parse_args()
    if args.child:
        asyncio.run(child_main(args))
        return 0
    return asyncio.run(parent_main(args))


if __name__ == "__main__":
    raise SystemExit(main())
