"""``rollup()``: the window from the first instant of the bucket holding now - lookback in its
zone, one upsert_all per run (every bucket or none), the declaration refusals, and the property:
over random late rows a run equals a from-scratch recomputation inside the lookback."""

from __future__ import annotations

import asyncio
import sys
from collections import Counter
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from typing import Any
from zoneinfo import ZoneInfo

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from pydantic import BaseModel

from ultimat3.core import FrozenClock, XError, new_id, use_tenant
from ultimat3.entity import (
    Database,
    Index,
    SeriesPoint,
    Table,
    View,
    bigint,
    database,
    entity,
    integer,
    timestamp,
    uuid,
)
from ultimat3.jobs import Bucket, rollup
from ultimat3.jobs.factories.rollup import RollupWindow, bucket_start
from ultimat3.jobs.testing import JobHarness

MakeDb = Callable[..., Database]

BERLIN = ZoneInfo("Europe/Berlin")

likes = entity(
    "likes",
    columns={"id": uuid().primary_key(), "org_id": uuid().tenant(), "created_at": timestamp()},
)
likes_per_day = entity(
    "likes_per_day",
    columns={"org_id": uuid().tenant(), "day": timestamp(), "likes": bigint()},
    indexes=[Index(("org_id", "day"), unique=True)],
)


class Org(BaseModel):
    org_id: str


def daily(db: Any, *, lookback: str = "1d", zone: str = "Europe/Berlin", **kw: Any) -> Any:
    def source(w: RollupWindow) -> Any:
        return (
            db.likes.where()
            .and_where("created_at", "gte", w.since)
            .series(on="created_at", unit=w.bucket.unit, time_zone=w.bucket.time_zone)
        )

    return rollup(
        name=kw.pop("name", "daily_likes"),
        into=likes_per_day,
        table=lambda: db.likes_per_day,
        key=["org_id", "day"],
        lookback=lookback,
        bucket=Bucket(unit="day", time_zone=zone),
        tenant=lambda i: i.org_id,
        input=Org,
        source=source,
        map=kw.pop("map", lambda p, w: {"day": p.bucket, "likes": p.value}),
        **kw,
    )


def at(year: int, month: int, day: int, hour: int = 0, minute: int = 0) -> datetime:
    return datetime(year, month, day, hour, minute, tzinfo=BERLIN)


async def add_likes(db: Any, org: str, instants: list[datetime]) -> None:
    with use_tenant(org):
        await db.likes.insert_all([{"id": new_id(), "created_at": t} for t in instants])


async def per_day(db: Any, org: str) -> dict[datetime, int]:
    with use_tenant(org):
        return {r["day"]: r["likes"] for r in await db.likes_per_day.all()}


async def test_the_window_starts_at_the_zones_first_instant_of_the_oldest_bucket_across_dst(
    make_db: MakeDb,
) -> None:
    db = make_db([likes, likes_per_day])
    await db.migrate()
    org = new_id()
    # 29 March 2026 is a 23-hour day in Berlin; 00:10 on the 28th is still the 27th in UTC
    await add_likes(
        db, org, [at(2026, 3, 27, 12), at(2026, 3, 28, 0, 10), at(2026, 3, 28, 23, 59),
                  at(2026, 3, 29, 3, 30), at(2026, 3, 29, 23, 30), at(2026, 3, 30, 0, 5)],
    )  # fmt: skip
    now = at(2026, 3, 30, 0, 30)  # now - 1d = 28 March 23:30 CET: the window opens on the 28th
    job = daily(db)
    h = JobHarness(jobs=[job], clock=FrozenClock(now))
    trace = await h(job, Org(org_id=org))
    assert trace.state == "done", trace.last_error
    assert trace.result == {"buckets": 3, "since": "2026-03-28T00:00:00+01:00"}
    got = await per_day(db, org)
    assert got == {
        at(2026, 3, 28).astimezone(UTC): 2,  # read whole, its first row included
        at(2026, 3, 29).astimezone(UTC): 2,
        at(2026, 3, 30).astimezone(UTC): 1,
    }
    # the 27th is older than the lookback: never written
    assert at(2026, 3, 27).astimezone(UTC) not in got


