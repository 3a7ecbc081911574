"""What a claim costs, in parts (issue 16's drain and pickup notes in docs/performance.md).

    uv run python tooling/bench/claim_cost.py plans      # the claim under auto vs a generic plan
    uv run python tooling/bench/claim_cost.py variants   # the full claim vs a bare one vs SELECT 1
    uv run python tooling/bench/claim_cost.py pickup     # an idle pickup split into its parts

``plans``: a fresh database of 3,000 due no-op jobs per mode; 100 claims of 20 on one connection
(``prepare=True``), under ``plan_cache_mode`` ``auto``, ``force_generic_plan``, then both again;
the median of the last 90. ``variants``: on one database, 150 rounds of one enqueue then one
statement each — the driver's claim SQL, a bare ``WITH due ... UPDATE ... RETURNING`` of the same
rows, an empty ``SELECT``, and the claim through ``driver.claim`` (the client's share); medians.
``pickup``: a worker in this process (the wake started), enqueues 300 ms apart from a thread of
its own loop; per sample the instants of the enqueue's return, the notification's arrival, the
claim sent and back, and the body's first line; the medians of each gap.

Databases ``claim_cost_*`` on ``--dsn`` (default ``$DATABASE_URL``, else the local test server),
dropped at the end. The machine is shared: compare lines of one run.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import sys
import time
from pathlib import Path
from typing import Any

import psycopg

sys.path.insert(0, str(Path(__file__).parent))
import profile_worker as pw

from ultimat3.core import swap_adapter
from ultimat3.jobs import job_worker
from ultimat3.jobs.adapter import JOB_DRIVER
from ultimat3.jobs.postgres import _wake, postgres_job_driver
from ultimat3.jobs.postgres._sql import compile_queries

PARAMS: dict[str, Any] = {
    "queues": ["default"],
    "limit": 20,
    "worker_id": "w",
    "visibility_timeout_ms": 30_000,
    "no_dead_letter": [],
}
BARE = """WITH due AS MATERIALIZED (
    SELECT j.id FROM x_jobs j
    WHERE j.queue = ANY(%(queues)s::text[]) AND j.state IN ('ready', 'delayed', 'suspended')
      AND j.run_at <= now()
    ORDER BY j.run_at, j.id LIMIT %(limit)s FOR UPDATE SKIP LOCKED)
UPDATE x_jobs j SET state = 'running', attempts = j.attempts + 1, worker_id = %(worker_id)s,
    claim = gen_random_uuid(), updated_at = now(),
    lease_expires_at = now() + %(visibility_timeout_ms)s::bigint * interval '1 millisecond'
