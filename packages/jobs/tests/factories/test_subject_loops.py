"""``subject_erase()`` over loops of deleted tables (a nullable key cleared first, on the real
Postgres), and the audit sink's records: one ``allowed`` per completed erase, one ``failed`` per
attempt that threw, never the person's key."""

from __future__ import annotations

import asyncio
import random
from collections.abc import Callable
from typing import Any

import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st
from pydantic import BaseModel

from ultimat3.core import (
    AUDIT_SINK,
    AuditRecord,
    XError,
    memory_audit_sink,
    new_id,
    swap_adapter,
)
from ultimat3.entity import Database, database, entity, memory_database, text, uuid
from ultimat3.jobs import Anonymize, Retain, Retry, define_subject, subject_erase, subject_export
from ultimat3.jobs.testing import JobHarness, crash_proof

MakeDb = Callable[..., Database]

members = entity("members", columns={
    "id": uuid().primary_key(), "email": text().personal_data("email"),
})  # fmt: skip
# replies: a self-referencing table, its key nullable
comments = entity("comments", columns={
    "id": uuid().primary_key(), "member_id": uuid().references(members),
    "parent_id": uuid().references("comments").nullable(), "body": text(),
})  # fmt: skip
likes = entity("likes", columns={
    "id": uuid().primary_key(), "comment_id": uuid().references(comments),
})  # fmt: skip
# two tables in a loop: a thread pins one of its own posts (nullable), a post is in a thread
threads = entity("threads", columns={
    "id": uuid().primary_key(), "member_id": uuid().references(members),
    "pinned_id": uuid().references("thread_posts").nullable(), "title": text(),
})  # fmt: skip
thread_posts = entity("thread_posts", columns={
    "id": uuid().primary_key(), "thread_id": uuid().references(threads), "body": text(),
})  # fmt: skip
ALL = [members, comments, likes, threads, thread_posts]
TABLES: dict[str, Any] = {
    "members": Anonymize({"email": "erased@example.invalid"}),
    "comments": "delete",
    "likes": "delete",
    "threads": "delete",
    "thread_posts": "delete",
}


class Erase(BaseModel):
    member_id: str


def test_a_loop_with_a_nullable_key_is_planned_with_that_key_cleared_first() -> None:
    plan = define_subject(
        members, database=memory_database(ALL), key=lambda i: i.member_id, tables=TABLES
    ).plan()
    assert sorted((lk.table, lk.column) for lk in plan.cleared) == [
        ("comments", "parent_id"),
        ("threads", "pinned_id"),
    ]
    order = [s.table for s in plan.steps]
    assert order.index("likes") < order.index("comments")
    # with threads.pinned_id cleared, a post goes before its thread
    assert order.index("thread_posts") < order.index("threads")
    assert order[-1] == "members"


def test_a_loop_whose_keys_are_all_required_is_still_refused() -> None:
    a = entity("a", columns={"id": uuid().primary_key(), "member_id": uuid().references(members),
                             "b_id": uuid().references("b")})  # fmt: skip
    b = entity("b", columns={"id": uuid().primary_key(), "a_id": uuid().references(a)})
    db = memory_database([members, a, b])
    tables = {"members": "delete", "a": "delete", "b": "delete"}
    subject = define_subject(members, database=db, key=lambda i: i.member_id, tables=tables)
    with pytest.raises(XError) as err:
        subject.plan()
    assert err.value.code == "X_SUBJECT_CYCLE"
    assert "a -> b -> a" in err.value.message or "b -> a -> b" in err.value.message
    assert ".nullable()" in (err.value.fix or "")


