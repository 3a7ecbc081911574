"""What the wake's notify window costs (issue 16): NOTIFYs per second and the enqueue's commit
time at 1k and 10k enqueues/s, for ``notify_window_ms`` 250 (the spec's default), 10 and 0.

    uv run python tooling/bench/notify_window.py [--seconds 3] [--dsn ...]

Single enqueues (``job.enqueue``, one statement and one commit each) from 32 producer tasks of
one process, paced to the target rate, for ``--seconds``; a LISTEN session on the wake channel
counts the notifications that arrive. Postgres serialises every notifying commit behind one
lock, so the commit cost shows as the enqueue's p50 / p99 time. A rate the machine cannot reach
is reported as reached. Median of ``--repeat`` runs, the windows taking turns.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import sys
import time
import uuid
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

import psycopg
from psycopg import sql

DEFAULT_DSN = "postgresql://postgres@127.0.0.1:5432/test"
PRODUCERS = 32


async def one_run(
    dsn: str, schema: str, window_ms: int, rate: int, seconds: float
) -> dict[str, float]:
    from pydantic import BaseModel

    from ultimat3.core import swap_adapter
    from ultimat3.jobs import job
    from ultimat3.jobs.adapter import JOB_DRIVER
    from ultimat3.jobs.postgres import postgres_job_driver
    from ultimat3.jobs.postgres._sql import wake_channel

    class P(BaseModel):
        n: int

    async def body(input: P, step: Any, ctx: Any) -> None:
        return None

    tag = uuid.uuid4().hex[:8]
    noop = job(input=P, name=f"nw_{tag}", idempotency_key=lambda i: f"{tag}:{i.n}", run=body)
    driver = postgres_job_driver(dsn, schema=schema, max_size=10, notify_window_ms=window_ms)
    await driver.open()
    heard = 0
    listener = await psycopg.AsyncConnection.connect(dsn, autocommit=True)
    await listener.execute(sql.SQL("LISTEN {}").format(sql.Identifier(wake_channel(schema))))

    async def listen() -> None:
        nonlocal heard
        async for _ in listener.notifies():
            heard += 1

    listening = asyncio.ensure_future(listen())
    times: list[float] = []
    counter = iter(range(10**9))
    begin = time.monotonic()
    end = begin + seconds
    interval = PRODUCERS / rate

    async def producer(k: int) -> None:
        due = begin + k * interval / PRODUCERS
        while True:
            now = time.monotonic()
            if now >= end:
                return
            if due > now:
                await asyncio.sleep(due - now)
            t0 = time.perf_counter()
            await noop.enqueue({"n": next(counter)})
            times.append((time.perf_counter() - t0) * 1000)
            due += interval

    try:
        with swap_adapter(JOB_DRIVER, driver):
            await asyncio.gather(*(producer(k) for k in range(PRODUCERS)))
        elapsed = time.monotonic() - begin
        await asyncio.sleep(window_ms * 1.5 / 1000 + 0.2)  # the trailing notification
    finally:
        listening.cancel()
        await driver.close()
        await listener.close()
    times.sort()
    return {
        "enqueues_per_s": len(times) / elapsed,
        "notifies_per_s": heard / elapsed,
        "p50_ms": times[len(times) // 2],
        "p99_ms": times[min(len(times) - 1, int(len(times) * 0.99))],
    }


async def main_async(args: argparse.Namespace) -> int:
    from ultimat3.jobs.postgres import migrate

    schema = f"x_bench_nw_{os.getpid()}"
    await migrate(args.dsn, schema=schema)
    results: dict[tuple[int, int], list[dict[str, float]]] = {}
    try:
        for _ in range(args.repeat):
            for rate in (1000, 10_000):
                for window in (250, 10, 0):
                    out = await one_run(args.dsn, schema, window, rate, args.seconds)
                    results.setdefault((rate, window), []).append(out)
                    shown = ", ".join(f"{k}={v:,.2f}" for k, v in out.items())
                    print(f"  rate {rate}/s window {window} ms: {shown}", flush=True)
    finally:
        async with await psycopg.AsyncConnection.connect(args.dsn, autocommit=True) as conn:
            await conn.execute(sql.SQL("DROP SCHEMA {} CASCADE").format(sql.Identifier(schema)))
    print(f"\nmedians of {args.repeat}; {PRODUCERS} producer tasks, one process, single enqueues")
    print("| target/s | window ms | enqueues/s | NOTIFYs/s | enqueue p50 ms | enqueue p99 ms |")
    print("|---|---|---|---|---|---|")
    for (rate, window), outs in sorted(results.items(), key=lambda kv: (kv[0][0], -kv[0][1])):
        m = {k: statistics.median(o[k] for o in outs) for k in outs[0]}
        print(
            f"| {rate:,} | {window} | {m['enqueues_per_s']:,.0f} | {m['notifies_per_s']:,.1f} "
            f"| {m['p50_ms']:.2f} | {m['p99_ms']:.2f} |"
        )
    return 0


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--dsn", default=os.environ.get("DATABASE_URL", DEFAULT_DSN))
    p.add_argument("--seconds", type=float, default=3.0)
    p.add_argument("--repeat", type=int, default=3)
    return asyncio.run(main_async(p.parse_args()))


if __name__ == "__main__":
    raise SystemExit(main())
