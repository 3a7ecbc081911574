"""``refresh_view()``: one step refreshes a materialized view (concurrently over a unique index);
every declaration refusal."""

from __future__ import annotations

import sys
from collections.abc import Callable
from typing import Any

import pytest

from ultimat3.core import XError, new_id
from ultimat3.entity import Database, View, bigint, entity, memory_database, text, uuid
from ultimat3.jobs import refresh_view
from ultimat3.jobs.testing import JobHarness

MakeDb = Callable[..., Database]

posts = entity("posts", columns={"id": uuid().primary_key(), "topic": text()})
topic_totals = entity(
    "topic_totals",
    columns={"topic": text().unique(), "total": bigint()},
    view=View("select topic, count(*) as total from posts group by topic", materialized=True),
)
no_unique = entity(
    "topic_counts",
    columns={"topic": text(), "total": bigint()},
    view=View("select topic, count(*) as total from posts group by topic", materialized=True),
)
plain = entity(
    "topic_live",
    columns={"topic": text(), "total": bigint()},
    view=View("select topic, count(*) as total from posts group by topic"),
)


@pytest.mark.parametrize("concurrently", [False, True])
async def test_a_run_refreshes_the_view_in_one_step(make_db: MakeDb, concurrently: bool) -> None:
    db = make_db([posts, topic_totals, no_unique, plain])
    await db.migrate()
    await db.posts.insert_all([{"id": new_id(), "topic": t} for t in ["a", "a", "b"]])
    view = topic_totals if concurrently else no_unique
    job = refresh_view(name=f"refresh_{view.name}", view=view, database=db,
                       concurrently=concurrently)  # fmt: skip
    assert await db.table(view.name).all() == []  # materialized at migrate, before the rows
    h = JobHarness(jobs=[job])
    trace = await h(job, {})
    assert trace.state == "done", trace.last_error
    assert list(trace.steps) == ["refresh"]
    assert trace.tenant_id is None  # tenant 'none': the read path scopes the rows
    got = {r["topic"]: r["total"] for r in await db.table(view.name).all()}
    assert got == {"a": 2, "b": 1}
    await db.posts.insert({"id": new_id(), "topic": "c"})
    assert (await h(job, {})).state == "done"
    assert {r["topic"] for r in await db.table(view.name).all()} == {"a", "b", "c"}


def _declare(**change: Any) -> Any:
    db = memory_database([posts, topic_totals, no_unique, plain])
    kw: dict[str, Any] = {"name": "rv", "view": topic_totals, "database": db}
    kw.update(change)
    return refresh_view(**kw)


@pytest.mark.parametrize(
    ("change", "needle"),
    [
        ({"view": posts}, "'posts' is a table, not a materialized view"),
        ({"view": plain}, "'topic_live' is a plain view"),
        ({"view": no_unique, "concurrently": True}, "needs a unique index on 'topic_counts'"),
        ({"view": "topic_totals"}, "is not an entity()"),
        ({"concurrently": "yes"}, "is not a bool"),
        ({"database": "postgresql://"}, "is not a database()"),
        ({"database": memory_database([posts])}, "database does not declare 'topic_totals'"),
        ({"name": ""}, "name is required"),
        ({"name": None}, "name is required"),
    ],
)
def test_every_declaration_refusal(change: dict[str, Any], needle: str) -> None:
    with pytest.raises(XError) as err:
        _declare(**change)
    assert err.value.code == "X_JOB_REFRESH_VIEW_INVALID"
    assert needle in str(err.value), str(err.value)
    assert err.value.fix


def test_a_valid_declaration_is_a_job() -> None:
    job = _declare(concurrently=True)
    assert job.name == "rv"
    assert job.describe()["steps"] == []


def test_without_ultimat3_entity_the_factory_names_the_extra(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    db = memory_database([posts, topic_totals])
    monkeypatch.setitem(sys.modules, "ultimat3.entity", None)
    with pytest.raises(XError) as err:
        refresh_view(name="rv", view=topic_totals, database=db)
    assert err.value.code == "X_CONFIG_INVALID"
    assert 'pip install "ultimat3-jobs[entity]"' in (err.value.fix or "")