async def test_a_late_row_moves_its_bucket_and_a_rerun_writes_the_same_values(
    make_db: MakeDb,
) -> None:
    db = make_db([likes, likes_per_day])
    await db.migrate()
    org = new_id()
    await add_likes(db, org, [at(2026, 6, 1, 9), at(2026, 6, 2, 9), at(2026, 6, 3, 9)])
    clock = FrozenClock(at(2026, 6, 3, 12))
    job = daily(db, lookback="3d")
    h = JobHarness(jobs=[job], clock=clock)
    assert (await h(job, Org(org_id=org))).state == "done"
    first = await per_day(db, org)
    assert sorted(first.values()) == [1, 1, 1]
    # a late row lands for 2 June, and one for 20 May (older than the lookback)
    await add_likes(db, org, [at(2026, 6, 2, 23), at(2026, 5, 20, 9)])
    clock.advance("1h")
    assert (await h(job, Org(org_id=org))).state == "done"
    second = await per_day(db, org)
    assert second[at(2026, 6, 2).astimezone(UTC)] == 2
    assert at(2026, 5, 20).astimezone(UTC) not in second  # not handled: outside the lookback
    clock.advance("1h")
    assert (await h(job, Org(org_id=org))).state == "done"
    assert await per_day(db, org) == second  # idempotent


class Counting:
    """A table handle's stand-in that counts the upsert_all calls and passes them on."""

    def __init__(self, table: Table) -> None:
        self.table = table
        self.calls: Counter[str] = Counter()

    async def upsert_all(self, rows: Any, *, on_conflict: list[str]) -> int:
        self.calls["upsert_all"] += 1
        return await self.table.upsert_all(rows, on_conflict=on_conflict)


async def test_one_upsert_all_per_run_and_every_bucket_or_none(make_db: MakeDb) -> None:
    db = make_db([likes, likes_per_day])
    await db.migrate()
    org = new_id()
    # 1,500 buckets of a minute each: more than one statement's worth, still ONE upsert_all
    start = at(2026, 1, 1, 0, 0)
    await add_likes(db, org, [start + timedelta(minutes=m) for m in range(1_500)])
    counting = Counting(db.likes_per_day)

    def source(w: RollupWindow) -> Any:
        return (
            db.likes.where()
            .and_where("created_at", "gte", w.since)
            .series(on="created_at", unit="minute", time_zone="Europe/Berlin")
        )

    minutes = rollup(
        name="likes_per_minute", into=likes_per_day, table=lambda: counting,  # type: ignore[arg-type, return-value]
        key=["org_id", "day"], lookback="2d", bucket=Bucket("minute", "Europe/Berlin"),
        tenant=lambda i: i.org_id, input=Org, source=source,
        map=lambda p, w: {"day": p.bucket, "likes": p.value},
    )  # fmt: skip
    h = JobHarness(jobs=[minutes], clock=FrozenClock(start + timedelta(days=1, hours=2)))
    trace = await h(minutes, Org(org_id=org))
    assert trace.state == "done", trace.last_error
    assert trace.result["buckets"] == 1_500
    assert counting.calls == {"upsert_all": 1}
    assert len(await per_day(db, org)) == 1_500

    # a row the upsert refuses (a value past bigint) fails the run and writes no bucket at all
    other = new_id()
    await add_likes(db, other, [start, start + timedelta(days=1), start + timedelta(days=2)])

    def bad_last(p: SeriesPoint, w: RollupWindow) -> dict[str, Any]:
        return {"day": p.bucket, "likes": 2**70 if p.bucket.day == 3 else p.value}

    broken = daily(db, name="broken", map=bad_last, lookback="3d")
    h2 = JobHarness(jobs=[broken], clock=FrozenClock(start + timedelta(days=2, hours=1)))
    failed = await h2(broken, Org(org_id=other))
    assert failed.state in {"failed", "dead"}, failed.state
    assert failed.last_error is not None and "X_ENTITY_VALUE_INVALID" in str(failed.last_error)
    assert await per_day(db, other) == {}


async def test_map_answering_no_row_fails_the_run(make_db: MakeDb) -> None:
    db = make_db([likes, likes_per_day])
    await db.migrate()
    org = new_id()
    await add_likes(db, org, [at(2026, 2, 1, 9)])
    job = daily(db, name="no_row", map=lambda p, w: [p.bucket, p.value])
    h = JobHarness(jobs=[job], clock=FrozenClock(at(2026, 2, 1, 10)))
    trace = await h(job, Org(org_id=org))
    assert trace.state in {"failed", "dead"}
    assert "not a row" in str(trace.last_error)
    assert await per_day(db, org) == {}


# --- the declaration refusals ----------------------------------------------------------------


