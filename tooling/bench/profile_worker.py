"""The worker's per-job cost, measured on its own (not the side-by-side table: pg_bench.py is).

    uv run python tooling/bench/profile_worker.py drain [--jobs 10000] [--repeat 3]
    uv run python tooling/bench/profile_worker.py drain --profile /tmp/worker.prof  # cProfile
    uv run python tooling/bench/profile_worker.py latency [--samples 200]

``drain``: per repeat, a fresh database gets ``--jobs`` no-op jobs (``enqueue_many`` of 1,000),
``VACUUM ANALYZE``, then ``job_worker`` (defaults, or ``--worker '{"claim_batch": 50}'``) drains
them in THIS process; then the same again for the driver alone in the loop a batching worker would
run (``claim(limit=50)`` -> bodies -> one ``ack_many``: the "floor"). Both are timed from the
worker's start to the moment every row is ``done``; the medians and ``worker / floor`` are
printed, with statements (counted at psycopg's cursor) and commits (``pg_stat_database``) per job.
The machine is shared: compare the worker with the floor of the same run, never across runs.

``latency``: a worker in a child process (the wake started by ``job_worker.start()``), idle
3 s, then ``--samples`` single enqueues ``--spacing-ms`` apart (default 20) from this process,
through a driver with ``--notify-window-ms`` (default: the driver's 250 ms); latency is the body's
first line minus the enqueue's return (its commit), both ``CLOCK_MONOTONIC``.

Databases are ``prof_worker_<pid>`` on the server of ``--dsn`` (default ``$DATABASE_URL``, else
postgresql://postgres@127.0.0.1:5432/test), dropped at the end.
"""

from __future__ import annotations

import argparse
import asyncio
import cProfile
import json
import os
import pstats
import statistics
import sys
import time
from collections.abc import Awaitable, Callable
from typing import Any
from urllib.parse import urlsplit, urlunsplit

import psycopg
from psycopg.conninfo import make_conninfo
from pydantic import BaseModel

from ultimat3.core import swap_adapter
from ultimat3.jobs import JobContext, Step, job, job_worker
from ultimat3.jobs.adapter import JOB_DRIVER
from ultimat3.jobs.postgres import AckRequest, migrate, postgres_job_driver

DEFAULT_DSN = "postgresql://postgres@127.0.0.1:5432/test"
FLOOR_BATCH = 50


class Noop(BaseModel):
    n: int


_on_body: Callable[[int], None] = lambda n: None  # noqa: E731


async def noop_body(input: Noop, step: Step, ctx: JobContext) -> None:
    _on_body(input.n)


noop = job(input=Noop, name="bench_noop", idempotency_key=lambda i: f"bench:{i.n}", run=noop_body)


def dsn_for(base: str, dbname: str) -> str:
    if base.startswith(("postgresql://", "postgres://")):
        return urlunsplit(urlsplit(base)._replace(path=f"/{dbname}"))
    return make_conninfo(base, dbname=dbname)


async def admin(dsn: str, sql: str, params: tuple[Any, ...] = ()) -> list[Any]:
    async with await psycopg.AsyncConnection.connect(dsn, autocommit=True) as conn:
        cur = await conn.execute(sql.encode() if not params else sql, params or None)
        return await cur.fetchall() if cur.description else []


