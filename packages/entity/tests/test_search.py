"""Search documents over .searchable() columns, and the SearchIndex conformance suite on the
Postgres full-text index and the memory one."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

import pytest

from ultimat3.core import FrozenClock, XError, new_id, use_clock, use_tenant
from ultimat3.entity import (
    SearchIndex,
    entity,
    integer,
    jsonb,
    memory_search_index,
    postgres_search_index,
    search_document_of,
    text,
    uuid,
)
from ultimat3.entity.testing import SEARCH_CONFORMANCE

MakeDb = Callable[..., Any]
Check = Callable[[Any], Awaitable[None]]

articles = entity(
    "articles",
    columns={
        "id": uuid().primary_key(),
        "org_id": uuid().tenant(),
        "title": text().searchable(),
        "tags": jsonb().searchable().nullable(),
        "views": integer().default(0),
    },
)


@pytest.mark.parametrize("check", SEARCH_CONFORMANCE, ids=lambda c: c.__name__)
async def test_postgres_search_index_passes(check: Check, make_db: MakeDb) -> None:
    index = postgres_search_index(make_db([articles]), config="english")
    await index.migrate()
    await index.migrate()  # idempotent
    assert isinstance(index, SearchIndex)
    await check(index)


@pytest.mark.parametrize("check", SEARCH_CONFORMANCE, ids=lambda c: c.__name__)
async def test_memory_search_index_passes(check: Check) -> None:
    await check(memory_search_index())


async def test_a_row_becomes_a_document_of_its_searchable_columns(make_db: MakeDb) -> None:
    db = make_db([articles])
    await db.migrate()
    org = new_id()
    with use_tenant(org):
        row = await db.articles.insert(
            {"id": new_id(), "title": "Whales sing", "tags": {"k": ["ocean", 3]}}
        )
    with use_clock(FrozenClock(1_000)):
        doc = search_document_of(articles, row)
    assert (doc.id, doc.entity, doc.tenant, doc.version) == (
        f"articles:{row['id']}",
        "articles",
        org,
        1_000,
    )
    assert doc.text.split("\n") == ["Whales sing", "ocean", "3"]
    index = postgres_search_index(db, config="english")
    await index.migrate()
    await index.upsert([doc])
    assert [h.id for h in await index.search("whale")] == [doc.id], "english stemming"


def test_an_entity_with_no_searchable_column_is_x_invariant() -> None:
    plain = entity("plain", columns={"id": uuid().primary_key(), "n": integer()})
    with pytest.raises(XError) as caught:
        search_document_of(plain, {"id": new_id(), "n": 1})
    assert caught.value.code == "X_INVARIANT" and "plain" in caught.value.message


def test_a_bad_text_search_config_is_refused(make_db: MakeDb) -> None:
    with pytest.raises(XError) as caught:
        postgres_search_index(make_db([articles]), config="klingon")
    assert caught.value.code == "X_CONFIG_INVALID"
