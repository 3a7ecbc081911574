"""Benchmark of import_rows() (issue 18): a generated csv (8 columns) imported from disk()
through the Postgres job driver, against a bare csv.DictReader + the same pydantic validation.

    uv run python tooling/bench/import_bench.py [--sizes 20,200] [--dsn URL]

For each size (MB) one csv is generated under a temp folder (deleted at the end), then each
measurement runs in a FRESH child process (so one run's heap never flatters the next), once:

- ``bare``: ``csv.DictReader`` over the file, rows validated 500 at a time by
  ``TypeAdapter(list[Order]).validate_python`` — the peer the issue names.
- ``parse``: ``import_rows`` with a handle that does nothing: parse + validate + one step per
  page on the Postgres driver (the same worker path as an app's).
- ``upsert``: ``import_rows`` with a handle that upserts each batch into a real table: one
  ``COPY`` of the batch into a temp table, merged by one ``INSERT ... SELECT ... ON CONFLICT
  (id) DO UPDATE`` (then ``TRUNCATE``), in one transaction per batch.

Files up to 50 MB run ``--rounds`` rounds of the modes in turns (ABC CBA ...) and keep each
mode's median; larger files run once. Reported: rows/s, and peak RSS growth (the highest
resident set seen, sampled every 5 ms in a thread, minus the RSS just before the import
started). Targets: RSS growth of the 200 MB file
<= 64 MB and <= 1.5x the 20 MB one's; ``parse`` >= 0.5x ``bare``.
Everything runs on the server named by ``--dsn`` (default ``$DATABASE_URL`` or the shared test
database), in a schema of its own dropped at the end; bounded: one import per size and mode.
"""

from __future__ import annotations

import argparse
import asyncio
import csv
import json
import os
import random
import shutil
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from pydantic import BaseModel

MIB = 1_048_576
DEFAULT_DSN = "postgresql://postgres@127.0.0.1:5432/test"
COLUMNS = ["id", "customer", "email", "amount", "currency", "created", "status", "note"]


class Order(BaseModel):
    id: int
    customer: str
    email: str
    amount: int
    currency: str
    created: datetime
    status: str
    note: str | None = None


class In(BaseModel):
    key: str


# --- the file ---------------------------------------------------------------------------------


def generate(path: Path, size_mb: int) -> int:
    """A csv of about ``size_mb`` MB; answers its row count."""
    rng = random.Random(size_mb)
    start = datetime(2026, 1, 1, tzinfo=UTC)
    target = size_mb * 1_000_000
    rows = 0
    with path.open("w", newline="", encoding="utf-8") as f:
        writer = csv.writer(f, lineterminator="\n")
        writer.writerow(COLUMNS)
        while f.tell() < target:
            block = []
            for _ in range(5000):
                rows += 1
                note = "" if rows % 3 else f'gift, "wrapped"\nfor {rows}' if rows % 9 == 0 else "ok"
                block.append(
                    [
                        rows,
                        f"customer-{rng.randrange(10**6)}",
                        f"user{rng.randrange(10**6)}@example.com",
                        rng.randrange(10**7),
                        "EUR",
                        (start + timedelta(seconds=rows)).isoformat(),
                        "paid",
                        note,
                    ]
                )
            writer.writerows(block)
    return rows


# --- RSS ----------------------------------------------------------------------------------------

_PAGE = os.sysconf("SC_PAGE_SIZE")


def rss() -> int:
    with open("/proc/self/statm", "rb") as f:
        return int(f.read().split()[1]) * _PAGE


class Peak:
    def __enter__(self) -> Peak:
        self.start = self.peak = rss()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()
        return self

    def _run(self) -> None:
        while not self._stop.wait(0.005):
            self.peak = max(self.peak, rss())

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()
        self.peak = max(self.peak, rss())

    @property
    def growth(self) -> int:
        return self.peak - self.start


# --- the measurements (each in a child process) ------------------------------------------------


def run_bare(path: Path) -> dict[str, Any]:
    from pydantic import TypeAdapter

    adapter = TypeAdapter(list[Order])
    rows = 0
    with Peak() as peak:
        t0 = time.perf_counter()
        with path.open(newline="", encoding="utf-8") as f:
            batch: list[dict[str, str | None]] = []
            for row in csv.DictReader(f):
                if row["note"] == "":
                    row["note"] = None  # the same form coercion import_rows applies
                batch.append(row)
                if len(batch) == 500:
                    rows += len(adapter.validate_python(batch))
                    batch = []
            rows += len(adapter.validate_python(batch))
        seconds = time.perf_counter() - t0
    return {"rows": rows, "seconds": seconds, "rss_growth": peak.growth}


