"""``subject_proof()`` on the real Postgres: canaries in every text and JSON column of every
reached table, one generated person erased, ``X_SUBJECT_ERASE_INCOMPLETE`` for each canary left
outside a retain, and nothing of the proof left behind."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from ultimat3.core import XError
from ultimat3.entity import Database, entity, integer, jsonb, text, timestamp, uuid
from ultimat3.jobs import Anonymize, Retain, define_subject, subject_proof

MakeDb = Callable[..., Database]

orgs = entity("orgs", columns={"id": uuid().primary_key(), "name": text()})
members = entity("members", columns={
    "id": uuid().primary_key(), "org_id": uuid().references(orgs),
    "email": text().personal_data("email"), "name": text().personal_data("name"),
    "joined": timestamp(), "karma": integer(),
})  # fmt: skip
categories = entity("categories", columns={"id": uuid().primary_key(), "label": text()})
posts = entity("posts", columns={
    "id": uuid().primary_key(), "member_id": uuid().references(members), "title": text(),
})  # fmt: skip
comments = entity("comments", columns={
    "id": uuid().primary_key(), "member_id": uuid().references(members),
    "post_id": uuid().references(posts), "category_id": uuid().references(categories),
    "parent_id": uuid().references("comments").nullable(),
    "body": text().personal_data("text"), "meta": jsonb(),
})  # fmt: skip
likes = entity("likes", columns={"id": uuid().primary_key(),
               "comment_id": uuid().references(comments)})  # fmt: skip
audit_copies = entity("audit_copies", columns={"id": uuid().primary_key(), "member_id": uuid(),
                      "note": text()})  # fmt: skip
ALL = [orgs, members, categories, posts, comments, likes, audit_copies]
TABLES: dict[str, Any] = {
    "members": Anonymize({"email": "erased@example.invalid", "name": ""}),
    "posts": Retain("published work belongs to the org"),
    "comments": "delete",
    "likes": "delete",
    "audit_copies": "delete",
}


def _subject(db: Any, **change: Any) -> Any:
    kw: dict[str, Any] = {"database": db, "key": lambda i: i.member_id, "tables": dict(TABLES),
                          "columns": {"audit_copies": "member_id"}}  # fmt: skip
    kw.update(change)
    return define_subject(members, **kw)


async def _counts(db: Database) -> dict[str, int]:
    return {name: await db.table(name).count() for name in db.entities}


async def test_a_complete_declaration_proves_clean_and_leaves_nothing_behind(
    make_db: MakeDb,
) -> None:
    db = make_db(ALL)
    await db.migrate()
    assert await subject_proof(_subject(db)) == []
    # the retained post, the anonymized member, the org and the category it seeded: all gone
    assert set((await _counts(db)).values()) == {0}


async def test_a_scratch_copy_is_seeded_instead_of_the_declared_schema(make_db: MakeDb) -> None:
    declared = make_db(ALL)  # never migrated: the proof writes to the scratch copy only
    scratch = make_db(ALL)
    assert await subject_proof(_subject(declared), database=scratch) == []
    assert set((await _counts(scratch)).values()) == {0}


async def test_a_column_the_anonymize_leaves_is_a_finding_naming_table_and_column(
    make_db: MakeDb,
) -> None:
    db = make_db(ALL)
    tables = {**TABLES, "comments": Anonymize({"body": "", "parent_id": None})}
    findings = await subject_proof(_subject(db, tables=tables))
    assert [(f.code, f.meta["table"], f.meta["column"]) for f in findings] == [
        ("X_SUBJECT_ERASE_INCOMPLETE", "comments", "meta"),
    ]
    assert "comments.meta still holds the person's value" in findings[0].message
    assert "'meta'" in (findings[0].fix or "")
    assert set((await _counts(db)).values()) == {0}


async def test_an_unmarked_text_column_of_the_subject_is_found(make_db: MakeDb) -> None:
    people = entity("people", columns={"id": uuid().primary_key(),
                    "email": text().personal_data("email"), "bio": text()})  # fmt: skip
    db = make_db([people])
    subject = define_subject(people, database=db, key=lambda i: i.id,
                             tables={"people": Anonymize({"email": "x"})})  # fmt: skip
    [finding] = await subject_proof(subject)
    assert (finding.meta["table"], finding.meta["column"]) == ("people", "bio")
    retained = define_subject(people, database=db, key=lambda i: i.id,
                              tables={"people": Retain("the law keeps it")})  # fmt: skip
    assert await subject_proof(retained) == []  # a retain is a stated reason, not a finding


async def test_tenant_entities_are_seeded_under_a_tenant_of_their_own(make_db: MakeDb) -> None:
    users = entity("users", columns={"id": uuid().primary_key(), "org_id": uuid().tenant(),
                   "email": text().personal_data("email")})  # fmt: skip
    notes = entity("notes", columns={"id": uuid().primary_key(), "org_id": uuid().tenant(),
                   "user_id": uuid().references(users), "body": text()})  # fmt: skip
    db = make_db([users, notes])
    subject = define_subject(users, database=db, key=lambda i: i.id,
                             tables={"users": "delete", "notes": "delete"})  # fmt: skip
    assert await subject_proof(subject) == []


async def test_the_plans_refusal_and_a_database_without_the_entities_raise(
    make_db: MakeDb,
) -> None:
    db = make_db(ALL)
    undeclared = _subject(db, tables={k: v for k, v in TABLES.items() if k != "likes"})
    with pytest.raises(XError) as err:
        await subject_proof(undeclared)
    assert err.value.code == "X_SUBJECT_TABLE_UNDECLARED"
    other = make_db([orgs, members])
    with pytest.raises(XError) as err:
        await subject_proof(_subject(db), database=other)
    assert err.value.code == "X_CONFIG_INVALID"
    assert "does not declare the subject's entity" in err.value.message
    with pytest.raises(XError) as err:
        await subject_proof("members")  # type: ignore[arg-type]
    assert err.value.code == "X_CONFIG_INVALID"