async def _seed(db: Database) -> dict[str, Any]:
    ann, bob, carol = new_id(), new_id(), new_id()
    for who, pid in (("ann", ann), ("bob", bob), ("carol", carol)):
        await db.members.insert({"id": pid, "email": f"{who}@x.org"})
    c1 = await db.comments.insert({"id": new_id(), "member_id": ann, "body": "ann 1"})
    # bob replies to ann, carol replies to bob's reply: both go with ann's comment
    r1 = await db.comments.insert(
        {"id": new_id(), "member_id": bob, "parent_id": c1["id"], "body": "bob re ann"}
    )
    r2 = await db.comments.insert(
        {"id": new_id(), "member_id": carol, "parent_id": r1["id"], "body": "carol re bob"}
    )
    # ann replies to bob's own comment: hers goes, bob's stays
    b1 = await db.comments.insert({"id": new_id(), "member_id": bob, "body": "bob 1"})
    await db.comments.insert(
        {"id": new_id(), "member_id": ann, "parent_id": b1["id"], "body": "ann re bob"}
    )
    for c in (c1, r1, r2, b1):
        await db.likes.insert({"id": new_id(), "comment_id": c["id"]})
    for who in (ann, bob):
        t = await db.threads.insert({"id": new_id(), "member_id": who, "title": "t"})
        posts = [
            await db.thread_posts.insert({"id": new_id(), "thread_id": t["id"], "body": str(n)})
            for n in range(3)
        ]
        await db.threads.where(id=t["id"]).update(pinned_id=posts[1]["id"])
    return {"ann": ann, "bob": bob, "carol": carol, "b1": b1["id"]}


async def _check(db: Database, people: dict[str, Any]) -> None:
    ann, bob = people["ann"], people["bob"]
    left = await db.comments.all()
    assert [c["body"] for c in left] == ["bob 1"]  # the reply chain under ann's comment went too
    assert [lk["comment_id"] for lk in await db.likes.all()] == [people["b1"]]
    assert [t["member_id"] for t in await db.threads.all()] == [bob]
    [bob_thread] = await db.threads.all()
    assert bob_thread["pinned_id"] is not None  # another person's loop is untouched
    assert await db.thread_posts.where(thread_id=bob_thread["id"]).count() == 3
    assert await db.thread_posts.count() == 3
    row = await db.members.where(id=ann).first()
    assert row is not None and row["email"] == "erased@example.invalid"


async def test_erase_clears_the_nullable_key_then_deletes_a_self_referencing_and_a_two_table_loop(
    make_db: MakeDb,
) -> None:
    db = make_db(ALL)
    await db.migrate()
    people = await _seed(db)
    subject = define_subject(members, database=db, key=lambda i: i.member_id, tables=TABLES)
    job = subject_erase(name="members.erase", input=Erase, subject=subject, page_size=1)
    trace = await JobHarness(jobs=[job])(job, Erase(member_id=people["ann"]))
    assert trace.state == "done", trace.last_error
    rows = {t["table"]: t["rows"] for t in trace.result["tables"]}
    assert rows == {"likes": 3, "comments": 4, "thread_posts": 3, "threads": 1, "members": 1}
    steps = list(trace.steps)
    assert "subject:clear:comments.parent_id:00000" in steps
    assert "subject:clear:threads.pinned_id:00000" in steps
    assert any(":r1:" in s for s in steps)  # a second round found the replies to replies
    first_delete = min(i for i, s in enumerate(steps) if s.startswith("subject:erase:"))
    assert all(i < first_delete for i, s in enumerate(steps) if s.startswith("subject:clear:"))
    await _check(db, people)


async def test_a_loop_erase_killed_after_every_step_reaches_the_same_state(
    make_db: MakeDb,
) -> None:
    db = make_db(ALL)
    await db.migrate()
    people = await _seed(db)
    subject = define_subject(members, database=db, key=lambda i: i.member_id, tables=TABLES)
    job = subject_erase(name="members.erase", input=Erase, subject=subject, page_size=2)
    report = await crash_proof(job, Erase(member_id=people["ann"]))
    assert report.state == "done", report.last_error
    assert report.crashes
    await _check(db, people)


