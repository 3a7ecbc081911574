"""task(): the declaration, its refusals, the occurrence resolver across DST, and the task's own
enqueue through the facade."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any
from zoneinfo import ZoneInfo

import pytest
from croniter import croniter
from hypothesis import given, settings
from hypothesis import strategies as st
from pydantic import BaseModel

from ultimat3.core import XError, swap_adapter
from ultimat3.jobs import Task, TaskOccurrence, job, next_task_run, task
from ultimat3.jobs.adapter import JOB_DRIVER
from ultimat3.jobs.memory import memory_job_driver


class Day(BaseModel):
    day: str


@job(input=Day, idempotency_key=lambda i: f"report:{i.day}")
async def report(input: Day, step: Any, ctx: Any) -> None:
    return None


class Nothing(BaseModel):
    pass


@job(input=Nothing, idempotency_key=lambda i: "sweep")
async def sweep(input: Nothing, step: Any, ctx: Any) -> None:
    return None


def _daily(at: TaskOccurrence) -> tuple[Any, object]:
    return (report, {"day": at.at.date().isoformat()})


def _utc(year: int, month: int, day: int, hour: int = 0, minute: int = 0) -> datetime:
    return datetime(year, month, day, hour, minute, tzinfo=UTC)


# --- the declaration ---------------------------------------------------------------------------


def test_a_declaration_lifts_its_fields() -> None:
    t = task(name="reports.nightly", cron="17 3 * * *", tz="Europe/Berlin", enqueue=_daily)
    assert isinstance(t, Task)
    assert (t.name, t.cron, t.tz, t.catch_up, t.kind) == (
        "reports.nightly",
        "17 3 * * *",
        "Europe/Berlin",
        "latest",
        "task",
    )
    assert t.zone == ZoneInfo("Europe/Berlin")
    assert t.describe() == {
        "name": "reports.nightly",
        "cron": "17 3 * * *",
        "tz": "Europe/Berlin",
        "catch_up": "latest",
    }


@pytest.mark.parametrize(
    ("over", "names"),
    [
        ({"cron": "61 3 * * *"}, "cron '61 3 * * *'"),
        ({"cron": "17 3 * *"}, "has 4 fields"),
        ({"cron": "0 17 3 * * *"}, "has 6 fields"),
        ({"cron": "0 0 30 2 *"}, "cron '0 0 30 2 *'"),  # February 30th never comes
        ({"cron": ""}, "cron ''"),
        ({"tz": "Mars/Olympus_Mons"}, "tz 'Mars/Olympus_Mons' is not an IANA zone"),
        ({"tz": "../../etc/passwd"}, "tz '../../etc/passwd'"),
        ({"catch_up": "some"}, "catch_up 'some' is not one of none, latest, all"),
        ({"enqueue": 42}, "enqueue is a int"),
    ],
)
def test_a_bad_declaration_is_refused_naming_the_task_and_a_fix(
    over: dict[str, Any], names: str
) -> None:
    fields: dict[str, Any] = {"name": "nightly", "cron": "17 3 * * *", "enqueue": _daily}
    fields.update(over)
    with pytest.raises(XError) as exc:
        task(**fields)
    assert exc.value.code == "X_CONFIG_INVALID"
    assert "task 'nightly'" in exc.value.message
    assert names in exc.value.message
    assert exc.value.fix
    assert exc.value.meta["task"] == "nightly"


def test_every_cause_is_named_in_one_refusal() -> None:
    with pytest.raises(XError) as exc:
        task(name="", cron="nope", tz="Nowhere/City", catch_up="twice", enqueue=_daily)  # type: ignore[arg-type]
    causes = exc.value.meta["causes"]
    assert len(causes) == 4
    assert exc.value.message.startswith("task() is invalid")


def test_an_alias_is_a_cron() -> None:
    t = task(name="daily", cron="@daily", enqueue=sweep)
    assert t.next_run(_utc(2026, 5, 1, 12)) == _utc(2026, 5, 2)


# --- the resolver across DST -------------------------------------------------------------------


def test_a_0230_daily_fires_once_on_the_berlin_spring_forward_day() -> None:
    t = task(name="t", cron="30 2 * * *", tz="Europe/Berlin", enqueue=sweep)
    runs = _runs(t, _utc(2026, 3, 27, 12), 4)
    # 02:30 does not exist on 2026-03-29: it fires once, where the jump lands it (03:30 CEST)
    assert [r.isoformat() for r in runs] == [
        "2026-03-28T02:30:00+01:00",
        "2026-03-29T03:30:00+02:00",
        "2026-03-30T02:30:00+02:00",
        "2026-03-31T02:30:00+02:00",
    ]
    assert runs[1].astimezone(UTC) == _utc(2026, 3, 29, 1, 30)


def test_a_0230_daily_fires_once_on_the_new_york_spring_forward_day() -> None:
    t = task(name="t", cron="30 2 * * *", tz="America/New_York", enqueue=sweep)
    runs = _runs(t, _utc(2026, 3, 7, 12), 3)
    assert [r.astimezone(UTC) for r in runs] == [
        _utc(2026, 3, 8, 7, 30),  # 03:30 EDT: 02:30 was skipped by the clocks
        _utc(2026, 3, 9, 6, 30),
        _utc(2026, 3, 10, 6, 30),
    ]


def test_a_0130_daily_fires_once_on_the_new_york_fall_back_day() -> None:
    t = task(name="t", cron="30 1 * * *", tz="America/New_York", enqueue=sweep)
    runs = _runs(t, _utc(2026, 10, 31, 12), 3)
    # 01:30 happens twice on 2026-11-01: it fires at the first (EDT) and not at the second
    assert [r.isoformat() for r in runs] == [
        "2026-11-01T01:30:00-04:00",
        "2026-11-02T01:30:00-05:00",
        "2026-11-03T01:30:00-05:00",
    ]
    # asking from between the two 01:30s does not answer the repeated one
    between = _utc(2026, 11, 1, 6, 0)  # 01:00 EST, the second pass
    assert t.next_run(between) == runs[1]


def test_a_0230_daily_fires_once_on_the_berlin_fall_back_day() -> None:
    t = task(name="t", cron="30 2 * * *", tz="Europe/Berlin", enqueue=sweep)
    runs = _runs(t, _utc(2026, 10, 24, 12), 2)
    assert [r.isoformat() for r in runs] == [
        "2026-10-25T02:30:00+02:00",
        "2026-10-26T02:30:00+01:00",
    ]


def test_an_hourly_schedule_stays_hourly_across_both_changes() -> None:
    t = task(name="t", cron="30 * * * *", tz="America/New_York", enqueue=sweep)
    fall = [r.astimezone(UTC) for r in _runs(t, _utc(2026, 11, 1, 3), 5)]
    assert fall == [_utc(2026, 11, 1, h, 30) for h in range(3, 8)]  # both 01:30s fire
    spring = [r.astimezone(UTC) for r in _runs(t, _utc(2026, 3, 8, 5), 4)]
    assert spring == [_utc(2026, 3, 8, h, 30) for h in range(5, 9)]  # 02:30 is 03:30, once


def test_next_run_is_in_the_tasks_zone_and_refuses_a_naive_from() -> None:
    t = task(name="t", cron="17 3 * * *", tz="Asia/Tokyo", enqueue=sweep)
    run = t.next_run(_utc(2026, 5, 31, 12))  # 21:00 in Tokyo
    assert run.tzinfo == ZoneInfo("Asia/Tokyo")
    assert run.isoformat() == "2026-06-01T03:17:00+09:00"
    assert next_task_run(t, int(_utc(2026, 5, 31, 12).timestamp() * 1000)) == run
    with pytest.raises(XError) as exc:
        next_task_run(t, datetime(2026, 6, 1))
    assert exc.value.code == "X_INVARIANT"
    assert "'t'" in exc.value.message


def test_the_next_run_is_a_function_of_the_task_that_no_driver_answers() -> None:
    """One resolver, so a dashboard and the scheduler cannot disagree: ``next_task_run`` reads no
    store, so it is the task's (``t.next_run``), not a member of a driver's introspection."""
    t = task(name="t", cron="*/20 9-17 * * 1-5", tz="Europe/London", enqueue=sweep)
    driver = memory_job_driver()
    start = _utc(2026, 3, 27, 18)  # a Friday evening, the weekend before the change
    assert not hasattr(driver.introspect, "next_task_run")
    assert t.next_run(start) == next_task_run(t, start)
    assert next_task_run(t, start).isoformat() == "2026-03-30T09:00:00+01:00"


def _runs(t: Task, start: datetime, count: int) -> list[datetime]:
    out: list[datetime] = []
    at = start
    for _ in range(count):
        at = t.next_run(at)
        out.append(at)
    return out


# --- properties --------------------------------------------------------------------------------

CRONS = st.sampled_from(
    [
        "* * * * *",
        "17 3 * * *",
        "30 2 * * *",
        "30 1 * * *",
        "0 * * * *",
        "*/15 * * * *",
        "0 0 1 * *",
        "45 23 * * 0",
        "5 4 29 2 *",
        "0 12 * * 1-5",
        "30 */3 * * *",
    ]
)
ZONES = st.sampled_from(
    ["UTC", "Europe/Berlin", "America/New_York", "Australia/Lord_Howe", "Asia/Kolkata"]
)
INSTANTS = st.integers(
    min_value=int(_utc(2020, 1, 1).timestamp() * 1000),
    max_value=int(_utc(2030, 12, 31).timestamp() * 1000),
)


@settings(max_examples=300, deadline=None)
@given(CRONS, ZONES, INSTANTS, st.integers(min_value=0, max_value=3 * 86_400_000))
def test_the_next_run_is_strictly_after_and_monotone(
    cron: str, zone: str, start: int, gap: int
) -> None:
    t = task(name="p", cron=cron, tz=zone, enqueue=sweep)
    first = next_task_run(t, start)
    later = next_task_run(t, start + gap)
    assert first.timestamp() * 1000 > start
    assert later >= first
    assert later.timestamp() * 1000 > start + gap
    # nothing fires strictly between from_ and the answer
    assert next_task_run(t, first) > first


@settings(max_examples=300, deadline=None)
@given(CRONS, INSTANTS)
def test_in_utc_it_matches_croniter(cron: str, start: int) -> None:
    t = task(name="p", cron=cron, enqueue=sweep)
    from_ = datetime.fromtimestamp(start / 1000, UTC)
    expected = croniter(cron, from_).get_next(datetime)
    assert next_task_run(t, from_) == expected


@settings(max_examples=100, deadline=None)
@given(CRONS, ZONES, INSTANTS)
def test_every_run_is_a_wall_time_the_cron_names(cron: str, zone: str, start: int) -> None:
    t = task(name="p", cron=cron, tz=zone, enqueue=sweep)
    run = next_task_run(t, start)
    wall = run.replace(tzinfo=None)
    # the wall time matches the cron, or (in a spring-forward gap) lies just after the jump
    if not croniter.match(cron, wall):
        back = wall - (run.dst() or timedelta(0)) - timedelta(minutes=30)
        assert croniter.match(cron, wall - timedelta(hours=1)) or croniter.match(cron, back)


# --- what an occurrence queues -----------------------------------------------------------------


def test_an_occurrence_becomes_requests_built_by_the_facade() -> None:
    t = task(name="nightly", cron="17 3 * * *", tz="Europe/Berlin", enqueue=_daily)
    occurrence = int(_utc(2026, 3, 29, 1, 17).timestamp() * 1000)
    (request,) = t.requests(occurrence)
    assert request.name == "report"
    assert request.payload == {"day": "2026-03-29"}
    assert request.idempotency_key == "report:2026-03-29"
    assert request.queue == "default"


def test_a_bare_job_is_queued_with_an_empty_input() -> None:
    t = task(name="sweeper", cron="*/5 * * * *", enqueue=sweep)
    (request,) = t.requests(0)
    assert (request.name, request.payload, request.idempotency_key) == ("sweep", {}, "sweep")


def test_enqueue_answering_something_else_is_refused_naming_the_task() -> None:
    t = task(name="odd", cron="* * * * *", enqueue=lambda at: "report")  # type: ignore[arg-type,return-value]
    with pytest.raises(XError) as exc:
        t.requests(0)
    assert exc.value.code == "X_CONFIG_INVALID"
    assert "task 'odd'" in exc.value.message


def test_an_input_the_job_refuses_is_the_jobs_refusal() -> None:
    t = task(name="bad-input", cron="* * * * *", enqueue=lambda at: (report, {"when": 1}))
    with pytest.raises(XError) as exc:
        t.requests(0)
    assert exc.value.code == "X_BODY_INVALID"


async def test_the_tasks_own_enqueue_goes_through_the_facade_and_is_not_a_fire() -> None:
    driver = memory_job_driver()
    t = task(
        name="fanout",
        cron="0 6 * * *",
        enqueue=lambda at: [(report, {"day": "a"}), (report, {"day": "b"}), (report, {"day": "a"})],
    )
    with swap_adapter(JOB_DRIVER, driver):
        results = await t.enqueue(_utc(2026, 1, 1, 6))
    assert [r.deduped for r in results] == [False, False, True]
    assert results[2].id == results[0].id
    assert len(await driver.introspect.list()) == 2
    assert await driver.introspect.task_fires() == []