async def fresh_db(admin_dsn: str, name: str) -> str:
    await admin(admin_dsn, f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
    await admin(admin_dsn, f'CREATE DATABASE "{name}"')
    dsn = dsn_for(admin_dsn, name)
    await migrate(dsn)
    return dsn


async def commits_of(admin_dsn: str, name: str) -> int:
    await asyncio.sleep(0.6)  # the backends flush their counts as they go idle / exit
    rows = await admin(
        admin_dsn, "SELECT xact_commit FROM pg_stat_database WHERE datname = %s", (name,)
    )
    return int(rows[0][0] or 0)


class Statements:
    """Statements sent through psycopg's async cursors in this process (bar one connection)."""

    def __init__(self) -> None:
        self.count = 0
        self.excluded: object = None
        self.kinds: dict[str, int] = {}
        counter = self
        cls: Any = psycopg.AsyncCursor
        execute = cls.execute

        async def counted(cur: Any, query: Any, *args: Any, **kwargs: Any) -> Any:
            if cur.connection is not counter.excluded:
                counter.count += 1
                text = query if isinstance(query, str) else str(query)
                kind = " ".join(text.split())[:48]
                counter.kinds[kind] = counter.kinds.get(kind, 0) + 1
            return await execute(cur, query, *args, **kwargs)

        cls.execute = counted


async def enqueue_all(dsn: str, jobs: int) -> None:
    driver = postgres_job_driver(dsn)
    try:
        with swap_adapter(JOB_DRIVER, driver):
            for start in range(0, jobs, 1000):
                await noop.enqueue_many([{"n": n} for n in range(start, min(jobs, start + 1000))])
    finally:
        await driver.close()
    await admin(dsn, "VACUUM ANALYZE")


async def run_ours(dsn: str, overrides: dict[str, Any]) -> Callable[[], Awaitable[None]]:
    driver = postgres_job_driver(dsn)
    worker = job_worker(jobs=[noop], driver=driver, handle_signals=False, **overrides)
    await worker.start()

    async def stop() -> None:
        await worker.stop()
        await driver.close()

    return stop


async def run_floor(dsn: str, overrides: dict[str, Any]) -> Callable[[], Awaitable[None]]:
    driver = postgres_job_driver(dsn)
    stopping = asyncio.Event()

    async def loop() -> None:
        idle = 0.01
        while not stopping.is_set():
            claimed = await driver.claim(
                queues=["default"],
                limit=int(overrides.get("floor_batch", FLOOR_BATCH)),
                worker_id="floor",
                visibility_timeout_ms=30_000,
            )
            if not claimed:
                try:
                    await asyncio.wait_for(stopping.wait(), timeout=idle)
                except TimeoutError:
                    idle = min(idle * 2, 0.25)
                continue
            idle = 0.01
            for one in claimed:
                _on_body(int(one.payload["n"]))
            await driver.ack_many([AckRequest(c.id, c.claim) for c in claimed], worker_id="floor")

    task = asyncio.ensure_future(loop())

    async def stop() -> None:
        stopping.set()
        await task
        await driver.close()

    return stop


async def drain_once(
    admin_dsn: str,
    db: str,
    jobs: int,
    start: Callable[[str, dict[str, Any]], Awaitable[Callable[[], Awaitable[None]]]],
    overrides: dict[str, Any],
    statements: Statements,
    profile: cProfile.Profile | None,
) -> dict[str, float]:
    global _on_body
    dsn = await fresh_db(admin_dsn, db)
    await enqueue_all(dsn, jobs)
    poll = await psycopg.AsyncConnection.connect(dsn, autocommit=True)
    statements.excluded = poll
    seen = 0
    all_ran = asyncio.Event()

    def on_body(n: int) -> None:
        nonlocal seen
        seen += 1
        if seen >= jobs:
            all_ran.set()

    _on_body = on_body
    before = await commits_of(admin_dsn, db)
    polls = 0
    n0 = statements.count
    cpu0 = time.process_time()
    t0 = time.perf_counter()
    if profile is not None:
        profile.enable()
    stop = await start(dsn, overrides)
    try:
        await asyncio.wait_for(all_ran.wait(), timeout=max(60, jobs / 100))
        while True:
            cur = await poll.execute(b"SELECT count(*) FROM x_jobs WHERE state <> 'done'")
            polls += 1
            row = await cur.fetchone()
            if row is not None and row[0] == 0:
                break
            await asyncio.sleep(0.005)
        elapsed = time.perf_counter() - t0
        cpu = time.process_time() - cpu0
        sent = statements.count - n0
    finally:
        if profile is not None:
            profile.disable()
        await stop()
        await poll.close()
    after = await commits_of(admin_dsn, db)
    return {
        "jobs_per_s": jobs / elapsed,
        "cpu_ms": cpu * 1000 / jobs,
        "statements": sent / jobs,
        "commits": (after - before - polls) / jobs,
    }


async def drain_main(args: argparse.Namespace) -> None:
    overrides = json.loads(args.worker) if args.worker else {}
    db = f"prof_worker_{os.getpid()}"
    statements = Statements()
    profile = cProfile.Profile() if args.profile else None
    rows: dict[str, list[dict[str, float]]] = {"worker": [], "floor": []}
    try:
        for rep in range(args.repeat):
            for label, start in (("worker", run_ours), ("floor", run_floor)):
                if label == "floor" and args.no_floor:
                    continue
                got = await drain_once(
                    args.dsn,
                    db,
                    args.jobs,
                    start,
                    overrides if label == "worker" else {"floor_batch": args.floor_batch},
                    statements,
                    profile if label == "worker" else None,
                )
                rows[label].append(got)
                shown = ", ".join(f"{k}={v:,.3f}" for k, v in got.items())
                print(f"run {rep + 1} {label}: {shown} (load {os.getloadavg()[0]:.2f})", flush=True)
    finally:
        await admin(args.dsn, f'DROP DATABASE IF EXISTS "{db}" WITH (FORCE)')
    print(f"medians of {args.repeat}; --jobs {args.jobs}; worker {overrides or 'defaults'}")
    for label, got in rows.items():
        if got:
            med = {k: statistics.median(g[k] for g in got) for k in got[0]}
            print(f"  {label}: " + ", ".join(f"{k}={v:,.3f}" for k, v in med.items()))
    if rows["floor"] and rows["worker"]:
        ratio = statistics.median(g["jobs_per_s"] for g in rows["worker"]) / statistics.median(
            g["jobs_per_s"] for g in rows["floor"]
        )
        print(f"  worker / floor: {ratio:.2f}")
    if args.kinds:
        for kind, n in sorted(statements.kinds.items(), key=lambda kv: -kv[1])[:12]:
            print(f"  {n:7d}  {kind}")
    if profile is not None:
        profile.dump_stats(args.profile)
        stats = pstats.Stats(profile).sort_stats("tottime")
        stats.print_stats(35)


# --- the engine alone, over a stub driver that answers at once -------------------------------


class _StubSteps:
    async def load(self, job_id: str) -> dict[str, Any]:
        return {}

    async def record(self, job_id: str, name: str, **kw: Any) -> bool:
        return True


class StubDriver:
    """Hands out ``jobs`` no-op claims and settles everything at once: what is left is the
    engine's own per-job cost (no database, no round trip)."""

    name = "stub"

    def __init__(self, jobs: int) -> None:
        self.left = jobs
        self.steps = _StubSteps()
        self.n = 0
        self.claims = 0
        self.acks = 0

    async def now_ms(self) -> int:
        return int(time.time() * 1000)

    def owns_connection(self, connection: object) -> bool:
        return False

    async def enqueue(self, request: Any, *, connection: object = None) -> Any:
        raise NotImplementedError

    async def enqueue_many(self, requests: Any, *, connection: object = None) -> Any:
        raise NotImplementedError

    async def claim(self, *, queues: Any, limit: int, worker_id: str, **kw: Any) -> list[Any]:
        from ultimat3.jobs.adapter import ClaimedJob

        self.claims += 1
        take = min(limit, self.left)
        self.left -= take
        now = int(time.time() * 1000)
        out = []
        for _ in range(take):
            n = self.n
            self.n += 1
            out.append(
                ClaimedJob(
                    id=f"00000000-0000-7000-8000-{n:012d}",
                    run_id=f"00000000-0000-7000-9000-{n:012d}",
                    name="bench_noop",
                    queue="default",
                    payload={"n": n},
                    attempt=1,
                    max_attempts=3,
                    claim=f"00000000-0000-4000-8000-{n:012d}",
                    worker_id=worker_id,
                    claimed_at_ms=now,
                    lease_expires_at_ms=now + 30_000,
                    idempotency_key=f"bench:{n}",
                )
            )
        return out

    async def ack(self, job_id: str, **kw: Any) -> bool:
        self.acks += 1
        return True

    async def ack_many(self, acks: Any, *, worker_id: str) -> list[bool]:
        self.acks += 1
        return [True] * len(acks)

    async def heartbeat_many(self, leases: Any, **kw: Any) -> list[bool]:
        return [True] * len(leases)

    async def nack(self, job_id: str, **kw: Any) -> bool:
        return True

    async def heartbeat(self, job_id: str, **kw: Any) -> bool:
        return True

    async def progress(self, job_id: str, **kw: Any) -> bool:
        return True

    async def wake_waiters(self, event: str) -> int:
        return 0

    async def stats(self) -> list[Any]:
        return []

    async def close(self) -> None:
        return None


async def engine_main(args: argparse.Namespace) -> None:
    global _on_body
    overrides = json.loads(args.worker) if args.worker else {}
    profile = cProfile.Profile() if args.profile else None
    rates: list[float] = []
    for rep in range(args.repeat):
        driver = StubDriver(args.jobs)
        seen = 0
        all_ran = asyncio.Event()

        def on_body(n: int, all_ran: asyncio.Event = all_ran) -> None:
            nonlocal seen
            seen += 1
            if seen >= args.jobs:
                all_ran.set()

        _on_body = on_body
        worker = job_worker(jobs=[noop], driver=driver, handle_signals=False, **overrides)  # type: ignore[arg-type]
        cpu0 = time.process_time()
        if profile is not None:
            profile.enable()
        await worker.start()
        await all_ran.wait()
        while worker.stats().completed < args.jobs:  # noqa: ASYNC110 - the settles' tail
            await asyncio.sleep(0)
        if profile is not None:
            profile.disable()
        cpu = time.process_time() - cpu0
        await worker.stop()
        rates.append(cpu * 1e6 / args.jobs)
        print(
            f"run {rep + 1}: {cpu * 1e6 / args.jobs:.1f} us CPU per job ({driver.claims} claims, "
            f"{driver.acks} ack calls)",
            flush=True,
        )
    print(f"median: {statistics.median(rates):.1f} us CPU per job (the engine alone)")
    if profile is not None:
        profile.dump_stats(args.profile)
        pstats.Stats(profile).sort_stats("tottime").print_stats(40)


# --- latency --------------------------------------------------------------------------------


async def latency_child(dsn: str, samples: int, overrides: dict[str, Any]) -> None:
    global _on_body
    starts: dict[int, int] = {}
    done = asyncio.Event()

    def on_body(n: int) -> None:
        if n < 0:
            return  # the parent's warm-up enqueue
        starts.setdefault(n, time.monotonic_ns())
        if len(starts) >= samples:
            done.set()

    _on_body = on_body
    stop = await run_ours(dsn, overrides)
    print(json.dumps({"event": "ready"}), flush=True)
    try:
        await asyncio.wait_for(done.wait(), timeout=samples * 0.02 + 60)
    finally:
        print(json.dumps({"event": "result", "starts": starts}), flush=True)
        await stop()


async def latency_main(args: argparse.Namespace) -> None:
    db = f"prof_worker_{os.getpid()}"
    dsn = await fresh_db(args.dsn, db)
    child = await asyncio.create_subprocess_exec(
        sys.executable,
        __file__,
        "latency-child",
        "--dsn",
        dsn,
        "--samples",
        str(args.samples),
        *(["--worker", args.worker] if args.worker else []),
        stdout=asyncio.subprocess.PIPE,
    )
    assert child.stdout is not None
    try:
        line = await child.stdout.readline()
        assert json.loads(line)["event"] == "ready", line
        window: dict[str, Any] = {}
        if args.notify_window_ms is not None:
            window["notify_window_ms"] = args.notify_window_ms
        driver = postgres_job_driver(dsn, **window)
        committed: dict[int, int] = {}
        with swap_adapter(JOB_DRIVER, driver):
            await noop.enqueue({"n": -1})  # warm the pool and the statement
            await asyncio.sleep(3.0)
            begin = time.monotonic()
            for i in range(args.samples):
                await noop.enqueue({"n": i})
                committed[i] = time.monotonic_ns()
                wait = begin + (i + 1) * args.spacing_ms / 1000 - time.monotonic()
                if wait > 0:
                    await asyncio.sleep(wait)
        await driver.close()
        result = json.loads(await child.stdout.readline())
    finally:
        await asyncio.wait_for(child.wait(), timeout=60)
        await admin(args.dsn, f'DROP DATABASE IF EXISTS "{db}" WITH (FORCE)')
    starts = {int(k): v for k, v in result["starts"].items()}
    lat = sorted((starts[i] - committed[i]) / 1e6 for i in committed if i in starts)
    if len(lat) < args.samples:
        print(f"only {len(lat)} of {args.samples} picked up")
    if not lat:
        return

    def pct(p: float) -> float:
        return lat[max(0, min(len(lat) - 1, round(p / 100 * len(lat) + 0.4999) - 1))]

    print(
        f"pickup over {len(lat)} enqueues {args.spacing_ms} ms apart: p50 {pct(50):.2f} ms, "
        f"p90 {pct(90):.2f} ms, p99 {pct(99):.2f} ms, max {lat[-1]:.2f} ms "
        f"(load {os.getloadavg()[0]:.2f})"
    )


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("mode", choices=("drain", "engine", "latency", "latency-child"))
    p.add_argument("--dsn", default=os.environ.get("DATABASE_URL", DEFAULT_DSN))
    p.add_argument("--jobs", type=int, default=10_000)
    p.add_argument("--repeat", type=int, default=3)
    p.add_argument("--samples", type=int, default=200)
    p.add_argument("--spacing-ms", type=float, default=20.0)
    p.add_argument(
        "--notify-window-ms",
        type=int,
        help="latency: the enqueuing driver's notify window (default: the driver's, 250 ms)",
    )
    p.add_argument("--worker", help="job_worker keywords as JSON, e.g. '{\"claim_batch\": 50}'")
    p.add_argument("--profile", metavar="FILE", help="cProfile the worker's drains into FILE")
    p.add_argument("--no-floor", action="store_true", help="skip the driver-only floor")
    p.add_argument("--kinds", action="store_true", help="print the statements sent, by kind")
    p.add_argument("--floor-batch", type=int, default=FLOOR_BATCH, help="the floor's claim size")
    args = p.parse_args()
    if args.mode == "drain":
        asyncio.run(drain_main(args))
    elif args.mode == "engine":
        asyncio.run(engine_main(args))
    elif args.mode == "latency":
        asyncio.run(latency_main(args))
    else:
        overrides = json.loads(args.worker) if args.worker else {}
        asyncio.run(latency_child(args.dsn, args.samples, overrides))


if __name__ == "__main__":
    main()
