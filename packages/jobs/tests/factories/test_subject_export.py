"""``subject_export()``: one object per page per table plus ``index.json``, sealed columns never
leave, the csv formula guard, the declaration refusals."""

from __future__ import annotations

import csv
import io
import json
from collections.abc import Callable
from typing import Any

import pytest
from pydantic import BaseModel

from ultimat3.core import XError, new_id
from ultimat3.entity import Database, KeyRing, entity, memory_database, text, uuid
from ultimat3.jobs import Anonymize, Retain, define_subject, subject_export
from ultimat3.jobs.testing import JobHarness

MakeDb = Callable[..., Database]

members = entity("members", columns={
    "id": uuid().primary_key(), "email": text().personal_data("email"),
    "card": text().sealed().nullable(),
})  # fmt: skip
posts = entity("posts", columns={
    "id": uuid().primary_key(), "member_id": uuid().references(members), "title": text(),
})  # fmt: skip
comments = entity("comments", columns={
    "id": uuid().primary_key(), "member_id": uuid().references(members), "body": text(),
})  # fmt: skip
TABLES: dict[str, Any] = {
    "members": Anonymize({"email": "erased@example.invalid"}),
    "posts": Retain("published work belongs to the org"),
    "comments": "delete",
}
RING = KeyRing({"k1": KeyRing.generate_key()})


class Store:
    """A dict-backed object store (``put`` as ``ultimat3.storage`` stores answer it)."""

    def __init__(self) -> None:
        self.objects: dict[str, bytes] = {}
        self.types: dict[str, str | None] = {}

    async def put(self, key: str, data: bytes, *, content_type: str | None = None) -> None:
        self.objects[key] = data
        self.types[key] = content_type


class Ask(BaseModel):
    member_id: str


@pytest.mark.parametrize("fmt", ["ndjson", "csv"])
async def test_the_export_writes_a_part_per_page_per_table_and_the_index(
    make_db: MakeDb, fmt: str
) -> None:
    db = make_db([members, posts, comments], key_ring=RING)
    await db.migrate()
    ann, bob = new_id(), new_id()
    for who in (ann, bob):
        await db.members.insert({"id": who, "email": f"{who}@x.org", "card": "4111 1111"})
        await db.posts.insert({"id": new_id(), "member_id": who, "title": "=HYPERLINK(evil)"})
        await db.comments.insert_all(
            [{"id": new_id(), "member_id": who, "body": f"{who} {n}"} for n in range(5)]
        )
    subject = define_subject(members, database=db, key=lambda i: i.member_id, tables=TABLES)
    store = Store()
    job = subject_export(name="members.export", input=Ask, subject=subject, format=fmt,
                         prefix=lambda i: f"subjects/{i.member_id}/", sink=lambda i: store,
                         page_size=2)  # fmt: skip
    trace = await JobHarness(jobs=[job])(job, Ask(member_id=ann))
    assert trace.state == "done", trace.last_error
    base = f"subjects/{ann}"
    assert trace.result["prefix"] == base
    assert {t["table"]: t["rows"] for t in trace.result["tables"]} == {
        "posts": 1, "comments": 5, "members": 1,
    }  # fmt: skip
    index = json.loads(store.objects[f"{base}/index.json"])
    assert index == {
        "members": {"rows": 1, "treatment": "anonymize", "retain": None},
        "posts": {"rows": 1, "treatment": "retain", "retain": "published work belongs to the org"},
        "comments": {"rows": 5, "treatment": "delete", "retain": None},
    }
    assert sorted(k for k in store.objects if k != f"{base}/index.json") == [
        f"{base}/comments/part-00000.{fmt}",
        f"{base}/members/part-00000.{fmt}",
        f"{base}/posts/part-00000.{fmt}",
    ]  # fmt: skip  (one page of parent keys: the person's own)
    everything = b"".join(store.objects.values())
    assert b"4111" not in everything and b"card" not in everything  # sealed never leaves
    assert bob.encode() not in everything  # nobody else's rows
    if fmt == "ndjson":
        lines = store.objects[f"{base}/comments/part-00000.ndjson"].decode().splitlines()
        assert sorted(json.loads(x)["body"] for x in lines) == [f"{ann} {n}" for n in range(5)]
    else:
        text_ = store.objects[f"{base}/posts/part-00000.csv"].decode()
        [row] = list(csv.DictReader(io.StringIO(text_)))
        assert row["title"] == "'=HYPERLINK(evil)"  # the formula guard


@pytest.mark.parametrize(
    ("change", "needle"),
    [
        ({"name": ""}, "name is required"),
        ({"subject": "members"}, "is not a define_subject()"),
        ({"format": "xlsx"}, "format 'xlsx'"),
        ({"sink": None}, "prefix and sink must be callables"),
        ({"prefix": "p/"}, "prefix and sink must be callables"),
        ({"page_size": 0}, "page_size 0"),
        ({"input": None}, "input must be"),
    ],
)
def test_every_declaration_refusal(change: dict[str, Any], needle: str) -> None:
    db = memory_database([members, posts, comments], key_ring=RING)
    kw: dict[str, Any] = {
        "name": "x", "input": Ask, "prefix": lambda i: "p", "sink": lambda i: Store(),
        "subject": define_subject(members, database=db, key=lambda i: i.member_id, tables=TABLES),
    }  # fmt: skip
    kw.update(change)
    with pytest.raises(XError) as err:
        subject_export(**kw)
    assert err.value.code == "X_JOB_DECLARATION_INVALID"
    assert needle in str(err.value)
