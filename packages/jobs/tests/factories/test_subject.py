"""``define_subject()`` / ``subject_erase()`` and the personal-data checks: the walk through
deleted tables only, children first, every treatment refusal, and the property — over random
schemas of related tables and random data, an erase (killed at a random step and resumed, or
not) leaves no value of the person outside a retain and changes no other person's row."""

from __future__ import annotations

import asyncio
import random
from collections.abc import Callable
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from pydantic import BaseModel

from ultimat3.core import XError, new_id
from ultimat3.entity import Database, Entity, database, entity, memory_database, text, uuid
from ultimat3.jobs import (
    Anonymize,
    Retain,
    define_subject,
    personal_data_problems,
    subject_erase,
    unreached_personal_data,
)
from ultimat3.jobs.testing import JobHarness

MakeDb = Callable[..., Database]

members = entity("members", columns={
    "id": uuid().primary_key(), "email": text().personal_data("email"),
    "name": text().personal_data("name"),
})  # fmt: skip
posts = entity("posts", columns={
    "id": uuid().primary_key(), "member_id": uuid().references(members), "title": text(),
})  # fmt: skip
comments = entity("comments", columns={
    "id": uuid().primary_key(), "member_id": uuid().references(members),
    "post_id": uuid().references(posts).nullable(), "body": text().personal_data("text"),
})  # fmt: skip
likes = entity("likes", columns={
    "id": uuid().primary_key(), "comment_id": uuid().references(comments),
})  # fmt: skip
audit_copies = entity("audit_copies", columns={
    "id": uuid().primary_key(), "member_id": uuid(), "note": text(),
})  # fmt: skip
ALL = [members, posts, comments, likes, audit_copies]
TABLES: dict[str, Any] = {
    "members": Anonymize({"email": "erased@example.invalid", "name": ""}),
    "posts": Retain("published work belongs to the org"),
    "comments": "delete",
    "likes": "delete",
    "audit_copies": "delete",
}


class Erase(BaseModel):
    member_id: str


def subject_of(db: Any, **change: Any) -> Any:
    kw: dict[str, Any] = {"database": db, "key": lambda i: i.member_id, "tables": dict(TABLES),
                          "columns": {"audit_copies": "member_id"}}  # fmt: skip
    kw.update(change)
    return define_subject(members, **kw)


def test_the_plan_walks_deleted_tables_only_children_first_the_subject_last() -> None:
    plan = subject_of(memory_database(ALL)).plan()
    order = [s.table for s in plan.steps]
    assert order[-1] == "members"
    assert order.index("likes") < order.index("comments")
    assert set(order) == {"members", "posts", "comments", "likes", "audit_copies"}
    # the likes are reached through the deleted comments, never through the retained posts
    [likes_step] = [s for s in plan.steps if s.table == "likes"]
    assert [(v.column, v.parent) for v in likes_step.via] == [("comment_id", "comments")]
    [c] = [s for s in plan.steps if s.table == "comments"]
    assert [(v.column, v.parent) for v in c.via] == [("member_id", "members")]


async def test_erase_deletes_anonymizes_and_retains_and_leaves_others_alone(
    make_db: MakeDb,
) -> None:
    db = make_db(ALL)
    await db.migrate()
    people = {p: new_id() for p in ("ann", "bob")}
    for who, pid in people.items():
        await db.members.insert({"id": pid, "email": f"{who}@x.org", "name": who})
        post = await db.posts.insert({"id": new_id(), "member_id": pid, "title": f"{who} post"})
        for n in range(3):
            c = await db.comments.insert(
                {"id": new_id(), "member_id": pid, "post_id": post["id"], "body": f"{who} {n}"}
            )
            await db.likes.insert({"id": new_id(), "comment_id": c["id"]})
        await db.audit_copies.insert({"id": new_id(), "member_id": pid, "note": f"{who} copy"})
    before_bob = await _rows_of(db, people["bob"])
    job = subject_erase(name="members.erase", input=Erase, subject=subject_of(db), page_size=2)
    trace = await JobHarness(jobs=[job])(job, Erase(member_id=people["ann"]))
    assert trace.state == "done", trace.last_error
    by_table = {t["table"]: (t["rows"], t["treatment"]) for t in trace.result["tables"]}
    assert by_table == {"likes": (3, "delete"), "comments": (3, "delete"),
                        "audit_copies": (1, "delete"), "posts": (0, "retain"),
                        "members": (1, "anonymize")}  # fmt: skip
    assert trace.result["tables"][-1]["table"] == "members"
    ann = await db.members.where(id=people["ann"]).first()
    assert ann is not None and (ann["email"], ann["name"]) == ("erased@example.invalid", "")
    assert await db.comments.where(member_id=people["ann"]).count() == 0
    assert await db.posts.where(member_id=people["ann"]).count() == 1  # retained
    assert await db.likes.count() == 3
    assert await _rows_of(db, people["bob"]) == before_bob
    steps = list(trace.steps)
    assert "subject:keys:comments.member_id:00000" in steps
    assert "subject:erase:likes.comment_id:00001" in steps  # 3 comment keys, pages of 2
    assert steps[-1] == "subject:erase:members"


