"""Postings/s through ONE worker on the Postgres ledger book (issue 20), against two baselines on
the same server, in one run:

    uv run python tooling/bench/ledger_bench.py [--postings 2000] [--repeats 3] [--dsn URL]

(a) ``ledger``: ``--postings`` postings of two lines (EUR), pre-enqueued, drained by one
    in-process ``job_worker`` (default settings) on the Postgres driver; the book is
    ``postgres_ledger_book`` on the same server. From the worker's start until every row is done.
(b) ``no-op job``: the same count of a job whose body returns at once, same worker — the engine's
    ceiling on this machine, so ``ledger / no-op`` is what the posting (a durable step plus the
    book's insert + read in one transaction) costs.
(c) ``book.post alone``: the same postings posted straight into the book, 8 at a time, no job —
    the book's own ceiling.
(d) ``replay``: the postings of (a) enqueued again after (a) settled (new rows, same keys): every
    post writes 0 lines.

Each figure is the median of ``--repeats`` runs, every run in a fresh schema dropped after it.
Bounded: at most ``--postings`` (capped at 20,000) per run, and each run stops at ``--timeout``
seconds. It runs on the shared server (``$DATABASE_URL``), loopback only.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import sys
import time
import uuid
from collections.abc import Awaitable, Callable
from typing import Any

import psycopg
from psycopg_pool import AsyncConnectionPool
from pydantic import BaseModel

from ultimat3.core import Money, swap_adapter
from ultimat3.jobs import Job, job, job_worker
from ultimat3.jobs.adapter import JOB_DRIVER
from ultimat3.jobs.factories.ledger import Posting, PostingEntry, ledger, lines_of_posting
from ultimat3.jobs.factories.ledger_books import PostgresLedgerBook, postgres_ledger_book
from ultimat3.jobs.postgres import PostgresJobDriver, migrate, postgres_job_driver

DEFAULT_DSN = "postgresql://postgres@127.0.0.1:5432/test"
MAX_POSTINGS = 20_000


class Noop(BaseModel):
    n: int


def _postings(count: int) -> list[Posting]:
    return [
        Posting(
            key=f"pay_{i}",
            entries=[
                PostingEntry(account="cash", amount=Money(100 + i, "EUR")),
                PostingEntry(account="revenue", amount=Money(-(100 + i), "EUR")),
            ],
        )
        for i in range(count)
    ]


async def _drop(dsn: str, schema: str) -> None:
    async with await psycopg.AsyncConnection.connect(dsn, autocommit=True) as conn:
        await conn.execute(f'DROP SCHEMA IF EXISTS "{schema}" CASCADE')


async def _settled(driver: PostgresJobDriver, schema: str, name: str) -> int:
    async with await psycopg.AsyncConnection.connect(driver_dsn(), autocommit=True) as conn:
        cur = await conn.execute(
            f"SELECT count(*) FROM \"{schema}\".x_jobs WHERE name = %s AND state = 'done'", (name,)
        )
        row = await cur.fetchone()
    return int(row[0]) if row else 0


def driver_dsn() -> str:
    return os.environ.get("DATABASE_URL") or DEFAULT_DSN


async def _drain(
    driver: PostgresJobDriver, schema: str, target: Job[Any, Any], count: int, timeout_s: float
) -> float:
    """Start one worker, wait until ``count`` rows of ``target`` are done; answers seconds."""
    worker = job_worker(jobs=[target], driver=driver, handle_signals=False)
    started = time.perf_counter()
    await worker.start()
    try:
        while await _settled(driver, schema, target.name) < count:
            if time.perf_counter() - started > timeout_s:
                raise TimeoutError(f"{target.name}: not drained within {timeout_s}s")
            await asyncio.sleep(0.02)
        return time.perf_counter() - started
    finally:
        await worker.stop()


Measure = Callable[[str, PostgresJobDriver, PostgresLedgerBook, int, float], Awaitable[float]]


async def measure_ledger(
    schema: str, driver: PostgresJobDriver, book: PostgresLedgerBook, count: int, timeout_s: float
) -> float:
    post = ledger(name="bench.post", tenant="none", book=lambda: book)
    postings = _postings(count)
    with swap_adapter(JOB_DRIVER, driver):
        await post.enqueue_many(postings)
    seconds = await _drain(driver, schema, post, count, timeout_s)
    assert await book.lines_of("pay_0") == lines_of_posting(postings[0])
    return count / seconds


async def measure_replay(
    schema: str, driver: PostgresJobDriver, book: PostgresLedgerBook, count: int, timeout_s: float
) -> float:
    post = ledger(name="bench.post", tenant="none", book=lambda: book)
    postings = _postings(count)
    for posting in postings:  # the lines are already there: every post of the run writes 0
        await book.post(posting.key, lines_of_posting(posting))
    with swap_adapter(JOB_DRIVER, driver):
        await post.enqueue_many(postings)
    return count / await _drain(driver, schema, post, count, timeout_s)


async def measure_noop(
    schema: str, driver: PostgresJobDriver, book: PostgresLedgerBook, count: int, timeout_s: float
) -> float:
    async def body(input: Noop, step: Any, ctx: Any) -> None:
        return None

    noop: Job[Noop, None] = job(
        name="bench.noop", input=Noop, idempotency_key=lambda i: f"noop:{i.n}", run=body
    )
    with swap_adapter(JOB_DRIVER, driver):
        await noop.enqueue_many([Noop(n=i) for i in range(count)])
    return count / await _drain(driver, schema, noop, count, timeout_s)


async def measure_book(
    schema: str, driver: PostgresJobDriver, book: PostgresLedgerBook, count: int, timeout_s: float
) -> float:
    postings = _postings(count)
    gate = asyncio.Semaphore(8)

    async def one(posting: Posting) -> None:
        async with gate:
            await book.post(posting.key, lines_of_posting(posting))

    started = time.perf_counter()
    await asyncio.wait_for(asyncio.gather(*(one(p) for p in postings)), timeout_s)
    return count / (time.perf_counter() - started)


async def run_once(dsn: str, measure: Measure, count: int, timeout_s: float) -> float:
    schema = f"bench_ledger_{uuid.uuid4().hex[:10]}"
    await migrate(dsn, schema=schema)
    async with AsyncConnectionPool(dsn, min_size=1, max_size=8, open=False) as pool:
        book = postgres_ledger_book(pool, schema=schema)
        await book.migrate()
        driver = postgres_job_driver(dsn, schema=schema)
        try:
            return await measure(schema, driver, book, count, timeout_s)
        finally:
            await driver.close()
            await _drop(dsn, schema)


async def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--postings", type=int, default=2_000)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--timeout", type=float, default=120.0)
    parser.add_argument("--dsn", default=driver_dsn())
    args = parser.parse_args()
    count = max(1, min(args.postings, MAX_POSTINGS))
    os.environ["DATABASE_URL"] = args.dsn
    rows: dict[str, float] = {}
    for label, measure in (
        ("ledger (one worker)", measure_ledger),
        ("no-op job (one worker)", measure_noop),
        ("book.post alone (8 at a time)", measure_book),
        ("ledger replay (writes 0)", measure_replay),
    ):
        figures = [
            await run_once(args.dsn, measure, count, args.timeout) for _ in range(args.repeats)
        ]
        rows[label] = statistics.median(figures)
        shown = ", ".join(f"{f:,.0f}" for f in figures)
        print(f"{label:32} median {rows[label]:8,.0f} /s   (runs: {shown})", flush=True)
    ledger_rate = rows["ledger (one worker)"]
    print()
    print(f"postings: {count} x {args.repeats} runs; server {args.dsn.split('@')[-1]}")
    print(f"ledger / no-op job        = {ledger_rate / rows['no-op job (one worker)']:.2f}")
    print(f"ledger / book.post alone  = {ledger_rate / rows['book.post alone (8 at a time)']:.2f}")
    print(f"replay / ledger           = {rows['ledger replay (writes 0)'] / ledger_rate:.2f}")
    try:
        load = os.getloadavg()
        print(f"load average at the end: {load[0]:.2f} {load[1]:.2f} {load[2]:.2f}")
    except OSError:
        pass
    return 0


if __name__ == "__main__":
    sys.exit(asyncio.run(main()))