async def test_the_export_of_a_loop_reads_each_row_once(make_db: MakeDb) -> None:
    db = make_db(ALL)
    await db.migrate()
    people = await _seed(db)

    class Bucket:
        def __init__(self) -> None:
            self.objects: dict[str, bytes] = {}

        async def put(self, key: str, data: bytes, *, content_type: str | None = None) -> None:
            self.objects[key] = data

    bucket = Bucket()
    subject = define_subject(members, database=db, key=lambda i: i.member_id, tables=TABLES)
    job = subject_export(name="members.export", input=Erase, subject=subject,
                         prefix=lambda i: "p", sink=lambda i: bucket)  # fmt: skip
    trace = await JobHarness(jobs=[job])(job, Erase(member_id=people["ann"]))
    assert trace.state == "done", trace.last_error
    rows = {t["table"]: t["rows"] for t in trace.result["tables"]}
    assert rows["comments"] == 4 and rows["threads"] == 1 and rows["thread_posts"] == 3


# --- the audit sink --------------------------------------------------------------------------


async def test_one_allowed_record_per_completed_erase_never_the_key(make_db: MakeDb) -> None:
    db = make_db(ALL)
    await db.migrate()
    people = await _seed(db)
    subject = define_subject(members, database=db, key=lambda i: i.member_id, tables=TABLES)
    job = subject_erase(name="members.erase", input=Erase, subject=subject, page_size=2)
    sink = memory_audit_sink()
    with swap_adapter(AUDIT_SINK, sink):
        report = await crash_proof(job, Erase(member_id=people["ann"]))  # replays: at least once
    assert report.state == "done", report.last_error
    [record] = sink.records
    assert (record.outcome, record.primitive, record.surface, record.name) == (
        "allowed", "action", "job", "members.erase",
    )  # fmt: skip
    assert record.input == {"subject": "members", "run": record.input["run"]}
    assert record.idempotency_key == f"members.erase:{record.input['run']}"
    assert record.error_code is None
    assert people["ann"] not in repr(record)


async def test_one_failed_record_per_attempt_that_threw() -> None:
    people = entity("people", columns={
        "id": uuid().primary_key(), "email": text().personal_data("email"),
        "name": text().personal_data("name"),
    })  # fmt: skip
    db = memory_database([people])
    # an anonymize that leaves the email: every attempt refuses before any row is touched
    leaves = {"people": Anonymize({"name": ""})}
    bad = define_subject(people, database=db, key=lambda i: i.member_id, tables=leaves)
    job = subject_erase(name="e", input=Erase, subject=bad, retry=Retry(attempts=3, delay=1))
    sink = memory_audit_sink()
    pid = new_id()
    await db.people.insert({"id": pid, "email": "a@b.org", "name": "A"})
    with swap_adapter(AUDIT_SINK, sink):
        trace = await JobHarness(jobs=[job])(job, Erase(member_id=pid))
    assert trace.state in {"failed", "dead"}
    assert [r.outcome for r in sink.records] == ["failed"] * 3
    assert {r.error_code for r in sink.records} == {"X_PERSONAL_DATA_UNERASED"}
    assert len({r.idempotency_key for r in sink.records}) == 3
    assert all(pid not in repr(r) for r in sink.records)


async def test_no_sink_installed_writes_nothing_and_a_refusing_sink_fails_the_run() -> None:
    db = memory_database([members])
    subject = define_subject(members, database=db, key=lambda i: i.member_id,
                             tables={"members": "delete"})  # fmt: skip
    job = subject_erase(name="e", input=Erase, subject=subject, retry=Retry(attempts=1))
    pid = new_id()
    await db.members.insert({"id": pid, "email": "a@b.org"})
    trace = await JobHarness(jobs=[job])(job, Erase(member_id=pid))
    assert trace.state == "done"

    class Refusing:
        def __init__(self) -> None:
            self.seen: list[AuditRecord] = []

        async def write(self, record: AuditRecord) -> None:
            self.seen.append(record)
            raise XError("X_INVARIANT", "the audit store is read-only", fix="-")

    refusing = Refusing()
    await db.members.insert({"id": (other := new_id()), "email": "c@d.org"})
    with swap_adapter(AUDIT_SINK, refusing):
        failed = await JobHarness(jobs=[job])(job, Erase(member_id=other))
    assert failed.state in {"failed", "dead"}
    assert "read-only" in str(failed.last_error)
    assert [r.outcome for r in refusing.seen] == ["allowed"]


