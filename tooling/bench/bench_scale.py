"""Issue 16's benchmarks: the engine at scale, beside PGQueuer where the issue names a peer.

    bash tooling/bench/setup_peers.sh                      # once: .x/bench-venv
    .x/bench-venv/bin/python tooling/bench/bench_scale.py [--repeat 3] [--only drain,io,...]

On the server of ``--dsn`` (default ``$DATABASE_URL``), a fresh database per measurement
(``bench_<system>_<pid>``, bench_db.fresh_db), ours as the work tree has it (the bench venv
installs it editable). Measured ``--repeat`` times (medians shown; ratios are of medians of the
same run):

drain   10,000 pre-enqueued no-op jobs drained by ONE worker process (pg_bench's child): ours
        with ``max_in_flight=20`` on the DEFAULT pool (10), PGQueuer at its defaults.
io      ours: 2,000 jobs whose body awaits ``asyncio.sleep(1)`` then records one step,
        ``max_in_flight=1000``, default pool; jobs/s from the worker's start to the last settle,
        and the most connections the worker process held (``pg_stat_activity`` by its
        ``application_name``, sampled every 20 ms).
stream  pickup on a 20 ms stream: 200 enqueues 20 ms apart onto an idle worker process (pg_bench's
        latency child), the body's start minus the enqueue's return; p50 / p99; ours vs PGQueuer.
idle    the same 300 ms apart (pg_bench's idle pickup protocol); ours vs PGQueuer.
due     ours: due-time lateness on an idle worker (defaults): 200 jobs enqueued 20 ms apart
        with ``run_at`` 2 s ahead (lateness = the body's start minus run_at, one host clock), and
        200 runs whose body calls ``step.sleep('2s')`` (lateness = the resumed body minus the
        instant the sleep began plus 2 s); p50 / p99.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import statistics
import sys
import time
import uuid
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

import psycopg
from bench_db import db_name, drop_db, fresh_db
from bench_measure import child_latency, measure_drain, percentile, spawn
from bench_ours import OVERRIDES_ENV
from bench_systems import SYSTEMS, System

DEFAULT_DSN = "postgresql://postgres@127.0.0.1:5432/test"
SAMPLES = 200


async def measure_pickup(system: System, dsn: str, spacing_s: float) -> dict[str, float]:
    """pg_bench's (c) with the spacing as a parameter: ``SAMPLES`` enqueues ``spacing_s`` apart
    onto a worker process that went idle first."""
    await system.install(dsn)
    timeout = 3.0 + SAMPLES * spacing_s + 30
    child = await spawn(system.name, dsn, "latency", SAMPLES, timeout)
    committed: dict[int, int] = {}
    try:
        ready = await child.line(60)
        assert ready["event"] == "ready", ready
        await system.open(dsn)
        try:
            await asyncio.sleep(3.0)  # let the worker go idle
            begin = time.monotonic()
            for i in range(SAMPLES):
                await system.enqueue_one(i)
                committed[i] = time.monotonic_ns()
                wait = begin + (i + 1) * spacing_s - time.monotonic()
                if wait > 0:
                    await asyncio.sleep(wait)
        finally:
            await system.close()
        result = await child.line(timeout + 10)
    finally:
        await child.finish()
    starts = {int(k): int(v) for k, v in result["starts"].items()}
    lat = [(starts[i] - committed[i]) / 1e6 for i in committed if i in starts]
    if len(lat) < SAMPLES:
        raise RuntimeError(f"only {len(lat)} of {SAMPLES} jobs were picked up")
    return {"p50": percentile(lat, 50), "p99": percentile(lat, 99), "max": max(lat)}


async def measure_io(dsn: str, jobs: int = 2000, in_flight: int = 1000) -> dict[str, float]:
    from pydantic import BaseModel

    from ultimat3.core import swap_adapter
    from ultimat3.jobs import job, job_worker
    from ultimat3.jobs.adapter import JOB_DRIVER
    from ultimat3.jobs.postgres import migrate, postgres_job_driver

    await migrate(dsn)
    app = f"bench-io-{uuid.uuid4().hex[:8]}"
    url = psycopg.conninfo.make_conninfo(dsn, application_name=app)

    class Io(BaseModel):
        n: int

    async def body(input: Io, step: Any, ctx: Any) -> int:
        await asyncio.sleep(1)

        async def record(signal: Any) -> int:
            return input.n

        return int(await step.run("record", record))

    io_job = job(input=Io, name="bench_io", idempotency_key=lambda i: f"io:{i.n}", run=body)
    producer = postgres_job_driver(dsn)
    with swap_adapter(JOB_DRIVER, producer):
        for start in range(0, jobs, 1000):
            await io_job.enqueue_many([{"n": n} for n in range(start, min(jobs, start + 1000))])
    await producer.close()
    driver = postgres_job_driver(url)  # the default pool: max_size=10
    worker = job_worker(jobs=[io_job], driver=driver, max_in_flight=in_flight)
    peak = 0
    async with await psycopg.AsyncConnection.connect(dsn, autocommit=True) as probe:
        t0 = time.perf_counter()
        await worker.start()
        try:
            while True:
                cur = await probe.execute(
                    "SELECT (SELECT count(*) FROM pg_stat_activity WHERE application_name = %s),"
                    " (SELECT count(*) FROM x_jobs WHERE state <> 'done')",
                    (app,),
                )
                row = await cur.fetchone()
                assert row is not None
                peak = max(peak, int(row[0]))
                if int(row[1]) == 0:
                    break
                if time.perf_counter() - t0 > 120:
                    raise TimeoutError(f"{row[1]} io jobs not done after 120 s")
                await asyncio.sleep(0.02)
            elapsed = time.perf_counter() - t0
        finally:
            await worker.stop()
            await driver.close()
    return {"io_jobs_per_s": jobs / elapsed, "io_connections": float(peak)}


async def measure_due(dsn: str) -> dict[str, float]:
    from pydantic import BaseModel

    from ultimat3.core import swap_adapter
    from ultimat3.jobs import job, job_worker
    from ultimat3.jobs.adapter import JOB_DRIVER
    from ultimat3.jobs.postgres import migrate, postgres_job_driver

    await migrate(dsn)

    class D(BaseModel):
        n: int
        run_at_ms: int = 0

    delayed_late: list[float] = []
    slept_at: dict[str, float] = {}
    sleep_late: list[float] = []

    async def delayed(input: D, step: Any, ctx: Any) -> None:
        delayed_late.append(time.time() * 1000 - input.run_at_ms)

    async def sleeper(input: D, step: Any, ctx: Any) -> None:
        if ctx.job_id not in slept_at:
            slept_at[ctx.job_id] = time.time() * 1000
        await step.sleep("2s")
        sleep_late.append(time.time() * 1000 - slept_at[ctx.job_id] - 2000)

    delayed_job = job(input=D, name="bench_delayed", idempotency_key=lambda i: f"d:{i.n}",
                      run=delayed, queue="due")  # fmt: skip
    sleep_job = job(input=D, name="bench_sleep", idempotency_key=lambda i: f"s:{i.n}",
                    run=sleeper, queue="due")  # fmt: skip
    driver = postgres_job_driver(dsn)
    worker = job_worker(jobs=[delayed_job, sleep_job], driver=driver)
    await worker.start()
    try:
        with swap_adapter(JOB_DRIVER, driver):
            await asyncio.sleep(2.0)  # idle
            for i in range(SAMPLES):
                at = int(time.time() * 1000) + 2000
                await delayed_job.enqueue({"n": i, "run_at_ms": at}, run_at=at)
                await asyncio.sleep(0.02)
            for i in range(SAMPLES):
                await sleep_job.enqueue({"n": i})
                await asyncio.sleep(0.02)
        deadline = time.monotonic() + 60
        while len(delayed_late) < SAMPLES or len(sleep_late) < SAMPLES:
            if time.monotonic() > deadline:
                raise TimeoutError(f"{len(delayed_late)} delayed, {len(sleep_late)} sleeps")
            await asyncio.sleep(0.05)
    finally:
        await worker.stop()
        await driver.close()
    return {
        "delayed_p50": percentile(delayed_late, 50),
        "delayed_p99": percentile(delayed_late, 99),
        "sleep_p50": percentile(sleep_late, 50),
        "sleep_p99": percentile(sleep_late, 99),
    }


def _median(samples: dict[str, list[float]], key: str) -> float | None:
    got = samples.get(key)
    return statistics.median(got) if got else None


async def main_async(args: argparse.Namespace) -> int:
    admin = args.dsn
    wanted = {s.strip() for s in args.only.split(",") if s.strip()}
    samples: dict[str, list[float]] = {}
    loads: list[float] = []

    def add(prefix: str, out: dict[str, float]) -> None:
        shown = ", ".join(f"{k}={v:,.2f}" for k, v in out.items())
        print(f"  {prefix}: {shown} (load {os.getloadavg()[0]:.2f})", flush=True)
        for k, v in out.items():
            samples.setdefault(f"{prefix}.{k}", []).append(v)

    print(f"cpus: {os.cpu_count()}; python: {sys.version.split()[0]}; dsn: {admin}")
    for rep in range(1, args.repeat + 1):
        print(f"--- run {rep} of {args.repeat}", flush=True)
        loads.append(os.getloadavg()[0])
        if "drain" in wanted:
            for name in args.systems.split(","):
                if name == "ultimat3":
                    os.environ[OVERRIDES_ENV] = '{"max_in_flight": 20}'
                db = db_name(name)
                dsn = await fresh_db(admin, db)
                try:
                    out = await measure_drain(SYSTEMS[name](), admin, db, dsn, args.jobs, False)
                finally:
                    os.environ.pop(OVERRIDES_ENV, None)
                add(
                    f"drain.{name}",
                    {
                        "jobs_per_s": float(out["drain"] or 0),
                        "statements_per_job": float(out["statements"] or 0),
                        "commits_per_job": float(out["commits"] or 0),
                    },
                )
        if "io" in wanted:
            add("io.ultimat3", await measure_io(await fresh_db(admin, db_name("io"))))
        for label, spacing in (("stream", 0.020), ("idle", 0.300)):
            if label not in wanted:
                continue
            for name in args.systems.split(","):
                dsn = await fresh_db(admin, db_name(name))
                out = await measure_pickup(SYSTEMS[name](), dsn, spacing)
                add(f"{label}.{name}", out)
        if "due" in wanted:
            add("due.ultimat3", await measure_due(await fresh_db(admin, db_name("due"))))
    for name in ("ultimat3", "pgqueuer", "io", "due"):
        with contextlib.suppress(Exception):
            await drop_db(admin, db_name(name))
    print()
    print(f"medians of {args.repeat} runs; 1-min load at each run's start: {loads}")
    rows: list[tuple[str, str, str]] = []

    def ratio(ours: str, peer: str, higher: bool) -> str:
        a, b = _median(samples, ours), _median(samples, peer)
        if a is None or b is None or not b:
            return "-"
        r = a / b
        return f"{r:.2f}x {'ok' if (r >= 1 if higher else r <= 1) else 'behind'}"

    for key in sorted(samples):
        value = _median(samples, key)
        rows.append((key, f"{value:,.2f}" if value is not None else "n/a", ""))
    for label, higher in (("drain", True),):
        rows.append((f"{label} ours/pgqueuer", ratio(f"{label}.ultimat3.jobs_per_s",
                     f"{label}.pgqueuer.jobs_per_s", higher), ""))  # fmt: skip
    for label in ("stream", "idle"):
        for p in ("p50", "p99"):
            rows.append((f"{label} {p} ours/pgqueuer", ratio(f"{label}.ultimat3.{p}",
                         f"{label}.pgqueuer.{p}", False), ""))  # fmt: skip
    width = max(len(r[0]) for r in rows)
    for key, shown, _ in rows:
        print(f"| {key.ljust(width)} | {shown} |")
    return 0


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--dsn", default=os.environ.get("DATABASE_URL", DEFAULT_DSN))
    p.add_argument("--repeat", type=int, default=3)
    p.add_argument("--jobs", type=int, default=10_000, help="no-op jobs to drain")
    p.add_argument("--only", default="drain,io,stream,idle,due")
    p.add_argument("--systems", default="ultimat3,pgqueuer", help="for drain / stream / idle")
    args = p.parse_args()
    return asyncio.run(main_async(args))


if __name__ == "__main__":
    # pg_bench's child modes (drain, latency) run through pg_bench.py itself (bench_measure.spawn)
    del child_latency
    raise SystemExit(main())