WHERE j.id = ANY(ARRAY(SELECT id FROM due)) AND %(no_dead_letter)s::text[] IS NOT NULL
RETURNING j.id, j.payload"""
EMPTY = (
    "SELECT 1 WHERE %(limit)s > 0 AND %(worker_id)s <> '' AND %(visibility_timeout_ms)s > 0 "
    "AND %(queues)s::text[] IS NOT NULL AND %(no_dead_letter)s::text[] IS NOT NULL"
)


def _ms(samples: list[float]) -> str:
    return f"{statistics.median(samples):6.2f} ms"


async def plans(base: str) -> None:
    claim = compile_queries("public")["claim"]
    for mode in ("auto", "force_generic_plan", "auto", "force_generic_plan"):
        dsn = await pw.fresh_db(base, "claim_cost_plans")
        await pw.enqueue_all(dsn, 3000)
        took: list[float] = []
        async with await psycopg.AsyncConnection.connect(dsn, autocommit=True) as conn:
            await conn.execute(f"SET plan_cache_mode = {mode}".encode())
            for _ in range(100):
                t = time.perf_counter()
                await (await conn.execute(claim, PARAMS, prepare=True)).fetchall()
                took.append((time.perf_counter() - t) * 1000)
        print(f"claim of 20 (of 3,000), {mode:20s} {_ms(took[10:])}", flush=True)
    await pw.admin(base, 'DROP DATABASE IF EXISTS "claim_cost_plans" WITH (FORCE)')


async def variants(base: str) -> None:
    dsn = await pw.fresh_db(base, "claim_cost_variants")
    statements = {
        "the driver's claim SQL": compile_queries("public")["claim"],
        "bare due + update": BARE,
        "SELECT 1 (a round trip)": EMPTY,
    }
    producer = postgres_job_driver(dsn)
    claimer = postgres_job_driver(dsn)
    n = 0
    try:
        with swap_adapter(JOB_DRIVER, producer):
            for label, text in statements.items():
                took: list[float] = []
                async with await psycopg.AsyncConnection.connect(dsn, autocommit=True) as conn:
                    await conn.execute(b"SET plan_cache_mode = force_generic_plan")
                    for _ in range(150):
                        n += 1
                        await pw.noop.enqueue({"n": n})
                        t = time.perf_counter()
                        await (await conn.execute(text, PARAMS, prepare=True)).fetchall()
                        took.append((time.perf_counter() - t) * 1000)
                print(f"one row, {label:28s} {_ms(took[20:])}", flush=True)
            took = []
            for _ in range(150):
                n += 1
                await pw.noop.enqueue({"n": n})
                t = time.perf_counter()
                await claimer.claim(
                    queues=["default"], limit=20, worker_id="w", visibility_timeout_ms=30_000
                )
                took.append((time.perf_counter() - t) * 1000)
            print(f"one row, {'driver.claim(...)':28s} {_ms(took[20:])}", flush=True)
    finally:
        await producer.close()
        await claimer.close()
        await pw.admin(base, 'DROP DATABASE IF EXISTS "claim_cost_variants" WITH (FORCE)')


async def pickup(base: str, samples: int = 60, spacing_s: float = 0.3) -> None:
    dsn = await pw.fresh_db(base, "claim_cost_pickup")
    current: dict[str, int] = {"n": -1}
    stamps: dict[int, dict[str, float]] = {}
    heard = _wake.QueueWake._wake

    def on_wake(self: Any, queue: str) -> None:
        stamps.setdefault(current["n"], {})["notified"] = time.perf_counter()
        heard(self, queue)

    _wake.QueueWake._wake = on_wake  # type: ignore[method-assign]
    started: dict[int, float] = {}
    pw._on_body = lambda n: started.__setitem__(n, time.perf_counter())
    driver = postgres_job_driver(dsn)
    claim = driver.claim

    async def timed_claim(**kw: Any) -> Any:
        t = time.perf_counter()
        rows = await claim(**kw)
        if rows:
            stamps.setdefault(current["n"], {}).update(sent=t, back=time.perf_counter())
        return rows

    driver.claim = timed_claim  # type: ignore[method-assign]
    worker = job_worker(jobs=[pw.noop], driver=driver, handle_signals=False)
    returned: dict[int, float] = {}

    def produce() -> None:
        async def go() -> None:
            own = postgres_job_driver(dsn)
            with swap_adapter(JOB_DRIVER, own):
                await pw.noop.enqueue({"n": -1})  # warm
                await asyncio.sleep(1)
                for i in range(samples):
                    current["n"] = i
                    await pw.noop.enqueue({"n": i})
                    returned[i] = time.perf_counter()
                    await asyncio.sleep(spacing_s)
            await own.close()

        asyncio.run(go())

    await worker.start()
    try:
        await asyncio.sleep(2)
        await asyncio.to_thread(produce)  # its own loop, in a thread of its own
        await asyncio.sleep(0.5)
    finally:
        await worker.stop()
        await driver.close()
        _wake.QueueWake._wake = heard  # type: ignore[method-assign]
        await pw.admin(base, 'DROP DATABASE IF EXISTS "claim_cost_pickup" WITH (FORCE)')
    parts: dict[str, list[float]] = {}
    for i in range(samples):
        s = stamps.get(i, {})
        if i not in started or not {"notified", "sent", "back"} <= set(s):
            continue
        for name, a, b in (
            ("enqueue returned -> notification heard", returned[i], s["notified"]),
            ("notification -> claim sent", s["notified"], s["sent"]),
            ("the claim's round trip", s["sent"], s["back"]),
            ("claim back -> body's first line", s["back"], started[i]),
            ("total (the pickup)", returned[i], started[i]),
        ):
            parts.setdefault(name, []).append((b - a) * 1000)
    for name, values in parts.items():
        print(f"{name:40s} p50 {_ms(values)}  max {max(values):6.2f} ms")
    print(f"{len(parts.get('total (the pickup)', []))} samples of {samples}")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("what", choices=("plans", "variants", "pickup"))
    parser.add_argument("--dsn", default=os.environ.get("DATABASE_URL") or pw.DEFAULT_DSN)
    args = parser.parse_args()
    run = {"plans": plans, "variants": variants, "pickup": pickup}[args.what]
    asyncio.run(run(args.dsn))
    return 0


if __name__ == "__main__":
    sys.exit(main())