async def run_import(path: Path, dsn: str, schema: str, upsert: bool) -> dict[str, Any]:
    import psycopg
    from psycopg import sql

    from ultimat3.jobs import job_worker
    from ultimat3.jobs.adapter import install_job_driver
    from ultimat3.jobs.factories.import_rows import ImportBatch, import_rows
    from ultimat3.jobs.postgres import postgres_job_driver
    from ultimat3.storage import disk

    table = sql.Identifier(schema, "orders")
    conn = await psycopg.AsyncConnection.connect(dsn, autocommit=True)
    await conn.execute(
        sql.SQL("CREATE TEMP TABLE staging (LIKE {} INCLUDING DEFAULTS)").format(table)
    )
    merge = sql.SQL(
        "INSERT INTO {} SELECT * FROM staging ON CONFLICT (id) DO UPDATE SET"
        " amount = excluded.amount, status = excluded.status, note = excluded.note"
    ).format(table)

    async def handle(batch: ImportBatch[In, Order]) -> None:
        """One COPY of the batch into a temp table, merged by one upsert."""
        if not upsert:
            return
        async with conn.transaction(), conn.cursor() as cur:
            async with cur.copy(
                "COPY staging (id, customer, email, amount, currency, created, status, note)"
                " FROM STDIN"
            ) as copy:
                for r in batch.rows:
                    await copy.write_row(
                        (
                            r.id,
                            r.customer,
                            r.email,
                            r.amount,
                            r.currency,
                            r.created,
                            r.status,
                            r.note,
                        )
                    )
            await cur.execute(merge)
            await cur.execute("TRUNCATE staging")

    imp = import_rows(
        name=f"bench.import.{uuid.uuid4().hex[:8]}",
        input=In,
        tenant="none",
        source=lambda i: disk(path.parent),
        key=lambda i: i.key,
        format="csv",
        columns=COLUMNS,
        schema=Order,
        handle=handle,
    )
    driver = postgres_job_driver(dsn, schema=schema)
    install_job_driver(driver)
    worker = job_worker(
        jobs=[imp], driver=driver, handle_signals=False, poll_interval_ms=20, idle_poll_max_ms=50
    )
    poll = await psycopg.AsyncConnection.connect(dsn, autocommit=True)
    state = sql.SQL("SELECT state, result FROM {} WHERE id = %s").format(
        sql.Identifier(schema, "x_jobs")
    )
    with Peak() as peak:
        t0 = time.perf_counter()
        result = await imp.enqueue({"key": path.name})
        await worker.start()
        while True:
            cur = await poll.execute(state, (result.id,))
            row = await cur.fetchone()
            assert row is not None
            if row[0] in ("done", "failed", "dead"):
                break
            await asyncio.sleep(0.05)
        seconds = time.perf_counter() - t0
    await worker.stop()
    await driver.close()
    await conn.close()
    await poll.close()
    assert row[0] == "done", row
    return {
        "rows": row[1]["rows"],
        "pages": row[1]["pages"],
        "seconds": seconds,
        "rss_growth": peak.growth,
    }


def child(argv: list[str]) -> None:
    mode, path, dsn, schema = argv
    if mode == "bare":
        out = run_bare(Path(path))
    else:
        out = asyncio.run(run_import(Path(path), dsn, schema, upsert=mode == "upsert"))
    print(json.dumps(out))


# --- the run --------------------------------------------------------------------------------------


async def setup(dsn: str, schema: str) -> None:
    import psycopg
    from psycopg import sql

    from ultimat3.jobs.postgres import migrate

    await migrate(dsn, schema=schema)
    async with await psycopg.AsyncConnection.connect(dsn, autocommit=True) as conn:
        await conn.execute(
            sql.SQL(
                "CREATE TABLE {} (id bigint PRIMARY KEY, customer text, email text, amount bigint,"
                " currency text, created timestamptz, status text, note text)"
            ).format(sql.Identifier(schema, "orders"))
        )


async def teardown(dsn: str, schema: str) -> None:
    import psycopg
    from psycopg import sql

    async with await psycopg.AsyncConnection.connect(dsn, autocommit=True) as conn:
        await conn.execute(
            sql.SQL("DROP SCHEMA IF EXISTS {} CASCADE").format(sql.Identifier(schema))
        )