def _declare(**change: Any) -> Any:
    kw: dict[str, Any] = {
        "name": "r", "into": likes_per_day, "table": lambda: None, "key": ["org_id", "day"],
        "lookback": "2d", "bucket": Bucket("day", "UTC"), "tenant": "none",
        "source": lambda w: [], "map": lambda p, w: {},
    }  # fmt: skip
    kw.update(change)
    return rollup(**kw)


an_mv = entity(
    "mv_days",
    columns={"org_id": uuid(), "day": timestamp(), "n": integer()},
    indexes=[Index(("org_id", "day"), unique=True)],
    view=View("select 1", materialized=True),
)


@pytest.mark.parametrize(
    ("change", "needle"),
    [
        ({"lookback": None}, "lookback is required"),
        ({"lookback": "0s"}, "not a positive duration"),
        ({"lookback": -5}, "not a positive duration"),
        ({"lookback": "soon"}, "not a positive duration"),
        ({"bucket": None}, "bucket is required"),
        ({"bucket": Bucket("fortnight", "UTC")}, "'fortnight' is not a series() unit"),
        ({"bucket": {"unit": "day", "zone": "UTC"}}, "is not {'unit', 'time_zone'}"),
        ({"bucket": Bucket("day", "Mars/Olympus")}, "'Mars/Olympus' is not an IANA zone"),
        ({"bucket": Bucket("day", "../etc/passwd")}, "is not an IANA zone"),
        ({"bucket": Bucket("day", "")}, "is not an IANA zone"),
        ({"key": ["day"]}, "no unique index of 'likes_per_day' covers key ['day']"),
        ({"key": ["org_id", "day", "likes"]}, "covers key"),
        ({"key": "day"}, "is not a list of column names"),
        ({"key": []}, "is not a list of column names"),
        ({"name": ""}, "name is required"),
        ({"name": "  "}, "name is required"),
        ({"into": "likes_per_day"}, "is not an entity()"),
        ({"into": an_mv, "key": ["org_id", "day"]}, "is a view"),
        ({"source": None}, "source must be a callable"),
        ({"map": 3}, "map must be a callable"),
        ({"table": None}, "table must be a callable"),
    ],
)
def test_every_declaration_refusal(change: dict[str, Any], needle: str) -> None:
    with pytest.raises(XError) as err:
        _declare(**change)
    assert err.value.code == "X_JOB_ROLLUP_INVALID"
    assert needle in str(err.value), str(err.value)
    assert err.value.fix


def test_a_dict_bucket_is_accepted() -> None:
    assert _declare(bucket={"unit": "week", "time_zone": "America/New_York"}).name == "r"


