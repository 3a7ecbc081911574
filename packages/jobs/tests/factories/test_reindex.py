"""``reindex()``: phase one writes every row's document at the run's version, the sweep removes
what the source no longer reads (tombstoned a millisecond above), tenancy, a failed page resumed,
and the declaration refusals."""

from __future__ import annotations

import sys
from collections.abc import Callable, Sequence
from typing import Any

import pytest
from pydantic import BaseModel

from ultimat3.core import FrozenClock, XError, new_id, swap_adapter, use_tenant
from ultimat3.entity import (
    SEARCH_INDEX,
    Database,
    MemorySearchIndex,
    SearchDocument,
    entity,
    memory_search_index,
    postgres_search_index,
    text,
    uuid,
)
from ultimat3.jobs import Retry, reindex
from ultimat3.jobs.testing import JobHarness

MakeDb = Callable[..., Database]

notes = entity("notes", columns={"id": uuid().primary_key(), "body": text().searchable()})
org_notes = entity(
    "org_notes",
    columns={"id": uuid().primary_key(), "org_id": uuid().tenant(), "body": text().searchable()},
)
plain = entity("plain", columns={"id": uuid().primary_key(), "body": text()})
pairs = entity(
    "pairs", columns={"a": uuid(), "b": uuid(), "body": text().searchable()}, primary_key=["a", "b"]
)
T0 = 1_780_000_000_000  # the frozen clock's start, epoch ms


def doc(ent: str, key: str, body: str, version: int, tenant: str | None = None) -> SearchDocument:
    return SearchDocument(id=f"{ent}:{key}", entity=ent, tenant=tenant, text=body, version=version)


async def test_rows_then_the_sweep_on_the_postgres_index(make_db: MakeDb) -> None:
    db = make_db([notes, plain])
    await db.migrate()
    index = postgres_search_index(db)
    await index.migrate()
    rows = [{"id": new_id(), "body": f"note number {n}"} for n in range(1_234)]
    await db.notes.insert_all(rows)
    gone, later = new_id(), new_id()
    await index.upsert(
        [
            doc("notes", rows[0]["id"], "stale text", T0 - 50),  # rewritten by phase one
            doc("notes", gone, "a deleted note", T0 - 10),  # its row is gone: swept
            doc("notes", later, "written meanwhile", T0 + 10),  # newer than the run: kept
            doc("other", "x", "another entity's", T0 - 10),  # not this entity's: kept
        ]
    )
    job = reindex(name="reindex_notes", entity=notes, database=db, index=index, page_size=100)
    h = JobHarness(jobs=[job], clock=FrozenClock(T0))
    trace = await h(job, {})
    assert trace.state == "done", trace.last_error
    assert trace.result == {"rows": 1_234, "pages": 13, "removed": 1}
    steps = list(trace.steps)
    assert steps[0] == "reindex:begin" and steps[1] == "reindex:rows:00000"
    assert steps[13] == "reindex:rows:00012" and steps[14] == "reindex:sweep:00000"
    listed = await _all(index)
    want = {f"notes:{r['id']}" for r in rows} | {f"notes:{later}", "other:x"}
    assert set(listed) == want
    assert listed[f"notes:{rows[0]['id']}"].text == "note number 0"
    assert listed[f"notes:{rows[5]['id']}"].version == T0
    # the tombstone sits one millisecond above the listed version: T0 - 9 revives, T0 - 9 only
    assert await index.upsert([doc("notes", gone, "back", T0 - 9)]) == 0
    assert await index.upsert([doc("notes", gone, "back", T0 - 8)]) == 1
    # a second run, later: the revived note and the one written "meanwhile" have no row
    h.clock.advance("1s")
    again = await h(job, {})
    assert again.result == {"rows": 1_234, "pages": 13, "removed": 2}
    assert set(await _all(index)) == want - {f"notes:{later}"}


async def _all(index: Any, tenant: str | None = None) -> dict[str, SearchDocument]:
    out: dict[str, SearchDocument] = {}
    after: str | None = None
    while True:
        page = await index.list(tenant=tenant, after=after, limit=500)
        out.update({d.id: d for d in page})
        if len(page) < 500:
            return out
        after = page[-1].id


class Org(BaseModel):
    org_id: str


async def test_tenant_none_sweeps_every_tenant_a_declared_tenant_its_own(make_db: MakeDb) -> None:
    db = make_db([org_notes])
    await db.migrate()
    a, b = new_id(), new_id()
    for org in (a, b):
        with use_tenant(org):
            await db.org_notes.insert_all(
                [{"id": new_id(), "body": f"{org} {n}"} for n in range(3)]
            )
    index = memory_search_index()
    stale_a, stale_b = new_id(), new_id()
    await index.upsert([doc("org_notes", stale_a, "gone", T0 - 1, a),
                        doc("org_notes", stale_b, "gone", T0 - 1, b)])  # fmt: skip

    own = reindex(name="reindex_org", entity=org_notes, database=db, index=index,
                  tenant=lambda i: i.org_id, input=Org)  # fmt: skip
    h = JobHarness(jobs=[own], clock=FrozenClock(T0))
    trace = await h(own, Org(org_id=a))
    assert trace.result == {"rows": 3, "pages": 1, "removed": 1}
    assert len(await _all(index, a)) == 3
    assert f"org_notes:{stale_b}" in await _all(index, b)  # another tenant's: untouched

    every = reindex(name="reindex_all", entity=org_notes, database=db, index=index)
    h2 = JobHarness(jobs=[every], clock=FrozenClock(T0 + 5))
    trace = await h2(every, {})
    assert trace.result == {"rows": 6, "pages": 1, "removed": 1}
    assert {d.tenant for d in (await _all(index)).values()} == {a, b}
    assert len(await _all(index)) == 6