def measure(mode: str, path: Path, dsn: str, schema: str) -> dict[str, Any]:
    proc = subprocess.run(
        [sys.executable, __file__, "--child", mode, str(path), dsn, schema],
        capture_output=True,
        text=True,
        timeout=900,
    )
    if proc.returncode != 0:
        raise SystemExit(f"{mode} on {path.name} failed:\n{proc.stderr[-3000:]}")
    return dict(json.loads(proc.stdout.strip().splitlines()[-1]))


def main() -> None:
    if len(sys.argv) > 1 and sys.argv[1] == "--child":
        child(sys.argv[2:])
        return
    parser = argparse.ArgumentParser()
    parser.add_argument("--sizes", default="20,200", help="file sizes in MB, comma-separated")
    parser.add_argument("--dsn", default=os.environ.get("DATABASE_URL") or DEFAULT_DSN)
    parser.add_argument(
        "--rounds",
        type=int,
        default=3,
        help="rounds of each mode for files up to 50 MB (the median is kept); "
        "larger files run once",
    )
    parser.add_argument("--modes", default="bare,parse,upsert")
    args = parser.parse_args()
    folder = Path(tempfile.mkdtemp(prefix="x-import-bench-"))
    schema = f"x_bench_import_{uuid.uuid4().hex[:8]}"
    results: dict[int, dict[str, Any]] = {}
    try:
        asyncio.run(setup(args.dsn, schema))
        for size in (int(s) for s in args.sizes.split(",")):
            path = folder / f"orders-{size}mb.csv"
            t0 = time.perf_counter()
            rows = generate(path, size)
            print(
                f"# {path.name}: {path.stat().st_size / 1e6:.0f} MB, {rows:,} rows "
                f"(generated in {time.perf_counter() - t0:.0f} s)",
                flush=True,
            )
            results[size] = {"rows": rows, "bytes": path.stat().st_size}
            modes = args.modes.split(",")
            rounds = args.rounds if size <= 50 else 1
            runs: dict[str, list[dict[str, Any]]] = {m: [] for m in modes}
            for n in range(rounds):
                for mode in modes if n % 2 == 0 else modes[::-1]:  # ABC CBA: the same weather
                    out = measure(mode, path, args.dsn, schema)
                    assert out["rows"] == rows, (mode, out)
                    runs[mode].append(out)
                    print(
                        f"  {mode:6} {rows / out['seconds']:>10,.0f} rows/s  "
                        f"{out['seconds']:6.1f} s  RSS +{out['rss_growth'] / MIB:5.1f} MiB"
                        + (f"  pages {out['pages']}" if "pages" in out else ""),
                        flush=True,
                    )
            for mode, outs in runs.items():
                outs.sort(key=lambda o: o["seconds"])
                results[size][mode] = outs[len(outs) // 2]  # the median round
            path.unlink()
    finally:
        asyncio.run(teardown(args.dsn, schema))
        shutil.rmtree(folder, ignore_errors=True)
    print()
    print(
        "| file | rows | bare rows/s | import (parse) rows/s | ratio | import + upsert rows/s "
        "| RSS bare | RSS parse | RSS upsert |"
    )
    print("|---|---|---|---|---|---|---|---|---|")
    for size, r in results.items():
        if not all(m in r for m in ("bare", "parse", "upsert")):
            continue
        bare = r["rows"] / r["bare"]["seconds"]
        parse = r["rows"] / r["parse"]["seconds"]
        up = r["rows"] / r["upsert"]["seconds"]
        print(
            f"| {size} MB | {r['rows']:,} | {bare:,.0f} | {parse:,.0f} | {parse / bare:.2f}x "
            f"| {up:,.0f} | +{r['bare']['rss_growth'] / MIB:.0f} MiB "
            f"| +{r['parse']['rss_growth'] / MIB:.0f} MiB "
            f"| +{r['upsert']['rss_growth'] / MIB:.0f} MiB |"
        )
    sizes = sorted(results)
    if len(sizes) >= 2 and all("upsert" in results[s] for s in sizes):
        small, big = results[sizes[0]], results[sizes[-1]]
        for mode in ("parse", "upsert"):
            g_small = max(small[mode]["rss_growth"], 1)
            g_big = big[mode]["rss_growth"]
            print(
                f"# {mode}: RSS growth {sizes[-1]} MB / {sizes[0]} MB = {g_big / g_small:.2f}x "
                f"(target <= 1.5x); {sizes[-1]} MB: +{g_big / MIB:.0f} MiB (target <= 64)"
            )


if __name__ == "__main__":
    main()