def test_without_ultimat3_entity_the_factory_names_the_extra(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setitem(sys.modules, "ultimat3.entity", None)  # what a missing package imports as
    with pytest.raises(XError) as err:
        _declare()
    assert err.value.code == "X_CONFIG_INVALID"
    assert 'pip install "ultimat3-jobs[entity]"' in (err.value.fix or "")


@pytest.mark.parametrize(
    ("instant", "unit", "zone", "want"),
    [
        ("2026-03-29T01:30:00+00:00", "day", "Europe/Berlin", "2026-03-29T00:00:00+01:00"),
        ("2026-03-29T22:30:00+00:00", "day", "Europe/Berlin", "2026-03-30T00:00:00+02:00"),
        ("2026-10-25T00:30:00+00:00", "hour", "Europe/Berlin", "2026-10-25T02:00:00+02:00"),
        ("2026-10-25T01:30:00+00:00", "hour", "Europe/Berlin", "2026-10-25T02:00:00+01:00"),
        ("2026-04-05T15:00:00+00:00", "week", "UTC", "2026-03-30T00:00:00+00:00"),
        ("2026-08-20T12:00:00+00:00", "quarter", "Asia/Kolkata", "2026-07-01T00:00:00+05:30"),
        ("2026-01-01T03:00:00+00:00", "year", "America/New_York", "2025-01-01T00:00:00-05:00"),
    ],
)
def test_bucket_start_in_a_zone(instant: str, unit: str, zone: str, want: str) -> None:
    got = bucket_start(datetime.fromisoformat(instant), unit, ZoneInfo(zone))
    assert got.isoformat() == want
    # compared in UTC: Python calls two instants of a repeated hour in different zones unequal
    assert got.astimezone(UTC) == datetime.fromisoformat(want).astimezone(UTC)


# --- the property ----------------------------------------------------------------------------

events = entity(
    "events",
    columns={"id": uuid().primary_key(), "at": timestamp(), "weight": integer()},
)
event_hours = entity(
    "event_hours",
    columns={"bucket": timestamp().primary_key(), "n": bigint(), "total": bigint()},
)
BASE = datetime(2026, 10, 20, tzinfo=UTC)  # the fall-back weekend of 2026 inside the span
offsets = st.integers(min_value=0, max_value=10 * 24 * 60)  # minutes over ten days


@settings(
    max_examples=25,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(
    first=st.lists(st.tuples(offsets, st.integers(1, 9)), max_size=40),
    late=st.lists(st.tuples(offsets, st.integers(1, 9)), max_size=40),
    unit=st.sampled_from(["hour", "day", "week"]),
    zone=st.sampled_from(["UTC", "Europe/Berlin", "America/New_York", "Australia/Sydney"]),
    lookback_h=st.integers(min_value=1, max_value=5 * 24),
    run_at=st.integers(min_value=5 * 24 * 60, max_value=10 * 24 * 60),
)
def test_a_run_over_random_late_rows_equals_a_recomputation_inside_the_lookback(
    new_schema: Callable[[], str],
    database_url: str,
    first: list[tuple[int, int]],
    late: list[tuple[int, int]],
    unit: str,
    zone: str,
    lookback_h: int,
    run_at: int,
) -> None:
    asyncio.run(_property(database_url, new_schema(), first, late, unit, zone, lookback_h, run_at))


async def _property(
    url: str,
    schema: str,
    first: list[tuple[int, int]],
    late: list[tuple[int, int]],
    unit: str,
    zone: str,
    lookback_h: int,
    run_at: int,
) -> None:
    async with database(url, [events, event_hours], schema=schema) as db:
        await db.migrate()

        def rows_of(pairs: list[tuple[int, int]]) -> list[dict[str, Any]]:
            return [
                {"id": new_id(), "at": BASE + timedelta(minutes=m), "weight": w} for m, w in pairs
            ]

        async def source(w: RollupWindow) -> list[tuple[SeriesPoint, SeriesPoint]]:
            q = db.events.where().and_where("at", "gte", w.since)
            kw: dict[str, Any] = {"on": "at", "unit": w.bucket.unit, "time_zone": zone}
            counts = await q.series(**kw)
            sums = {p.bucket: p for p in await q.series(**kw, value=("sum", "weight"))}
            return [(c, sums[c.bucket]) for c in counts]

        job = rollup(
            name="event_hours", into=event_hours, table=lambda: db.event_hours,
            key=["bucket"], lookback=f"{lookback_h}h", bucket=Bucket(unit, zone),
            tenant="none", source=source,
            map=lambda p, w: {"bucket": p[0].bucket, "n": p[0].value, "total": p[1].value},  # type: ignore[index]
        )  # fmt: skip
        clock = FrozenClock(BASE + timedelta(minutes=run_at - 24 * 60))
        h = JobHarness(jobs=[job], clock=clock)
        await db.events.insert_all(rows_of(first))
        assert (await h(job, {})).state == "done"
        before = {r["bucket"]: (r["n"], r["total"]) for r in await db.event_hours.all()}

        await db.events.insert_all(rows_of(late))  # rows landing late, anywhere in the span
        clock.set(BASE + timedelta(minutes=run_at))
        trace = await h(job, {})
        assert trace.state == "done", trace.last_error
        local_since = bucket_start(clock.now() - timedelta(hours=lookback_h), unit, ZoneInfo(zone))
        assert trace.result["since"] == local_since.isoformat()
        since = local_since.astimezone(UTC)  # compared in UTC: a repeated hour stays two buckets

        # from scratch: every row, bucketed by the reference, the buckets from `since` on
        want: dict[datetime, list[int]] = {}
        for m, w in [*first, *late]:
            b = bucket_start(BASE + timedelta(minutes=m), unit, ZoneInfo(zone)).astimezone(UTC)
            if b >= since:
                want.setdefault(b, [0, 0])
                want[b][0] += 1
                want[b][1] += w
        after = {r["bucket"]: (r["n"], r["total"]) for r in await db.event_hours.all()}
        inside = {b: v for b, v in after.items() if b >= since}
        assert inside == {b: (n, t) for b, (n, t) in want.items()}
        assert trace.result["buckets"] == len(want)
        # older buckets keep what the first run wrote (outside the lookback: not handled)
        assert {b: v for b, v in after.items() if b < since} == {
            b: v for b, v in before.items() if b < since
        }