async def _rows_of(db: Any, pid: str) -> dict[str, Any]:
    cs = await db.comments.where(member_id=pid).all()
    return {
        "member": await db.members.where(id=pid).first(),
        "comments": cs,
        "likes": [await db.likes.where(comment_id=c["id"]).all() for c in cs],
        "copies": await db.audit_copies.where(member_id=pid).all(),
    }


# --- refusals --------------------------------------------------------------------------------

soft = entity("soft_notes", columns={"id": uuid().primary_key(),
              "member_id": uuid().references(members)}, soft_delete=True)  # fmt: skip
kept = entity("kept_likes", columns={"id": uuid().primary_key(),
              "comment_id": uuid().references(comments).nullable(), "n": text()})  # fmt: skip
loop_a = entity("loop_a", columns={
    "id": uuid().primary_key(), "member_id": uuid().references(members),
    "b_id": uuid().references("loop_b"),
})  # fmt: skip
loop_b = entity("loop_b", columns={"id": uuid().primary_key(),
                "a_id": uuid().references(loop_a)})  # fmt: skip


@pytest.mark.parametrize(
    ("entities", "tables", "code", "needle"),
    [
        (ALL, {**TABLES, "likes": None}, "X_SUBJECT_TREATMENT_INVALID", "treatment None"),
        (
            ALL,
            {**TABLES, "posts": Anonymize({})},
            "X_SUBJECT_TREATMENT_INVALID",
            "Anonymize on 'posts' names no column",
        ),
        (
            ALL,
            {k: v for k, v in TABLES.items() if k != "likes"},
            "X_SUBJECT_TABLE_UNDECLARED",
            "reaches 'likes'",
        ),
        (ALL, {**TABLES, "posts": Retain("  ")}, "X_SUBJECT_TREATMENT_INVALID", "blank reason"),
        (ALL, {**TABLES, "posts": {"retain": ""}}, "X_SUBJECT_TREATMENT_INVALID", "blank reason"),
        (
            ALL,
            {**TABLES, "members": Anonymize({"emial": "x"})},
            "X_SUBJECT_TREATMENT_INVALID",
            "members.emial, which is not a column",
        ),
        (
            ALL,
            {**TABLES, "members": Anonymize({"email": None, "name": ""})},
            "X_SUBJECT_TREATMENT_INVALID",
            "members.email to None, which is not nullable",
        ),
        (
            ALL,
            {**TABLES, "members": Anonymize({"email": "x"})},
            "X_PERSONAL_DATA_UNERASED",
            "members.name untouched",
        ),
        (
            ALL,
            {**TABLES, "likes": Retain("counted")},
            "X_SUBJECT_TREATMENT_INVALID",
            "kept under the deleted 'comments'",
        ),
        (
            ALL,
            {**TABLES, "members": "delete", "posts": Retain("org")},
            "X_SUBJECT_TREATMENT_INVALID",
            "'posts' is kept under the deleted 'members'",
        ),
        (ALL, {**TABLES, "ghosts": "delete"}, "X_SUBJECT_TREATMENT_INVALID", "not an entity"),
        (
            [*ALL, soft],
            {**TABLES, "soft_notes": "delete"},
            "X_SUBJECT_TREATMENT_INVALID",
            "a soft-delete entity",
        ),
        (
            [*ALL, kept],
            {**TABLES, "kept_likes": Anonymize({"n": "x"})},
            "X_SUBJECT_TREATMENT_INVALID",
            "kept_likes.comment_id anonymized to None",
        ),
        (
            [*ALL, loop_a, loop_b],
            {**TABLES, "loop_a": "delete", "loop_b": "delete"},
            "X_SUBJECT_CYCLE",
            "form a loop",
        ),
    ],
)
def test_every_plan_refusal(
    entities: list[Entity], tables: dict[str, Any], code: str, needle: str
) -> None:
    with pytest.raises(XError) as err:
        subject_of(memory_database(entities), tables=tables).plan()
    assert err.value.code == code
    assert needle in str(err.value), str(err.value)
    assert err.value.fix


