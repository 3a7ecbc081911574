"""Benchmarks of the entity factories (issue 24): one person's erase, and a rollup.

    uv run python tooling/bench/subject_bench.py                  # both, 3 rounds each
    uv run python tooling/bench/subject_bench.py --only erase --related 20000 --rounds 1
    uv run python tooling/bench/subject_bench.py --only rollup --events 100000

``erase``: one member with ``--related`` rows of theirs (default 100,000: a fifth comments, four
likes on each comment) beside a bystander with a tenth as many, erased by ``subject_erase()``
(``page_size`` 500) through ``JobHarness`` (the memory job driver by default, ``--driver
postgres`` for the Postgres one in a schema of its own). Reported: wall time, pages (steps) and
pages/s, entity statements (counted at ``PgStore``'s three execution paths) and statements per
page, the rows each table lost. The bystander's rows are checked untouched.

``rollup``: ``--events`` rows (default 1,000,000) over 30 days, rolled up per ``--unit`` (default
hour) in UTC with a 30-day
lookback — every row inside the window — by ``rollup()`` (``series()`` on the server, one
``upsert_all``) against the hand-written ``INSERT ... SELECT date_trunc(unit, created_at, 'UTC'),
count(*) ... GROUP BY 1 ON CONFLICT DO UPDATE`` over the same window, in turns (the order
alternating), each into a table of its own, both ending with the same rows (checked).

Medians of ``--rounds`` (default 3). Every round on a fresh schema of the server ``$DATABASE_URL``
names (default the local test server), dropped at the end; loopback only; bounded (one erase and
one rollup pair per round). The machine is shared: read the ratios, not the absolute rates.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import time
import uuid
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from typing import Any

import psycopg
from psycopg import sql
from pydantic import BaseModel

from ultimat3.core import FrozenClock
from ultimat3.entity import Index, bigint, database, entity, text, timestamp
from ultimat3.entity import uuid as uuid_col
from ultimat3.entity._pg_store import PgStore
from ultimat3.jobs import Anonymize, Bucket, define_subject, rollup, subject_erase
from ultimat3.jobs.testing import JobHarness

DSN = os.environ.get("DATABASE_URL") or "postgresql://postgres@127.0.0.1:5432/test"

members = entity("members", columns={
    "id": uuid_col().primary_key(), "email": text().personal_data("email"),
})  # fmt: skip
# the walk reads and writes by the link columns: an app indexes them, and so does the bench
comments = entity("comments", columns={
    "id": uuid_col().primary_key(), "member_id": uuid_col().references(members), "body": text(),
}, indexes=[Index(("member_id",))])  # fmt: skip
likes = entity("likes", columns={
    "id": uuid_col().primary_key(), "comment_id": uuid_col().references(comments),
}, indexes=[Index(("comment_id",))])  # fmt: skip
events = entity("events", columns={"id": uuid_col().primary_key(), "created_at": timestamp()})
per_hour = entity(
    "per_hour",
    columns={"hour": timestamp(), "n": bigint()},
    indexes=[Index(("hour",), unique=True)],
)
hand_per_hour = entity(
    "hand_per_hour",
    columns={"hour": timestamp(), "n": bigint()},
    indexes=[Index(("hour",), unique=True)],
)


class Erase(BaseModel):
    member_id: str


class Counter:
    """Entity statements, counted where ``PgStore`` executes them."""

    def __init__(self) -> None:
        self.n = 0
        self._saved: dict[str, Callable[..., Any]] = {}

    def __enter__(self) -> Counter:
        for name in ("_fetch", "_tuples", "_rowcount"):
            original = getattr(PgStore, name)
            self._saved[name] = original

            def counted(*a: Any, _original: Any = original, **k: Any) -> Any:
                self.n += 1
                return _original(*a, **k)

            setattr(PgStore, name, counted)
        return self

    def __exit__(self, *exc: object) -> None:
        for name, original in self._saved.items():
            setattr(PgStore, name, original)


def _schema(kind: str) -> str:
    return f"bench_{kind}_{uuid.uuid4().hex[:10]}"


async def _sql(statement: str, *params: Any) -> None:
    async with await psycopg.AsyncConnection.connect(DSN, autocommit=True) as conn:
        await conn.execute(statement, params or None)


async def _drop(schema: str) -> None:
    async with await psycopg.AsyncConnection.connect(DSN, autocommit=True) as conn:
        await conn.execute(
            sql.SQL("DROP SCHEMA IF EXISTS {} CASCADE").format(sql.Identifier(schema))
        )


# --- erase -------------------------------------------------------------------------------------


async def _seed_member(schema: str, member: str, n_comments: int, likes_each: int) -> None:
    q = f'"{schema}"'
    await _sql(f"INSERT INTO {q}.members (id, email) VALUES (%s, %s)", member, f"{member}@x.org")
    await _sql(
        f"INSERT INTO {q}.comments (id, member_id, body) SELECT gen_random_uuid(), %s, "
        "'comment ' || i FROM generate_series(1, %s) i",
        member,
        n_comments,
    )
    await _sql(
        f"INSERT INTO {q}.likes (id, comment_id) SELECT gen_random_uuid(), c.id "
        f"FROM {q}.comments c, generate_series(1, %s) k WHERE c.member_id = %s",
        likes_each,
        member,
    )


async def erase_round(related: int, driver_kind: str) -> dict[str, Any]:
    schema = _schema("erase")
    db = database(DSN, [members, comments, likes], schema=schema)
    driver: Any = None
    try:
        await db.migrate()
        n_comments = related // 5
        ann, bob = str(uuid.uuid4()), str(uuid.uuid4())
        await _seed_member(schema, ann, n_comments, 4)
        await _seed_member(schema, bob, max(1, n_comments // 10), 4)
        await _sql(f'ANALYZE "{schema}".comments')
        await _sql(f'ANALYZE "{schema}".likes')
        bob_before = await db.likes.count()
        subject = define_subject(
            members, database=db, key=lambda i: i.member_id,
            tables={"members": Anonymize({"email": "erased@example.invalid"}),
                    "comments": "delete", "likes": "delete"},
        )  # fmt: skip
        job = subject_erase(name="members.erase", input=Erase, subject=subject, page_size=500)
        if driver_kind == "postgres":
            from ultimat3.jobs.postgres import migrate, postgres_job_driver

            await migrate(DSN, schema=schema)
            driver = postgres_job_driver(DSN, schema=schema)
        harness = JobHarness(jobs=[job], driver=driver)
        with Counter() as counter:
            start = time.perf_counter()
            trace = await harness(job, Erase(member_id=ann))
            took = time.perf_counter() - start
        assert trace.state == "done", trace.last_error
        rows = {t["table"]: t["rows"] for t in trace.result["tables"]}
        assert rows["comments"] == n_comments and rows["likes"] == 4 * n_comments, rows
        assert await db.likes.count() == bob_before - 4 * n_comments  # bob's are all there
        steps = list(trace.steps)
        writes = [s for s in steps if s.startswith("subject:erase:")]
        return {
            "seconds": took,
            "pages": len(steps),
            "write_pages": len(writes),
            "statements": counter.n,
            "rows": sum(rows.values()),
        }
    finally:
        if driver is not None and hasattr(driver, "close"):
            await driver.close()
        await db.close()
        await _drop(schema)


# --- rollup ------------------------------------------------------------------------------------

END = datetime(2026, 11, 30, tzinfo=UTC)
HAND = """
INSERT INTO {into} (hour, n)
SELECT date_trunc(%s, created_at, 'UTC'), count(*)
FROM {events} WHERE created_at >= %s GROUP BY 1
ON CONFLICT (hour) DO UPDATE SET n = EXCLUDED.n
"""


async def rollup_round(n_events: int, first: str, unit: str) -> dict[str, float]:
    schema = _schema("rollup")
    db = database(DSN, [events, per_hour, hand_per_hour], schema=schema)
    try:
        await db.migrate()
        start_at = END - timedelta(days=30)
        step_s = (30 * 86400) / n_events
        await _sql(
            f'INSERT INTO "{schema}".events (id, created_at) SELECT gen_random_uuid(), '
            "%s::timestamptz + (i * %s) * interval '1 second' FROM generate_series(0, %s - 1) i",
            start_at,
            step_s,
            n_events,
        )
        await _sql(f'VACUUM ANALYZE "{schema}".events')

        def source(w: Any) -> Any:
            return (
                db.events.where()
                .and_where("created_at", "gte", w.since)
                .series(on="created_at", unit=w.bucket.unit, time_zone=w.bucket.time_zone)
            )

        job = rollup(
            name="events.per_hour", into=per_hour, table=lambda: db.per_hour, key=["hour"],
            lookback="30d", bucket=Bucket(unit=unit, time_zone="UTC"), source=source,
            map=lambda p, w: {"hour": p.bucket, "n": p.value},
        )  # fmt: skip
        since = END - timedelta(days=30)

        async def ours() -> float:
            harness = JobHarness(jobs=[job], clock=FrozenClock(END))
            t0 = time.perf_counter()
            trace = await harness(job, {})
            took = time.perf_counter() - t0
            assert trace.state == "done", trace.last_error
            return took

        async def hand() -> float:
            stmt = sql.SQL(HAND).format(
                into=sql.Identifier(schema, "hand_per_hour"),
                events=sql.Identifier(schema, "events"),
            )
            t0 = time.perf_counter()
            async with await psycopg.AsyncConnection.connect(DSN, autocommit=True) as conn:
                await conn.execute(stmt, (unit, since))
            return time.perf_counter() - t0

        order = [("rollup", ours), ("hand", hand)]
        if first == "hand":
            order.reverse()
        out = {name: await fn() for name, fn in order}
        a = {r["hour"]: r["n"] for r in await db.per_hour.all()}
        b = {r["hour"]: r["n"] for r in await db.hand_per_hour.all()}
        assert a == b and sum(a.values()) == n_events, (len(a), len(b), sum(a.values()))
        out["buckets"] = len(a)
        return out
    finally:
        await db.close()
        await _drop(schema)


def _load() -> str:
    try:
        return "/".join(f"{x:.1f}" for x in os.getloadavg())
    except OSError:
        return "?"


async def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--only", choices=("erase", "rollup"))
    p.add_argument("--related", type=int, default=100_000)
    p.add_argument("--events", type=int, default=1_000_000)
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--driver", choices=("memory", "postgres"), default="memory")
    p.add_argument("--unit", choices=("hour", "day"), default="hour", help="the rollup's bucket")
    a = p.parse_args()
    print(f"server {DSN.rsplit('@', 1)[-1]}, load average {_load()} (1/5/15 min, 2 cores, shared)")
    if a.only in (None, "erase"):
        runs = []
        for n in range(a.rounds):
            r = await erase_round(a.related, a.driver)
            runs.append(r)
            print(
                f"erase round {n + 1}: {r['seconds']:.2f} s, {r['pages']} pages "
                f"({r['write_pages']} writing), {r['statements']} statements, {r['rows']} rows "
                f"[load {_load()}]"
            )
        secs = statistics.median(r["seconds"] for r in runs)
        pages = runs[0]["pages"]
        stmts = runs[0]["statements"]
        print(
            f"erase of one member with {a.related:,} related rows ({a.driver} job driver), median "
            f"of {a.rounds}: {secs:.2f} s, {pages / secs:.1f} pages/s, {stmts / pages:.1f} "
            f"statements per page ({stmts} statements, {pages} pages), "
            f"{runs[0]['rows'] / secs:,.0f} rows/s"
        )
    if a.only in (None, "rollup"):
        rounds = []
        for n in range(a.rounds):
            r = await rollup_round(a.events, "hand" if n % 2 else "rollup", a.unit)
            rounds.append(r)
            print(
                f"rollup round {n + 1}: rollup() {r['rollup']:.2f} s, hand-written "
                f"{r['hand']:.2f} s, {int(r['buckets'])} buckets [load {_load()}]"
            )
        ours = statistics.median(r["rollup"] for r in rounds)
        hand = statistics.median(r["hand"] for r in rounds)
        ratio = statistics.median(r["rollup"] / r["hand"] for r in rounds)
        print(
            f"rollup per {a.unit} over {a.events:,} rows, median of {a.rounds}: "
            f"rollup() {ours:.2f} s, "
            f"hand-written insert ... select ... on conflict {hand:.2f} s; rollup() / "
            f"hand-written: {ours / hand:.2f}x of the medians, {ratio:.2f}x the median round"
        )


if __name__ == "__main__":
    asyncio.run(main())
