"""The jobs dashboard's pages over Postgres with a 100,000-job queue: how long each page takes
to render (in process, through httpx's ASGI transport: the introspection reads and the HTML,
no network), and how many introspection calls it makes. The budget the issue sets: the overview
under 200 ms. Bounded: one seeding, a few warm-up renders, ``--runs`` timed renders per page.

    uv run python tooling/bench/dashboard_bench.py               # 100,000 jobs, 15 runs a page
    uv run python tooling/bench/dashboard_bench.py --jobs 10000 --runs 5

It makes a schema of its own in ``DATABASE_URL`` (default the local test database) and drops it
at the end. Queue ``bulk`` holds the jobs: all ready but ``--dead`` dead (two error codes) and
``--running`` claimed; ``other`` holds a few delayed ones.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import time
import uuid
from collections import Counter
from typing import Any

import httpx
import psycopg

from ultimat3.core import new_id
from ultimat3.jobs.adapter import EnqueueColumns, EnqueueRequest
from ultimat3.jobs.dashboard import jobs_dashboard
from ultimat3.jobs.postgres import PostgresJobDriver, migrate, postgres_job_driver

BUDGET_MS = 200.0
CHUNK = 5_000


class Counting:
    """Forwards ``inner``, counting each call of a member."""

    def __init__(self, inner: Any, calls: Counter[str], prefix: str) -> None:
        self._inner, self._calls, self._prefix = inner, calls, prefix

    def __getattr__(self, name: str) -> Any:
        value = getattr(self._inner, name)
        if not callable(value) or name.startswith("_"):
            return value

        def counted(*a: Any, **kw: Any) -> Any:
            self._calls[self._prefix + name] += 1
            return value(*a, **kw)

        return counted


class CountingDriver(Counting):
    def __init__(self, inner: Any, calls: Counter[str]) -> None:
        super().__init__(inner, calls, "driver.")
        self.introspect = Counting(inner.introspect, calls, "introspect.")
        self.backfills = Counting(inner.backfills, calls, "backfills.")


async def seed(driver: PostgresJobDriver, jobs: int, dead: int, running: int) -> str:
    started = time.perf_counter()
    for start in range(0, jobs, CHUNK):
        n = min(CHUNK, jobs - start)
        ids = [new_id() for _ in range(n)]
        await driver.enqueue_columns(
            EnqueueColumns(
                name="bench.sync",
                queue="bulk",
                max_attempts=1,
                ids=ids,
                run_ids=[new_id() for _ in range(n)],
                payloads=[{"n": start + i} for i in range(n)],
                idempotency_keys=[f"sync:{i}" for i in ids],
                tenant_ids=[None] * n,
            )
        )
    claimed = await driver.claim(
        queues=["bulk"], limit=dead + running, worker_id="w-bench", visibility_timeout_ms=600_000
    )
    for i, job in enumerate(claimed[:dead]):
        code = "X_VENDOR_DOWN" if i % 2 else "X_CARD_DECLINED"
        error = {"code": code, "message": "the vendor said no", "meta": {}}
        await driver.steps.record(
            job.id, "call", state="failed", worker_id="w-bench", claim=job.claim, error=error
        )
        await driver.nack(job.id, worker_id="w-bench", claim=job.claim, outcome="dead", error=error)
    for _ in range(20):
        await driver.enqueue(
            EnqueueRequest(
                id=new_id(),
                run_id=new_id(),
                name="bench.later",
                queue="other",
                payload={},
                idempotency_key=new_id(),
                max_attempts=3,
                delay_ms=3_600_000,
            )
        )
    print(f"seeded {jobs:,} jobs in {time.perf_counter() - started:.1f} s")
    return str(claimed[0].id)


async def measure(dsn: str, jobs: int, runs: int, dead: int, running: int) -> None:
    schema = f"x_bench_dash_{uuid.uuid4().hex[:10]}"
    await migrate(dsn, schema=schema)
    driver = postgres_job_driver(dsn, schema=schema)
    try:
        dead_id = await seed(driver, jobs, dead, running)
        async with await psycopg.AsyncConnection.connect(dsn, autocommit=True) as conn:
            await conn.execute(f'ANALYZE "{schema}".x_jobs')
        calls: Counter[str] = Counter()
        app = jobs_dashboard(driver=CountingDriver(driver, calls))
        pages = {
            "overview /": "/",
            "jobs /jobs": "/jobs",
            "jobs, filtered": "/jobs?queue=bulk&state=ready&limit=50",
            "jobs, page 2": None,
            "one job": f"/jobs/{dead_id}",
            "dead letter": "/dead",
            "tasks": "/tasks",
        }
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(transport=transport, base_url="http://bench") as client:
            first = (await client.get("/jobs?queue=bulk&limit=50")).text
            cursor = first.split("after=", 1)[1].split('"', 1)[0].replace("&amp;", "&")
            pages["jobs, page 2"] = f"/jobs?queue=bulk&limit=50&after={cursor}"
            print(f"\n{'page':<16} {'median ms':>10} {'p90 ms':>8} {'reads':>6}  {'vs 200 ms':>9}")
            for label, path in pages.items():
                assert path is not None
                for _ in range(3):
                    r = await client.get(path)
                    assert r.status_code == 200, (path, r.status_code, r.text[:300])
                times = []
                for _ in range(runs):
                    calls.clear()
                    t0 = time.perf_counter()
                    r = await client.get(path)
                    times.append((time.perf_counter() - t0) * 1000)
                med = statistics.median(times)
                p90 = sorted(times)[max(0, int(len(times) * 0.9) - 1)]
                n_reads = sum(calls.values())
                print(
                    f"{label:<16} {med:>10.1f} {p90:>8.1f} {n_reads:>6}  {med / BUDGET_MS:>8.2f}x"
                )
            stats_times = []
            for _ in range(runs):
                t0 = time.perf_counter()
                await driver.stats()
                stats_times.append((time.perf_counter() - t0) * 1000)
            print(
                f"\nbaseline: driver.stats() alone, median {statistics.median(stats_times):.1f} ms"
            )
    finally:
        await driver.close()
        async with await psycopg.AsyncConnection.connect(dsn, autocommit=True) as conn:
            await conn.execute(f'DROP SCHEMA IF EXISTS "{schema}" CASCADE')


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--jobs", type=int, default=100_000)
    parser.add_argument("--runs", type=int, default=15)
    parser.add_argument("--dead", type=int, default=300)
    parser.add_argument("--running", type=int, default=50)
    parser.add_argument(
        "--dsn", default=os.environ.get("DATABASE_URL", "postgresql://postgres@127.0.0.1:5432/test")
    )
    a = parser.parse_args()
    asyncio.run(measure(a.dsn, a.jobs, a.runs, a.dead, a.running))


if __name__ == "__main__":
    main()