def test_an_anonymized_child_clearing_its_key_is_accepted() -> None:
    tables = {**TABLES, "kept_likes": Anonymize({"comment_id": None, "n": "x"})}
    plan = subject_of(memory_database([*ALL, kept]), tables=tables).plan()
    assert "kept_likes" in {s.table for s in plan.steps}


@pytest.mark.parametrize(
    ("change", "code", "needle"),
    [
        ({"key": "member_id"}, "X_SUBJECT_TREATMENT_INVALID", "key must be a callable"),
        ({"targets": ["auth"]}, "X_CONFIG_INVALID", "targets="),
        ({"columns": {"audit_copies": "nope"}}, "X_SUBJECT_TREATMENT_INVALID", "audit_copies.nope"),
        ({"database": "db"}, "X_SUBJECT_TREATMENT_INVALID", "is not a database()"),
        (
            {"database": memory_database([audit_copies])},
            "X_SUBJECT_TREATMENT_INVALID",
            "does not declare it",
        ),
        ({"tables": ["comments"]}, "X_SUBJECT_TREATMENT_INVALID", "must map"),
    ],
)
def test_every_define_subject_refusal(change: dict[str, Any], code: str, needle: str) -> None:
    with pytest.raises(XError) as err:
        subject_of(memory_database(ALL), **change)
    assert err.value.code == code
    assert needle in str(err.value), str(err.value)


def test_a_run_refuses_its_plan_before_any_row_is_touched() -> None:
    db = memory_database(ALL)
    bad = subject_of(db, tables={**TABLES, "members": Anonymize({"email": "x"})})
    job = subject_erase(name="e", input=Erase, subject=bad)

    async def go() -> Any:
        await db.members.insert({"id": (pid := new_id()), "email": "a@b", "name": "a"})
        trace = await JobHarness(jobs=[job])(job, Erase(member_id=pid))
        return trace, await db.members.where(id=pid).first()

    trace, row = asyncio.run(go())
    assert trace.state in {"failed", "dead"}
    assert "X_PERSONAL_DATA_UNERASED" in str(trace.last_error)
    assert row is not None and row["email"] == "a@b"


@pytest.mark.parametrize(
    ("change", "needle"),
    [({"name": ""}, "name is required"), ({"subject": "members"}, "is not a define_subject()"),
     ({"page_size": 0}, "page_size 0"), ({"input": None}, "input must be")],
)  # fmt: skip
def test_every_subject_erase_refusal(change: dict[str, Any], needle: str) -> None:
    kw: dict[str, Any] = {"name": "e", "input": Erase, "subject": subject_of(memory_database(ALL))}
    kw.update(change)
    with pytest.raises(XError) as err:
        subject_erase(**kw)
    assert err.value.code == "X_JOB_DECLARATION_INVALID"
    assert needle in str(err.value)


def test_personal_data_checks_find_unreached_and_unerased() -> None:
    orphan = entity("newsletter", columns={"id": uuid().primary_key(),
                    "email": text().personal_data("email")})  # fmt: skip
    db = memory_database([*ALL, orphan])
    good = subject_of(db)
    [unreached] = unreached_personal_data([good.plan()], [*ALL, orphan])
    assert unreached.code == "X_PERSONAL_DATA_UNREACHED" and "'newsletter'" in str(unreached)
    bad = subject_of(db, tables={**TABLES, "members": Anonymize({"email": "x"})})
    codes = sorted(e.code for e in personal_data_problems([bad]))
    # the bad plan refuses, so nothing of its walk counts as reached: members, comments and the
    # newsletter hold personal data no walk reaches
    assert codes == ["X_PERSONAL_DATA_UNERASED"] + ["X_PERSONAL_DATA_UNREACHED"] * 3
    assert [e.code for e in personal_data_problems([good])] == ["X_PERSONAL_DATA_UNREACHED"]


# --- the property ----------------------------------------------------------------------------

# a child table: (index of its parent among [subject, t0, t1, ...], its treatment)
#   treatment: 'delete' | 'anonymize' (val only) | 'clear' (val + its key to None) | 'retain'
child_tables = st.lists(
    st.tuples(st.integers(0, 3), st.sampled_from(["delete", "anonymize", "clear", "retain"])),
    max_size=4,
)


