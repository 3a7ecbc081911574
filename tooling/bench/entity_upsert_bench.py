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

All three run in one transaction per batch. Prints rows/s per way and pass (the median of the
rounds) and the ratio of upsert_all to the best hand-written way. Bounded: one connection, a
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

import psycopg
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

DDL = "CREATE TABLE {} (id uuid PRIMARY KEY, name text NOT NULL, n bigint NOT NULL, at timestamptz NOT NULL)"
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


async def way_upsert_all(
    pool: AsyncConnectionPool[Any], schema: str, rows: list[dict[str, Any]]
) -> None:
    db = database(pool, [rows_entity], schema=schema)
    for start in range(0, len(rows), BATCH):
        await db.bench_rows.upsert_all(rows[start : start + BATCH], on_conflict=["id"])


async def way_executemany(
    pool: AsyncConnectionPool[Any], schema: str, rows: list[dict[str, Any]]
) -> None:
    stmt = sql.SQL(UPSERT_ONE).format(sql.Identifier(schema, "bench_rows"))
    async with pool.connection() as conn:
        for start in range(0, len(rows), BATCH):
            batch = rows[start : start + BATCH]
            async with conn.transaction(), conn.cursor() as cur:
                await cur.executemany(
                    stmt, [(uuid.UUID(r["id"]), r["name"], r["n"], r["at"]) for r in batch]
                )


async def way_copy(pool: AsyncConnectionPool[Any], schema: str, rows: list[dict[str, Any]]) -> None:
    table = sql.Identifier(schema, "bench_rows")
    async with pool.connection() as conn:
        for start in range(0, len(rows), BATCH):
            batch = rows[start : start + BATCH]
            async with conn.transaction(), conn.cursor() as cur:
                await cur.execute(
                    "CREATE TEMP TABLE IF NOT EXISTS bench_stage (id uuid, name text, "
                    "n bigint, at timestamptz) ON COMMIT DELETE ROWS"
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


async def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--rows", type=int, default=100_000)
    ap.add_argument("--rounds", type=int, default=3)
    args = ap.parse_args()
    inserts, updates = make_rows(args.rows, 1), make_rows(args.rows, 2)
    results: dict[tuple[str, str], list[float]] = {}
    async with AsyncConnectionPool(DSN, min_size=1, max_size=1, open=False) as pool:
        for rnd in range(args.rounds):
            for name, way in WAYS.items():
                schema = f"x_bench_ent_{uuid.uuid4().hex[:10]}"
                async with pool.connection() as conn:
                    await conn.execute(sql.SQL("CREATE SCHEMA {}").format(sql.Identifier(schema)))
                    await conn.execute(sql.SQL(DDL).format(sql.Identifier(schema, "bench_rows")))
                try:
                    for label, rows in (("insert", inserts), ("update", updates)):
                        t0 = time.perf_counter()
                        await way(pool, schema, rows)
                        rate = len(rows) / (time.perf_counter() - t0)
                        results.setdefault((name, label), []).append(rate)
                        print(f"round {rnd + 1} {name:12} {label}: {rate:9.0f} rows/s", flush=True)
                finally:
                    async with pool.connection() as conn:
                        await conn.execute(
                            sql.SQL("DROP SCHEMA {} CASCADE").format(sql.Identifier(schema))
                        )
    print(f"\nmedians of {args.rounds} round(s), {args.rows} rows, batches of {BATCH}:")
    for label in ("insert", "update"):
        med = {n: statistics.median(results[(n, label)]) for n in WAYS}
        best_hand = max(med["executemany"], med["copy+upsert"])
        cells = "  ".join(f"{n} {v:,.0f}/s" for n, v in med.items())
        print(
            f"  {label}: {cells}  best hand-written / upsert_all = {best_hand / med['upsert_all']:.2f}x"
        )


if __name__ == "__main__":
    asyncio.run(main())