class Flaky(MemorySearchIndex):
    """A memory index whose upsert throws once, on the third page."""

    def __init__(self) -> None:
        super().__init__()
        self.upserts = 0

    async def upsert(self, docs: Sequence[SearchDocument]) -> int:
        self.upserts += 1
        if self.upserts == 3:
            raise XError("X_DB_UNAVAILABLE", "the index is down for a moment")
        return await super().upsert(docs)


async def test_a_failed_page_resumes_there_and_the_default_index_is_the_installed_one(
    make_db: MakeDb,
) -> None:
    db = make_db([notes])
    await db.migrate()
    await db.notes.insert_all([{"id": new_id(), "body": f"n{n}"} for n in range(50)])
    index = Flaky()
    job = reindex(name="reindex_flaky", entity=notes, database=db, page_size=10,
                  retry=Retry(attempts=3, backoff="fixed", delay="1s"))  # fmt: skip
    with swap_adapter(SEARCH_INDEX, index):
        trace = await JobHarness(jobs=[job], clock=FrozenClock(T0))(job, {})
    assert trace.state == "done", trace.last_error
    assert trace.attempts == 2
    # five full pages, then the empty one that ends a keyset pass over exactly 50 rows
    assert trace.result == {"rows": 50, "pages": 6, "removed": 0}
    assert index.upserts == 6  # 5 pages + the failed one: pages 0 and 1 were not written again
    assert len(await _all(index)) == 50


async def test_a_source_of_your_own(make_db: MakeDb) -> None:
    db = make_db([pairs])
    await db.migrate()
    a = new_id()
    await db.pairs.insert_all([{"a": a, "b": new_id(), "body": f"p{n}"} for n in range(7)])

    async def read(page: Any) -> tuple[list[dict[str, Any]], Any]:
        rows = await db.pairs.where(a=a).all()
        start = page.after or 0
        chunk = rows[start : start + page.limit]
        return chunk, (start + page.limit if start + page.limit < len(rows) else None)

    index = memory_search_index()
    job = reindex(name="reindex_pairs", entity=pairs, database=db, source=read, index=lambda: index,
                  page_size=3)  # fmt: skip
    trace = await JobHarness(jobs=[job], clock=FrozenClock(T0))(job, {})
    assert trace.result == {"rows": 7, "pages": 3, "removed": 0}
    assert len(await _all(index)) == 7


def _declare(**change: Any) -> Any:
    from ultimat3.entity import memory_database

    kw: dict[str, Any] = {
        "name": "ri", "entity": notes, "index": memory_search_index(),
        "database": memory_database([notes, plain, pairs]),
    }  # fmt: skip
    kw.update(change)
    return reindex(**kw)


@pytest.mark.parametrize(
    ("change", "code", "needle"),
    [
        ({"entity": plain}, "X_INVARIANT", "'plain' has no .searchable() column"),
        ({"name": ""}, "X_JOB_DECLARATION_INVALID", "name is required"),
        ({"entity": "notes"}, "X_JOB_DECLARATION_INVALID", "is not an entity()"),
        ({"entity": org_notes}, "X_JOB_DECLARATION_INVALID", "does not declare 'org_notes'"),
        ({"database": "postgresql://"}, "X_JOB_DECLARATION_INVALID", "is not a database()"),
        ({"page_size": 0}, "X_JOB_DECLARATION_INVALID", "page_size 0"),
        ({"page_size": 10_001}, "X_JOB_DECLARATION_INVALID", "page_size 10001"),
        ({"page_size": True}, "X_JOB_DECLARATION_INVALID", "page_size True"),
        ({"entity": pairs}, "X_JOB_DECLARATION_INVALID", "composite primary key"),
        ({"source": "rows"}, "X_JOB_DECLARATION_INVALID", "source must be a callable"),
        ({"index": 42}, "X_JOB_DECLARATION_INVALID", "is not a SearchIndex"),
    ],
)
def test_every_declaration_refusal(change: dict[str, Any], code: str, needle: str) -> None:
    with pytest.raises(XError) as err:
        _declare(**change)
    assert err.value.code == code
    assert needle in str(err.value), str(err.value)


def test_without_ultimat3_entity_the_factory_names_the_extra(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setitem(sys.modules, "ultimat3.entity", None)
    with pytest.raises(XError) as err:
        reindex(name="ri", entity=notes, database=None)  # type: ignore[arg-type]
    assert err.value.code == "X_CONFIG_INVALID"
    assert 'pip install "ultimat3-jobs[entity]"' in (err.value.fix or "")