# --- the property over random loops ----------------------------------------------------------

# a child table: (index of its parent among [subject, deleted tables...], its treatment, whether
# a deleted one also replies to itself through a nullable key)
loop_tables = st.lists(
    st.tuples(st.integers(0, 3), st.sampled_from(["delete", "clear", "retain"]), st.booleans()),
    min_size=1,
    max_size=3,
)


@settings(
    max_examples=8,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(shape=loop_tables, subject_deleted=st.booleans(), seed=st.integers(0, 2**16))
@example(shape=[(0, "delete", True), (1, "clear", False), (1, "delete", True)],
         subject_deleted=False, seed=7)  # fmt: skip
def test_an_erase_over_random_loops_killed_after_every_step_ends_as_an_unkilled_one(
    new_schema: Callable[[], str],
    database_url: str,
    shape: list[tuple[int, str, bool]],
    subject_deleted: bool,
    seed: int,
) -> None:
    asyncio.run(
        _loop_property(database_url, new_schema(), new_schema(), shape, subject_deleted, seed)
    )


async def _loop_property(
    url: str, schema_a: str, schema_b: str, shape: list[tuple[int, str, bool]],
    subject_deleted: bool, seed: int,
) -> None:  # fmt: skip
    rng = random.Random(seed)
    person = entity("person", columns={"id": uuid().primary_key(),
                    "val": text().personal_data("name")})  # fmt: skip
    ents: list[Any] = [person]
    treatments: dict[str, Any] = {
        "person": "delete" if subject_deleted else Anonymize({"val": "erased"})
    }
    deleted = [0] if subject_deleted else []
    parent_of: dict[str, str] = {}
    replies: set[str] = set()
    for n, (pick, kind, self_ref) in enumerate(shape):
        options = [0, *[d for d in deleted if d != 0]]
        parent = ents[options[pick % len(options)]]
        if (parent.name != "person" or subject_deleted) and kind == "retain":
            kind = "clear"  # a kept row under a deleted parent clears its key
        ref = uuid().references(parent)
        columns = {
            "id": uuid().primary_key(),
            "parent_id": ref.nullable() if kind == "clear" else ref,
            "val": text().personal_data("text"),
        }
        if kind == "delete" and self_ref:
            columns["reply_to"] = uuid().references(f"t{n}").nullable()
            replies.add(f"t{n}")
        ents.append(entity(f"t{n}", columns=columns))
        parent_of[f"t{n}"] = parent.name
        if kind == "delete":
            treatments[f"t{n}"] = "delete"
            deleted.append(len(ents) - 1)
        elif kind == "clear":
            treatments[f"t{n}"] = Anonymize({"val": "erased", "parent_id": None})
        else:
            treatments[f"t{n}"] = Retain("kept by law")

    # the data, once, with an owner per row: a row referencing one of the person's (by its
    # parent or by the row it replies to) is the person's — the replies to a deleted row go too
    owner: dict[str, dict[str, str]] = {e.name: {} for e in ents}
    rows: dict[str, list[dict[str, Any]]] = {e.name: [] for e in ents}
    pids = [new_id() for _ in range(3)]
    victim = pids[0]
    for p in pids:
        rows["person"].append({"id": p, "val": f"{p}-person"})
        owner["person"][p] = p
    for ent in ents[1:]:
        for parent_id, parent_owner in owner[parent_of[ent.name]].items():
            for k in range(rng.randint(1, 2)):
                rid, who = new_id(), parent_owner
                row: dict[str, Any] = {
                    "id": rid,
                    "parent_id": parent_id,
                    "val": f"{who}-{ent.name}-{k}",
                }
                if ent.name in replies:
                    row["reply_to"] = None
                    mine = list(owner[ent.name].items())
                    if mine and rng.random() < 0.6:
                        target, target_owner = rng.choice(mine)
                        row["reply_to"] = target
                        # the row goes if either row it references goes
                        who = victim if victim in (target_owner, parent_owner) else who
                        row["val"] = f"{who}-{ent.name}-reply-{k}"
                owner[ent.name][rid] = who
                rows[ent.name].append(row)

    finals = []
    for schema, crash in ((schema_a, False), (schema_b, True)):
        async with database(url, ents, schema=schema) as db:
            await db.migrate()
            for ent in ents:
                if rows[ent.name]:
                    await db.table(ent.name).insert_all(rows[ent.name])
            subject = define_subject(person, database=db, key=lambda i: i.member_id,
                                     tables=treatments)  # fmt: skip
            job = subject_erase(name="erase", input=Erase, subject=subject, page_size=2)
            if crash:
                report = await crash_proof(job, Erase(member_id=victim))
                assert report.state == "done", report.last_error
            else:
                trace = await JobHarness(jobs=[job])(job, Erase(member_id=victim))
                assert trace.state == "done", trace.last_error
            finals.append(
                {e.name: {r["id"]: r for r in await db.table(e.name).all()} for e in ents}
            )

    assert finals[0] == finals[1]  # killed after every step, it ends where an unkilled run does
    after = finals[0]
    for ent in ents:
        retained = isinstance(treatments[ent.name], Retain)
        for row in rows[ent.name]:
            left = after[ent.name].get(row["id"])
            if owner[ent.name][row["id"]] != victim or retained:
                assert left == row, (ent.name, "a row not the person's changed", row, left)
            else:
                assert left is None or victim not in str(left["val"]), (ent.name, left)


# --- a loop through the subject's own row ----------------------------------------------------


def _with_avatar(nullable: bool) -> tuple[Any, Any]:
    files = entity("files", columns={"id": uuid().primary_key(),
                   "owner_id": uuid().references("people"), "name": text()})  # fmt: skip
    avatar = uuid().references(files)
    people = entity("people", columns={
        "id": uuid().primary_key(), "email": text().personal_data("email"),
        "avatar_id": avatar.nullable() if nullable else avatar,
    })  # fmt: skip
    return people, files


async def test_the_subjects_own_nullable_key_to_a_deleted_table_is_cleared_first(
    make_db: MakeDb,
) -> None:
    people, files = _with_avatar(nullable=True)
    db = make_db([people, files])
    await db.migrate()
    ann, bob = new_id(), new_id()
    for who in (ann, bob):
        await db.people.insert({"id": who, "email": f"{who}@x.org"})
        f = await db.files.insert({"id": new_id(), "owner_id": who, "name": "me.png"})
        await db.people.where(id=who).update(avatar_id=f["id"])
    tables = {"people": Anonymize({"email": "erased"}), "files": "delete"}
    subject = define_subject(people, database=db, key=lambda i: i.member_id, tables=tables)
    assert [(lk.table, lk.column) for lk in subject.plan().cleared] == [("people", "avatar_id")]
    job = subject_erase(name="people.erase", input=Erase, subject=subject)
    trace = await JobHarness(jobs=[job])(job, Erase(member_id=ann))
    assert trace.state == "done", trace.last_error
    assert "subject:clear:people.avatar_id:00000" in trace.steps
    row = await db.people.where(id=ann).first()
    assert row is not None and (row["email"], row["avatar_id"]) == ("erased", None)
    assert [f["owner_id"] for f in await db.files.all()] == [bob]
    other = await db.people.where(id=bob).first()
    assert other is not None and other["avatar_id"] is not None
    from ultimat3.jobs import subject_proof

    assert await subject_proof(subject, database=make_db([people, files])) == []


def test_the_subjects_own_required_key_to_a_deleted_table_is_a_cycle() -> None:
    people, files = _with_avatar(nullable=False)
    subject = define_subject(people, database=memory_database([people, files]),
                             key=lambda i: i.member_id,
                             tables={"people": "delete", "files": "delete"})  # fmt: skip
    with pytest.raises(XError) as err:
        subject.plan()
    assert err.value.code == "X_SUBJECT_CYCLE"
    assert "people.avatar_id references the deleted 'files'" in err.value.message
