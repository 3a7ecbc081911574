"""A worker process running one import_rows() job on Postgres, for the SIGKILL test.

    python _import_worker.py --dsn DSN --schema S --root DIR --table T [--enqueue KEY]
                             [--kill-at PAGE:BATCH]

``--enqueue`` queues the import of ``KEY`` and prints the job id. ``--kill-at p:b`` SIGKILLs this
process as its handle is called with batch ``b`` (0-based) of page ``p``: ``b = 0`` is the page
boundary (page ``p - 1`` checkpointed, nothing of page ``p`` handled), ``b > 0`` mid-page
(batches handled, no checkpoint: the replay hands them over again).
"""

from __future__ import annotations

import argparse
import asyncio
import os
import signal
import sys
from collections import Counter
from typing import Any

import psycopg
from psycopg import sql
from pydantic import BaseModel

from ultimat3.jobs import Retry, job_worker
from ultimat3.jobs.adapter import install_job_driver
from ultimat3.jobs.factories.import_rows import ImportBatch, import_rows
from ultimat3.jobs.postgres import postgres_job_driver
from ultimat3.storage import disk

PAGE_BYTES = 1024
BATCH = 8


class Order(BaseModel):
    id: int
    total: int
    note: str | None = None


class In(BaseModel):
    key: str


def declare(args: argparse.Namespace) -> Any:
    conn: list[psycopg.AsyncConnection[Any]] = []
    batches: Counter[int] = Counter()
    kill = tuple(int(x) for x in args.kill_at.split(":")) if args.kill_at else None
    upsert = sql.SQL(
        "INSERT INTO {} (id, total, note) VALUES (%s, %s, %s) ON CONFLICT (id) DO UPDATE"
        " SET total = excluded.total, note = excluded.note"
    ).format(sql.Identifier(args.schema, args.table))

    async def handle(batch: ImportBatch[In, Order]) -> None:
        ordinal = batches[batch.page]
        batches[batch.page] += 1
        if kill is not None and (batch.page, ordinal) == kill:
            os.kill(os.getpid(), signal.SIGKILL)
        if not conn:
            conn.append(await psycopg.AsyncConnection.connect(args.dsn, autocommit=True))
        async with conn[0].cursor() as cur:
            await cur.executemany(upsert, [(r.id, r.total, r.note) for r in batch.rows])

    return import_rows(
        name=f"orders.import.{args.table}",
        input=In,
        tenant="none",
        source=lambda i: disk(args.root),
        key=lambda i: i.key,
        format="csv",
        columns=["id", "total", "note"],
        schema=Order,
        handle=handle,
        page_bytes=PAGE_BYTES,
        batch=BATCH,
        retry=Retry(attempts=10),  # every SIGKILL costs the attempt it held
    )


async def main() -> None:
    parser = argparse.ArgumentParser()
    for flag in ("--dsn", "--schema", "--root", "--table"):
        parser.add_argument(flag, required=True)
    parser.add_argument("--enqueue")
    parser.add_argument("--kill-at")
    args = parser.parse_args()
    imp = declare(args)
    driver = postgres_job_driver(args.dsn, schema=args.schema)
    worker = job_worker(
        jobs=[imp],
        driver=driver,
        visibility_timeout_ms=1500,
        poll_interval_ms=50,
        idle_poll_max_ms=200,
        handle_signals=False,
    )
    install_job_driver(driver)
    if args.enqueue:
        result = await imp.enqueue({"key": args.enqueue})
        print(result.id, flush=True)
    await worker.start()
    stop = asyncio.Event()
    asyncio.get_running_loop().add_signal_handler(signal.SIGTERM, stop.set)
    await stop.wait()
    await worker.stop()
    await driver.close()


if __name__ == "__main__":
    asyncio.run(main())
    sys.exit(0)
