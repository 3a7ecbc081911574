"""``partitions()``: one step per partitioned entity, ``.schedule``, the ``{from}`` run, a
second run at one instant changing nothing, and the declaration refusals."""

from __future__ import annotations

import sys
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from ultimat3.core import FrozenClock, XError, use_clock
from ultimat3.entity import (
    Database,
    PartitionBy,
    entity,
    memory_database,
    text,
    timestamp,
    uuid,
)
from ultimat3.jobs import Task, next_task_run, partitions
from ultimat3.jobs.factories.partitions import PartitionsInput
from ultimat3.jobs.testing import JobHarness

MakeDb = Callable[..., Database]

clicks = entity(
    "clicks",
    columns={"id": uuid(), "at": timestamp(), "what": text()},
    primary_key=["id", "at"],
    partition_by=PartitionBy("at", unit="day", ahead=2, retain="3d"),
)
audits = entity(
    "audits",
    columns={"id": uuid(), "at": timestamp()},
    primary_key=["id", "at"],
    partition_by=PartitionBy("at", unit="month", ahead=1),
)
plain = entity("plain", columns={"id": uuid().primary_key()})
T0 = datetime(2026, 5, 10, 12, tzinfo=UTC)


async def migrated(make_db: MakeDb, clock: FrozenClock) -> Database:
    db = make_db([clicks, audits, plain])
    with use_clock(clock):
        await db.migrate()
    return db


async def test_one_step_per_partitioned_entity_creates_ahead_and_retires_what_expired(
    make_db: MakeDb,
) -> None:
    clock = FrozenClock(T0)
    db = await migrated(make_db, clock)
    job = partitions(database=db)
    h = JobHarness(jobs=[job], clock=clock)
    first = await h(job, {})
    assert first.state == "done", first.last_error
    assert list(first.steps) == ["partitions:clicks", "partitions:audits"]
    # migrate already made today's and the two ahead: nothing to do at the same instant
    assert first.result == {
        "tables": [
            {"table": "clicks", "created": [], "dropped": []},
            {"table": "audits", "created": [], "dropped": []},
        ]
    }
    clock.advance("5d")  # 15 May: today and two ahead; the 10th and 11th ended 3d+ ago
    later = await h(job, {})
    assert later.state == "done", later.last_error
    [c, a] = later.result["tables"]
    assert c["created"] == ["clicks_p20260515", "clicks_p20260516", "clicks_p20260517"]
    assert c["dropped"] == ["clicks_p20260510", "clicks_p20260511"]
    assert a == {"table": "audits", "created": [], "dropped": []}  # no retain: keeps everything
    again = await h(job, {})  # a second run at one instant creates and drops nothing
    assert again.id != later.id
    assert again.result == first.result


async def test_the_from_run_creates_back_to_it_drops_nothing_under_its_own_key(
    make_db: MakeDb,
) -> None:
    clock = FrozenClock(T0)
    db = await migrated(make_db, clock)
    job = partitions(database=db, name="parts")
    h = JobHarness(jobs=[job], clock=clock)
    clock.advance("5d")
    scheduled = await h.enqueue(job, {})
    backfill = await h.enqueue(job, {"from": "2026-05-01T06:00:00Z"})
    assert backfill.id != scheduled.id  # its key is its own: never folds into the schedule's
    again = await h.enqueue(job, PartitionsInput(from_=datetime(2026, 5, 1, 6, tzinfo=UTC)))
    assert again.id == backfill.id
    await h.drain()
    trace = await h.trace(backfill.id)
    assert trace.state == "done", trace.last_error
    [c, a] = trace.result["tables"]
    assert c["dropped"] == [] and a["dropped"] == []
    assert c["created"][:9] == [f"clicks_p202605{d:02d}" for d in range(1, 10)]
    assert a["created"] == []  # May's month partition already stood
    sched = await h.trace(scheduled.id)
    assert sched.state == "done"


