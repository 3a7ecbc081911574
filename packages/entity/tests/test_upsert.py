"""upsert_all: random batches (with repeated keys inside a batch) equal applying the rows one
by one; one statement per 1,000 rows, all in one transaction."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any

import psycopg
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from psycopg import sql

from ultimat3.core import XError
from ultimat3.entity import UPSERT_CHUNK, Index, bigint, database, entity, memory_database, text

MakeDb = Callable[..., Any]

tally = entity(
    "tally",
    columns={"k": text(), "part": bigint(), "v": bigint(), "note": text().nullable()},
    indexes=[Index(("k", "part"), unique=True)],
)

rows_st = st.lists(
    st.fixed_dictionaries(
        {
            "k": st.sampled_from(["a", "b", "c", "order", "é"]),
            "part": st.integers(0, 3),
            "v": st.integers(-(2**63), 2**63 - 1),
            "note": st.none()
            | st.text(st.characters(codec="utf-8", blacklist_characters="\x00"), max_size=5),
        }
    ),
    max_size=30,
)


def one_by_one(model: dict[tuple[str, int], dict[str, Any]], rows: list[dict[str, Any]]) -> None:
    for r in rows:
        model[(r["k"], r["part"])] = dict(r)


@pytest.mark.timeout(600)  # many Postgres round trips on a machine maybe shared
@settings(
    max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(batches=st.lists(rows_st, max_size=4))
def test_upsert_all_equals_upserting_one_by_one_on_postgres(
    sync_schema: str, database_url: str, batches: list[list[dict[str, Any]]]
) -> None:
    async def run() -> None:
        async with database(database_url, [tally], schema=sync_schema) as db:
            await db.migrate()
            await db.tally.where().delete()
            model: dict[tuple[str, int], dict[str, Any]] = {}
            for batch in batches:
                await db.tally.upsert_all(batch, on_conflict=["k", "part"])
                one_by_one(model, batch)
            got = {(r["k"], r["part"]): r for r in await db.tally.all()}
            assert got == model

    try:
        asyncio.run(run())
    finally:
        _drop_schema(database_url, sync_schema)


@settings(max_examples=60, deadline=None)
@given(batches=st.lists(rows_st, max_size=4))
async def test_upsert_all_equals_upserting_one_by_one_in_memory(
    batches: list[list[dict[str, Any]]],
) -> None:
    db = memory_database([tally])
    model: dict[tuple[str, int], dict[str, Any]] = {}
    for batch in batches:
        await db.tally.upsert_all(batch, on_conflict=["k", "part"])
        one_by_one(model, batch)
    assert {(r["k"], r["part"]): r for r in await db.tally.all()} == model


async def test_one_statement_per_thousand_rows(
    make_db: MakeDb, monkeypatch: pytest.MonkeyPatch
) -> None:
    db = make_db([tally])
    await db.migrate()
    sent: list[int] = []
    original = db.store._rowcount

    async def counting(conn: Any, stmt: Any, params: list[Any], ent: Any) -> int:
        sent.append(len(params[0]))  # one array per column, one element per row
        return int(await original(conn, stmt, params, ent))

    monkeypatch.setattr(db.store, "_rowcount", counting)
    rows = [{"k": f"k{i}", "part": 0, "v": i, "note": None} for i in range(2_500)]
    assert await db.tally.upsert_all(rows, on_conflict=["k", "part"]) == 2_500
    assert sent == [UPSERT_CHUNK, UPSERT_CHUNK, 500]


async def test_a_bad_row_in_a_later_chunk_writes_no_earlier_chunk(make_db: MakeDb) -> None:
    db = make_db([tally])
    await db.migrate()
    rows: list[dict[str, Any]] = [
        {"k": f"k{i}", "part": 0, "v": i, "note": None} for i in range(1_500)
    ]
    rows[1_200]["v"] = 2**63
    with pytest.raises(XError) as caught:
        await db.tally.upsert_all(rows, on_conflict=["k", "part"])
    assert caught.value.code == "X_ENTITY_VALUE_INVALID" and "tally.v" in caught.value.message
    assert await db.tally.count() == 0


async def test_rows_giving_different_columns_are_refused() -> None:
    db = memory_database([tally])
    with pytest.raises(XError) as caught:
        await db.tally.upsert_all(
            [{"k": "a", "part": 0, "v": 1}, {"k": "b", "part": 0, "v": 1, "note": "x"}],
            on_conflict=["k", "part"],
        )
    assert caught.value.code == "X_ENTITY_VALUE_INVALID" and "different columns" in str(
        caught.value
    )


async def test_an_on_conflict_no_unique_index_covers_is_refused_naming_the_columns() -> None:
    db = memory_database([tally])
    with pytest.raises(XError) as caught:
        await db.tally.upsert_all([{"k": "a", "part": 0, "v": 1}], on_conflict=["k", "v"])
    assert caught.value.code == "X_ENTITY_CONFLICT_UNCOVERED"
    assert "['k', 'v']" in caught.value.message


def _drop_schema(url: str, schema: str) -> None:
    """Each example drops what it made, so a run cut short leaves nothing behind."""
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute(sql.SQL("DROP SCHEMA IF EXISTS {} CASCADE").format(sql.Identifier(schema)))
