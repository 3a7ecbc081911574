"""Memory and Postgres answer alike: random sequences of writes and queries applied to both
give the same rows, counts, series and refusal codes."""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime, timedelta
from typing import Any

import psycopg
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from psycopg import sql

from ultimat3.core import XError
from ultimat3.entity import database, entity, integer, memory_database, text, timestamp, uuid

IDS = [f"0190a5b2-0000-7000-8000-{i:012d}" for i in range(6)]
items = entity(
    "items",
    columns={
        "id": uuid().primary_key(),
        "title": text(),
        "n": integer().nullable(),
        "at": timestamp().nullable(),
    },
    soft_delete=True,
)

titles = st.sampled_from(["a", "B", "ab", "é", "a_b", "%"])
ns = st.none() | st.integers(-3, 3)
ats = st.none() | st.integers(0, 60).map(
    lambda h: datetime(2026, 10, 24, tzinfo=UTC) + timedelta(hours=h)
)
rows = st.fixed_dictionaries({"id": st.sampled_from(IDS), "title": titles, "n": ns, "at": ats})
cmp = st.tuples(
    st.sampled_from(["n", "title", "at", "id"]),
    st.sampled_from(["eq", "ne", "lt", "lte", "gt", "gte"]),
)
ops = st.one_of(
    st.tuples(st.just("insert"), rows),
    st.tuples(st.just("upsert"), st.lists(rows, max_size=5)),
    st.tuples(st.just("update"), ns, titles),
    st.tuples(st.just("delete"), ns),
    st.tuples(st.just("purge"), st.sampled_from(IDS)),
    st.tuples(st.just("query"), cmp, st.booleans(), st.none() | st.integers(0, 4)),
    st.tuples(st.just("like"), st.sampled_from(["a%", "%b", "_", "a\\_b", "\\%"])),
    st.tuples(st.just("in"), st.lists(ns.filter(lambda v: v is not None), max_size=3)),
    st.tuples(
        st.just("series"),
        st.sampled_from(["hour", "day"]),
        st.sampled_from(["UTC", "Europe/London", "America/Sao_Paulo"]),
    ),
)

VALUES = {"n": 1, "title": "ab", "at": datetime(2026, 10, 25, 1, tzinfo=UTC), "id": IDS[2]}


async def apply(db: Any, op: tuple[Any, ...]) -> Any:
    t = db.table("items")
    kind = op[0]
    try:
        if kind == "insert":
            return await t.insert(op[1])
        if kind == "upsert":
            return await t.upsert_all(op[1], on_conflict=["id"])
        if kind == "update":
            return await t.where(n=op[1]).update(title=op[2])
        if kind == "delete":
            return await t.where(n=op[1]).delete()
        if kind == "purge":
            return await t.where(id=op[1]).with_deleted().delete()
        if kind == "query":
            (col, o), desc, limit = op[1], op[2], op[3]
            q = t.where().and_where(col, o, VALUES[col]).order_by(col, desc=desc)
            if limit is not None:
                q = q.limit(limit)
            return await q.all()
        if kind == "like":
            return await t.where().and_where("title", "like", op[1]).count()
        if kind == "in":
            return await t.where().and_where("n", "in", op[1]).order_by("n").all()
        points = await t.where().series(on="at", unit=op[1], time_zone=op[2])
        return [(p.bucket.astimezone(UTC), p.value) for p in points]
    except XError as exc:
        return ("refused", exc.code)


def _comparable(answer: Any) -> Any:
    """Rows with deleted_at reduced to whether it is set (the two clocks differ)."""
    if isinstance(answer, dict):
        return {k: (v is not None if k == "deleted_at" else v) for k, v in answer.items()}
    if isinstance(answer, list):
        return [_comparable(a) for a in answer]
    return answer


@pytest.mark.timeout(600)  # many Postgres round trips on a machine maybe shared
@settings(
    max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(sequence=st.lists(ops, min_size=1, max_size=15))
def test_memory_and_postgres_answer_alike(
    sync_schema: str, database_url: str, sequence: list[tuple[Any, ...]]
) -> None:
    async def run() -> None:
        mem = memory_database([items])
        async with database(database_url, [items], schema=sync_schema) as pg:
            await pg.migrate()
            await pg.table("items").where().with_deleted().delete()
            for i, op in enumerate(sequence):
                want = _comparable(await apply(mem, op))
                got = _comparable(await apply(pg, op))
                assert got == want, f"step {i} {op!r}: postgres {got!r}, memory {want!r}"
            every = _comparable(await pg.table("items").where().with_deleted().all())
            assert every == _comparable(await mem.table("items").where().with_deleted().all())

    try:
        asyncio.run(run())
    finally:
        _drop_schema(database_url, sync_schema)


def _drop_schema(url: str, schema: str) -> None:
    """Each example drops what it made, so a run cut short leaves nothing behind."""
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute(sql.SQL("DROP SCHEMA IF EXISTS {} CASCADE").format(sql.Identifier(schema)))