async def test_the_clock_given_is_the_runs_now(make_db: MakeDb) -> None:
    clock = FrozenClock(T0)
    db = await migrated(make_db, clock)
    own = FrozenClock(T0 + timedelta(days=1))
    job = partitions(database=db, name="own_clock", clock=own)
    trace = await JobHarness(jobs=[job], clock=clock)(job, {})
    assert trace.result["tables"][0]["created"] == ["clicks_p20260513"]


def test_the_schedule_task_fires_daily_at_17_past_3_utc() -> None:
    db = memory_database([plain])  # any database: the schedule is declared without one
    del db
    from ultimat3.entity import database

    job = partitions(database=database("postgresql://127.0.0.1/x", [clicks]))
    assert isinstance(job.schedule, Task)
    assert (job.schedule.name, job.schedule.cron, job.schedule.tz) == (
        "partitions.schedule",
        "17 3 * * *",
        "UTC",
    )
    assert next_task_run(job.schedule, T0) == datetime(2026, 5, 11, 3, 17, tzinfo=UTC)
    [(target, given)] = job.schedule.calls(0)
    assert target is job and given == {}
    berlin = partitions(
        database=database("postgresql://127.0.0.1/x", [clicks]), name="p2", cron="0 4 * * 1",
        tz="Europe/Berlin",
    )  # fmt: skip
    assert next_task_run(berlin.schedule, T0).isoformat() == "2026-05-11T04:00:00+02:00"


def _declare(**change: Any) -> Any:
    from ultimat3.entity import database

    kw: dict[str, Any] = {"database": database("postgresql://127.0.0.1/x", [clicks, plain])}
    kw.update(change)
    return partitions(**kw)


@pytest.mark.parametrize(
    ("change", "code", "needle"),
    [
        ({"name": ""}, "X_JOB_DECLARATION_INVALID", "name is required"),
        ({"database": memory_database([clicks])}, "X_JOB_DECLARATION_INVALID", "not a Postgres"),
        ({"database": "postgresql://x"}, "X_JOB_DECLARATION_INVALID", "not a Postgres"),
        ({"database": None}, "X_JOB_DECLARATION_INVALID", "not a Postgres"),
        ({"clock": "now"}, "X_JOB_DECLARATION_INVALID", "has no now()"),
        ({"cron": "every day"}, "X_CONFIG_INVALID", "cron"),
        ({"tz": "Mars/Olympus"}, "X_CONFIG_INVALID", "Mars/Olympus"),
    ],
)
def test_every_declaration_refusal(change: dict[str, Any], code: str, needle: str) -> None:
    with pytest.raises(XError) as err:
        _declare(**change)
    assert err.value.code == code
    assert needle in str(err.value), str(err.value)


def test_a_database_with_no_partitioned_entity_is_refused() -> None:
    from ultimat3.entity import database

    with pytest.raises(XError) as err:
        partitions(database=database("postgresql://127.0.0.1/x", [plain]))
    assert err.value.code == "X_JOB_DECLARATION_INVALID"
    assert "no partitioned entity" in str(err.value)


async def test_a_naive_from_is_refused_at_enqueue(make_db: MakeDb) -> None:
    clock = FrozenClock(T0)
    db = await migrated(make_db, clock)
    job = partitions(database=db)
    h = JobHarness(jobs=[job], clock=clock)
    with pytest.raises(XError) as err:
        await h.enqueue(job, {"from": "2026-05-01T06:00:00"})
    assert "offset" in str(err.value)
    assert await h.rows() == []


def test_without_ultimat3_entity_the_factory_names_the_extra(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from ultimat3.entity import database

    db = database("postgresql://127.0.0.1/x", [clicks])
    monkeypatch.setitem(sys.modules, "ultimat3.entity", None)
    with pytest.raises(XError) as err:
        partitions(database=db)
    assert err.value.code == "X_CONFIG_INVALID"
    assert 'pip install "ultimat3-jobs[entity]"' in (err.value.fix or "")
