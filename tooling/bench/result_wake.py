"""``job.result()`` on Postgres: the delay from the ack's commit to the waiter's return.

    uv run python tooling/bench/result_wake.py [--runs 50]

Each run enqueues a job, starts ``result()``, claims the row and acks it through the driver;
the delay is from ``ack()`` returning (its commit done) to ``result()`` returning. Against a
baseline: the same wait with the settle push hidden (what a driver without ``SettleWatch`` gets:
re-reads 10 ms doubling to 500 ms). Prints the medians, p90s and the ratio. Loopback only; its
own schema, dropped after.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import time
import uuid
from typing import Any

import psycopg
from pydantic import BaseModel

from ultimat3.core import swap_adapter
from ultimat3.jobs import job
from ultimat3.jobs.adapter import JOB_DRIVER
from ultimat3.jobs.postgres import migrate, postgres_job_driver

URL = os.environ.get("DATABASE_URL", "postgresql://postgres@127.0.0.1:5432/test")


class N(BaseModel):
    n: int


async def _body(input: N, step: Any, ctx: Any) -> int:
    return input.n


bench_job = job(input=N, idempotency_key=lambda i: f"rw:{i.n}", name="bench.result", run=_body)


class Hidden:
    """The driver with its settle push hidden: ``result()`` falls back to re-reading."""

    def __init__(self, inner: Any) -> None:
        self._inner = inner

    def __getattr__(self, name: str) -> Any:
        if name in ("watch_settled", "unwatch_settled"):
            raise AttributeError(name)
        return getattr(self._inner, name)


async def _one(driver: Any, n: int) -> float:
    queued = await bench_job.enqueue({"n": n})
    returned: list[float] = []

    async def wait() -> None:
        await bench_job.result(queued.id, timeout="10s")
        returned.append(time.perf_counter())

    waiter = asyncio.ensure_future(wait())
    await asyncio.sleep(0.03)  # the waiter is registered and waiting
    [claimed] = await driver.claim(
        queues=["default"], limit=1, worker_id="bench", visibility_timeout_ms=30_000
    )
    assert await driver.ack(claimed.id, worker_id="bench", claim=claimed.claim, result=n)
    committed = time.perf_counter()
    await waiter
    return (returned[0] - committed) * 1000


async def main(runs: int) -> None:
    schema = f"x_bench_{uuid.uuid4().hex[:10]}"
    await migrate(URL, schema=schema)
    driver = postgres_job_driver(URL, schema=schema)
    try:
        figures: dict[str, list[float]] = {}
        ways = (("settle push (LISTEN)", driver), ("re-read backoff", Hidden(driver)))
        for label, installed in ways:
            with swap_adapter(JOB_DRIVER, installed):
                await _one(driver, -1)  # warm: the LISTEN session, the pool
                figures[label] = [await _one(driver, i) for i in range(runs)]
        for label, ms in figures.items():
            ms.sort()
            print(
                f"{label:22s} ack commit -> result() return: p50 {statistics.median(ms):6.2f} ms"
                f"  p90 {ms[int(len(ms) * 0.9)]:6.2f} ms  max {ms[-1]:6.2f} ms  ({len(ms)} runs)"
            )
        push, poll = (statistics.median(v) for v in figures.values())
        print(f"ratio re-read / push (p50): {poll / max(push, 1e-6):.1f}x")
    finally:
        await driver.close()
        async with await psycopg.AsyncConnection.connect(URL, autocommit=True) as conn:
            await conn.execute(f'DROP SCHEMA "{schema}" CASCADE')


if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("--runs", type=int, default=50)
    asyncio.run(main(parser.parse_args().runs))
