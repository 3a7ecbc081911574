"""migrate(): creates what is missing, idempotently, under an advisory lock; a changed type is
refused naming the difference, and nothing is half-created."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any

import pytest

from ultimat3.core import XError, new_id
from ultimat3.entity import Index, View, entity, integer, numeric, text, uuid

MakeDb = Callable[..., Any]

users = entity(
    "user",
    columns={"id": uuid().primary_key(), "email": text().unique(), "order": integer().default(0)},
)
posts = entity(
    "post",
    columns={
        "id": uuid().primary_key(),
        "author": uuid().references(users, on_delete="cascade"),
        "title": text(),
    },
    indexes=[Index(("author", "title"))],
)
counts = entity(
    "post_counts",
    columns={"author": uuid(), "n": numeric()},
    view=View("select author, count(*)::numeric as n from post group by author"),
)


async def _tables(db: Any) -> set[str]:
    async with db.store.connection() as conn:
        cur = await conn.execute(
            "select relname from pg_class c join pg_namespace n on n.oid = c.relnamespace "
            "where n.nspname = %s",
            [db.schema],
        )
        return {r[0] for r in await cur.fetchall()}


async def test_migrate_creates_tables_indexes_keys_and_views_then_nothing(make_db: MakeDb) -> None:
    db = make_db([users, posts, counts])
    first = await db.migrate()
    assert "table user" in first["created"] and "view post_counts" in first["created"]
    assert any(c.startswith("foreign key") for c in first["created"])
    assert {"user", "post", "post_counts", "user_email_key", "post_author_title_idx"} <= (
        await _tables(db)
    )
    assert await db.migrate() == {"created": []}
    u = new_id()
    await db.user.insert({"id": u, "email": "a@x"})
    await db.post.insert_all([{"id": new_id(), "author": u, "title": "t"} for _ in range(2)])
    assert await db.post_counts.all() == [{"author": u, "n": 2}]
    await db.user.where(id=u).delete()
    assert await db.post.count() == 0, "on_delete='cascade' reached the database"


async def test_two_concurrent_migrations_are_safe(make_db: MakeDb) -> None:
    db = make_db([users, posts])
    a, b = await asyncio.gather(db.migrate(), db.migrate())
    assert sorted([len(a["created"]) > 0, len(b["created"]) > 0]) == [False, True]


async def test_a_changed_column_type_is_refused_naming_it(make_db: MakeDb) -> None:
    db = make_db([users])
    await db.migrate()
    changed = entity(
        "user",
        columns={
            "id": uuid().primary_key(),
            "email": text().unique(),
            "order": text().default("0"),
        },
    )
    again = make_db([changed], schema=db.schema)
    with pytest.raises(XError) as caught:
        await again.migrate()
    assert caught.value.code == "X_ENTITY_SCHEMA_DRIFT"
    assert "user.order: declared text, the database has int4" in caught.value.message


async def test_a_new_nullable_column_is_added_and_a_required_one_refused(make_db: MakeDb) -> None:
    db = make_db([users])
    await db.migrate()
    grown = entity(
        "user",
        columns={
            "id": uuid().primary_key(),
            "email": text().unique(),
            "order": integer().default(0),
            "bio": text().nullable(),
        },
    )
    more = make_db([grown], schema=db.schema)
    assert (await more.migrate())["created"] == ["column user.bio"]
    strict = entity(
        "user",
        columns={
            "id": uuid().primary_key(),
            "email": text().unique(),
            "order": integer().default(0),
            "bio": text().nullable(),
            "nick": text(),
            "extra": text().nullable(),
        },
    )
    refused = make_db([strict], schema=db.schema)
    with pytest.raises(XError) as caught:
        await refused.migrate()
    assert caught.value.code == "X_ENTITY_SCHEMA_DRIFT" and "user.nick" in caught.value.message
    async with db.store.connection() as conn:
        cur = await conn.execute(
            "select column_name from information_schema.columns where "
            "table_schema = %s and table_name = 'user'",
            [db.schema],
        )
        assert "extra" not in {r[0] for r in await cur.fetchall()}, "half-migrated"


async def test_a_table_not_migrated_is_a_coded_refusal(make_db: MakeDb) -> None:
    db = make_db([users])
    with pytest.raises(XError) as caught:
        await db.user.count()
    assert caught.value.code == "X_ENTITY_SCHEMA_DRIFT" and "migrate" in (caught.value.fix or "")