@settings(
    max_examples=20,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(
    shape=child_tables,
    subject_deleted=st.booleans(),
    people=st.integers(2, 3),
    seed=st.integers(0, 2**16),
    crash=st.booleans(),
)
def test_erase_leaves_no_value_of_the_person_outside_a_retain_and_no_other_row_changed(
    new_schema: Callable[[], str],
    database_url: str,
    shape: list[tuple[int, str]],
    subject_deleted: bool,
    people: int,
    seed: int,
    crash: bool,
) -> None:
    asyncio.run(
        _erase_property(database_url, new_schema(), shape, subject_deleted, people, seed, crash)
    )


async def _erase_property(
    url: str,
    schema: str,
    shape: list[tuple[int, str]],
    subject_deleted: bool,
    people: int,
    seed: int,
    crash: bool,
) -> None:
    from ultimat3.jobs.testing import crash_proof

    rng = random.Random(seed)
    person = entity("person", columns={"id": uuid().primary_key(),
                    "val": text().personal_data("name")})  # fmt: skip
    ents: list[Entity] = [person]
    treatments: dict[str, Any] = {
        "person": "delete" if subject_deleted else Anonymize({"val": "erased"})
    }
    deleted = [0] if subject_deleted else []
    parent_of: dict[str, str] = {}
    for n, (pick, kind) in enumerate(shape):
        # a parent among the subject and the deleted tables (the walk goes no further)
        options = [0, *[d for d in deleted if d != 0]]
        parent = ents[options[pick % len(options)]]
        under_deleted = parent.name != "person" or subject_deleted
        if under_deleted and kind in ("anonymize", "retain"):
            kind = "clear"  # a kept row under a deleted parent must clear its key
        ref = uuid().references(parent)
        ent = entity(f"t{n}", columns={
            "id": uuid().primary_key(),
            "parent_id": ref.nullable() if kind == "clear" else ref,
            "val": text().personal_data("text"),
        })  # fmt: skip
        ents.append(ent)
        parent_of[ent.name] = parent.name
        if kind == "delete":
            treatments[ent.name] = "delete"
            deleted.append(len(ents) - 1)
        elif kind == "anonymize":
            treatments[ent.name] = Anonymize({"val": "erased"})
        elif kind == "clear":
            treatments[ent.name] = Anonymize({"val": "erased", "parent_id": None})
        else:
            treatments[ent.name] = Retain("kept by law")

    async with database(url, ents, schema=schema) as db:
        await db.migrate()
        owner: dict[str, dict[str, str]] = {e.name: {} for e in ents}  # table -> id -> person
        pids = [new_id() for _ in range(people)]
        for p in pids:
            await db.person.insert({"id": p, "val": f"{p}-person"})
            owner["person"][p] = p
        for ent in ents[1:]:
            rows = []
            for parent_id, who in owner[parent_of[ent.name]].items():
                for k in range(rng.randint(0, 3) if parent_id not in pids else rng.randint(1, 3)):
                    rid = new_id()
                    owner[ent.name][rid] = who
                    rows.append({"id": rid, "parent_id": parent_id, "val": f"{who}-{ent.name}-{k}"})
            await db.table(ent.name).insert_all(rows)
        before = {e.name: {r["id"]: r for r in await db.table(e.name).all()} for e in ents}

        victim = pids[0]
        subject = define_subject(person, database=db, key=lambda i: i.member_id,
                                 tables=treatments)  # fmt: skip
        job = subject_erase(name="erase", input=Erase, subject=subject, page_size=2)
        if crash:
            report = await crash_proof(job, Erase(member_id=victim))  # killed after every step
            assert report.state == "done", report.last_error
            assert report.crashes  # it was killed, and resumed, at every boundary
        else:
            trace = await JobHarness(jobs=[job])(job, Erase(member_id=victim))
            assert trace.state == "done", trace.last_error

        for ent in ents:
            after = {r["id"]: r for r in await db.table(ent.name).all()}
            retained = isinstance(treatments[ent.name], Retain)
            for rid, row in before[ent.name].items():
                if owner[ent.name][rid] != victim:
                    assert after.get(rid) == row, (ent.name, "another person's row changed")
                elif not retained:
                    left = after.get(rid)
                    assert left is None or victim not in str(left["val"]), (ent.name, left)
                else:
                    assert after.get(rid) == row  # a retain keeps the row as it was
