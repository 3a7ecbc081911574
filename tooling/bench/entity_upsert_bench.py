"""upsert_all against the hand-written ways, on one Postgres, in one run (issue 21).

    uv run python tooling/bench/entity_upsert_bench.py                # 100,000 rows, 3 rounds
    uv run python tooling/bench/entity_upsert_bench.py --rows 20000 --rounds 1

Each round writes ``--rows`` rows in batches of 1,000 three ways, each into a fresh table of the
same shape (uuid key, text, bigint, timestamptz), twice: a pass of new rows (inserts) and a pass
over the same keys (updates):

- ``upsert_all``: ``db.t.upsert_all(batch, on_conflict=["id"])`` — checks every value, then
  one ``INSERT ... VALUES ... ON CONFLICT DO UPDATE`` per 1,000 rows;
- ``executemany``: psycopg's ``cursor.executemany`` of a one-row ``INSERT ... ON CONFLICT`` per
  batch (psycopg 3 pipelines it);
- ``copy+upsert``: ``COPY`` of the batch into a temp table, then one
  ``INSERT ... SELECT ... ON CONFLICT DO UPDATE``.

All three run in one transaction per batch, batch by batch in turns (the order rotating), so a
machine shared with other work slows all three alike. Prints rows/s per way and pass (the median
of the rounds) and the ratio of the best hand-written way to upsert_all. Bounded: one connection, a
schema of its own dropped at the end; loopback only (``$DATABASE_URL`` or the local test server).
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import time
import uuid
from datetime import UTC, datetime, timedelta
from typing import Any

from psycopg import sql
from psycopg_pool import AsyncConnectionPool

from ultimat3.entity import bigint, database, entity, text, timestamp
from ultimat3.entity import uuid as uuid_col

BATCH = 1_000
DSN = os.environ.get("DATABASE_URL") or "postgresql://postgres@127.0.0.1:5432/test"

rows_entity = entity(
    "bench_rows",
    columns={"id": uuid_col().primary_key(), "name": text(), "n": bigint(), "at": timestamp()},
)

DDL = (
    "CREATE TABLE {} (id uuid PRIMARY KEY, name text NOT NULL, n bigint NOT NULL, "
    "at timestamptz NOT NULL)"
)
UPSERT_ONE = (
    "INSERT INTO {} (id, name, n, at) VALUES (%s, %s, %s, %s) ON CONFLICT (id) DO UPDATE "
    "SET name = EXCLUDED.name, n = EXCLUDED.n, at = EXCLUDED.at"
)


def make_rows(count: int, salt: int) -> list[dict[str, Any]]:
    base = datetime(2026, 1, 1, tzinfo=UTC)
    ids = [str(uuid.UUID(int=i + 1)) for i in range(count)]
    return [
        {"id": ids[i], "name": f"row {i} {salt}", "n": i * salt, "at": base + timedelta(seconds=i)}
        for i in range(count)
    ]


Batch = list[dict[str, Any]]


async def way_upsert_all(pool: AsyncConnectionPool[Any], schema: str, batch: Batch) -> None:
    db = database(pool, [rows_entity], schema=schema)
    await db.bench_rows.upsert_all(batch, on_conflict=["id"])


async def way_executemany(pool: AsyncConnectionPool[Any], schema: str, batch: Batch) -> None:
    stmt = sql.SQL(UPSERT_ONE).format(sql.Identifier(schema, "bench_rows"))
    async with pool.connection() as conn, conn.transaction(), conn.cursor() as cur:
        await cur.executemany(
            stmt, [(uuid.UUID(r["id"]), r["name"], r["n"], r["at"]) for r in batch]
        )


async def way_copy(pool: AsyncConnectionPool[Any], schema: str, batch: Batch) -> None:
    table = sql.Identifier(schema, "bench_rows")
    async with pool.connection() as conn, conn.transaction(), conn.cursor() as cur:
        await cur.execute(
            "CREATE TEMP TABLE IF NOT EXISTS bench_stage (id uuid, name text, n bigint, "
            "at timestamptz) ON COMMIT DELETE ROWS"
        )
        async with cur.copy("COPY bench_stage (id, name, n, at) FROM STDIN") as copy:
            for r in batch:
                await copy.write_row((uuid.UUID(r["id"]), r["name"], r["n"], r["at"]))
        await cur.execute(
            sql.SQL(
                "INSERT INTO {} (id, name, n, at) SELECT id, name, n, at FROM bench_stage "
                "ON CONFLICT (id) DO UPDATE SET name = EXCLUDED.name, n = EXCLUDED.n, "
                "at = EXCLUDED.at"
            ).format(table)
        )


WAYS = {"upsert_all": way_upsert_all, "executemany": way_executemany, "copy+upsert": way_copy}


async def one_round(pool: AsyncConnectionPool[Any], rows: dict[str, Batch]) -> dict[str, float]:
    """Each way into a schema of its own; batch by batch in turns (the order rotating), so the
    three meet the same machine state. Answers rows/s per (way, pass)."""
    schemas = {name: f"x_bench_ent_{uuid.uuid4().hex[:10]}" for name in WAYS}
    spent: dict[str, float] = {}
    async with pool.connection() as conn:
        for schema in schemas.values():
            await conn.execute(sql.SQL("CREATE SCHEMA {}").format(sql.Identifier(schema)))
            await conn.execute(sql.SQL(DDL).format(sql.Identifier(schema, "bench_rows")))
    try:
        names = list(WAYS)
        for label, data in rows.items():
            for i, start in enumerate(range(0, len(data), BATCH)):
                batch = data[start : start + BATCH]
                for name in names[i % 3 :] + names[: i % 3]:
                    t0 = time.perf_counter()
                    await WAYS[name](pool, schemas[name], batch)
                    key = f"{name} {label}"
                    spent[key] = spent.get(key, 0.0) + time.perf_counter() - t0
    finally:
        async with pool.connection() as conn:
            for schema in schemas.values():
                await conn.execute(
                    sql.SQL("DROP SCHEMA IF EXISTS {} CASCADE").format(sql.Identifier(schema))
                )
    n = len(next(iter(rows.values())))
    return {k: n / v for k, v in spent.items()}


async def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--rows", type=int, default=100_000)
    ap.add_argument("--rounds", type=int, default=3)
    args = ap.parse_args()
    rows = {"insert": make_rows(args.rows, 1), "update": make_rows(args.rows, 2)}
    results: dict[str, list[float]] = {}
    async with AsyncConnectionPool(DSN, min_size=1, max_size=1, open=False) as pool:
        for rnd in range(args.rounds):
            rates = await one_round(pool, rows)
            for key, rate in rates.items():
                results.setdefault(key, []).append(rate)
            print(
                f"round {rnd + 1}: " + "  ".join(f"{k} {v:,.0f}/s" for k, v in rates.items()),
                flush=True,
            )
    print(f"\nmedians of {args.rounds} round(s), {args.rows:,} rows, batches of {BATCH:,}:")
    for label in ("insert", "update"):
        med = {n: statistics.median(results[f"{n} {label}"]) for n in WAYS}
        best = max(med["executemany"], med["copy+upsert"])
        cells = "  ".join(f"{n} {v:,.0f}/s" for n, v in med.items())
        print(
            f"  {label}: {cells}  best hand-written / upsert_all = {best / med['upsert_all']:.2f}x"
        )


if __name__ == "__main__":
    asyncio.run(main())
