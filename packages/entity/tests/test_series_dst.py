"""series() buckets across DST changes, in several IANA zones, equal a reference computed with
zoneinfo — on Postgres (date_trunc in the zone) and in memory."""

from __future__ import annotations

import asyncio
from collections import Counter
from datetime import UTC, date, datetime, time, timedelta
from typing import Any
from zoneinfo import ZoneInfo

import psycopg
import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st
from psycopg import sql

from ultimat3.core import XError, new_id
from ultimat3.entity import SERIES_UNITS, database, entity, memory_database, text, timestamp
from ultimat3.entity import uuid as uuid_col

# zones whose changes fall on a whole local hour (half-hour offsets too), and zones whose
# changes fall AT midnight: a day that starts at 01:00 (spring) or whose midnight happens twice
# (Havana and Beirut fall back from 01:00 to 00:00, Cairo and Santiago at 24:00)
ZONES = [
    "UTC",
    "Europe/Berlin",
    "America/New_York",
    "Australia/Sydney",
    "Asia/Kolkata",
    "America/St_Johns",
    "America/Havana",
    "America/Santiago",
    "Asia/Beirut",
    "Africa/Cairo",
]
MIDNIGHT_ZONES = ["America/Havana", "America/Santiago", "Asia/Beirut", "Africa/Cairo"]
# always tried: Havana's midnight happening twice (2026-11-01, 00:30 CDT then 00:30 CST) and
# its day starting at 01:00 (2026-03-08), Santiago's and Cairo's changes at 24:00
AT_MIDNIGHT = [
    ("America/Havana", "day", [datetime(2026, 11, 1, 4, 30, tzinfo=UTC)]),
    ("America/Havana", "week", [datetime(2026, 11, 1, 5, 30, tzinfo=UTC)]),
    ("America/Havana", "day", [datetime(2026, 3, 8, 5, 30, tzinfo=UTC)]),
    ("America/Santiago", "day", [datetime(2026, 4, 5, 3, 30, tzinfo=UTC)]),
    ("Africa/Cairo", "month", [datetime(2026, 10, 29, 21, 30, tzinfo=UTC)]),
]

hits = entity("hits", columns={"id": uuid_col().primary_key(), "what": text(), "at": timestamp()})


def _transitions(zone: str) -> list[datetime]:
    z = ZoneInfo(zone)
    out = [datetime(2026, 1, 15, tzinfo=UTC)]
    t = datetime(2025, 1, 1, tzinfo=UTC)
    prev = t.astimezone(z).utcoffset()
    while t < datetime(2028, 1, 1, tzinfo=UTC):
        t += timedelta(hours=1)
        off = t.astimezone(z).utcoffset()
        if off != prev:
            out.append(t)
            prev = off
    return out


TRANSITIONS = {z: _transitions(z) for z in ZONES}


def reference(instant: datetime, unit: str, zone: str) -> datetime:
    """The first instant of ``unit`` holding ``instant`` in ``zone`` — computed apart from the
    library: wall-clock fields off the instant below a day, local midnight of a date above."""
    z = ZoneInfo(zone)
    local = instant.astimezone(z)
    if unit == "minute":
        return instant - timedelta(seconds=local.second, microseconds=local.microsecond)
    if unit == "hour":
        return instant - timedelta(
            minutes=local.minute, seconds=local.second, microseconds=local.microsecond
        )
    d: date = local.date()
    start = {
        "day": d,
        "week": d - timedelta(days=d.weekday()),
        "month": d.replace(day=1),
        "quarter": date(d.year, 3 * ((d.month - 1) // 3) + 1, 1),
        "year": date(d.year, 1, 1),
    }[unit]
    return datetime.combine(start, time(0), tzinfo=z).astimezone(UTC)


@st.composite
def cases(draw: Any) -> tuple[str, str, list[datetime]]:
    zone = draw(st.sampled_from(ZONES))
    unit = draw(st.sampled_from(SERIES_UNITS))
    base = draw(st.sampled_from(TRANSITIONS[zone]))
    hour_us = 3_600_000_000
    near = st.integers(-2 * hour_us, 2 * hour_us)  # inside the change's own hours, often
    offsets = draw(
        st.lists(st.one_of(st.integers(-72 * hour_us, 72 * hour_us), near), min_size=1, max_size=12)
    )
    return zone, unit, [base + timedelta(microseconds=o) for o in offsets]


def expected(zone: str, unit: str, instants: list[datetime]) -> list[tuple[datetime, int]]:
    c = Counter(reference(i, unit, zone) for i in instants)
    return sorted(c.items())


async def _series(db: Any, zone: str, unit: str, instants: list[datetime]) -> list[Any]:
    await db.hits.where().delete()
    await db.hits.insert_all([{"id": new_id(), "what": "x", "at": i} for i in instants])
    return list(await db.hits.where().series(on="at", unit=unit, time_zone=zone))


@pytest.mark.timeout(600)  # many Postgres round trips on a machine maybe shared
@settings(
    max_examples=100, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(case=cases())
@example(case=AT_MIDNIGHT[0])
@example(case=AT_MIDNIGHT[1])
@example(case=AT_MIDNIGHT[2])
@example(case=AT_MIDNIGHT[3])
@example(case=AT_MIDNIGHT[4])
def test_postgres_buckets_equal_the_zoneinfo_reference(
    sync_schema: str, database_url: str, case: tuple[str, str, list[datetime]]
) -> None:
    zone, unit, instants = case

    async def run() -> list[Any]:
        async with database(database_url, [hits], schema=sync_schema) as db:
            await db.migrate()
            return await _series(db, zone, unit, instants)

    try:
        got = asyncio.run(run())
    finally:
        _drop_schema(database_url, sync_schema)
    assert [(p.bucket.astimezone(UTC), p.value) for p in got] == expected(zone, unit, instants)
    assert all(p.bucket.tzinfo == ZoneInfo(zone) for p in got)


@settings(max_examples=300, deadline=None)
@given(case=cases())
@example(case=AT_MIDNIGHT[0])
@example(case=AT_MIDNIGHT[3])
async def test_memory_buckets_equal_the_zoneinfo_reference(
    case: tuple[str, str, list[datetime]],
) -> None:
    zone, unit, instants = case
    got = await _series(memory_database([hits]), zone, unit, instants)
    assert [(p.bucket.astimezone(UTC), p.value) for p in got] == expected(zone, unit, instants)


def test_a_dst_day_is_23_or_25_hours_in_the_reference() -> None:
    ny = "America/New_York"
    spring = reference(datetime(2026, 3, 8, 12, tzinfo=UTC), "day", ny)
    fall = reference(datetime(2026, 11, 1, 12, tzinfo=UTC), "day", ny)
    assert reference(spring + timedelta(hours=23), "day", ny) - spring == timedelta(hours=23)
    assert reference(fall + timedelta(hours=25), "day", ny) - fall == timedelta(hours=25)


def test_a_repeated_hour_is_two_buckets() -> None:
    # 2026-11-01 01:30 happens twice in New York: EDT (05:30Z) and EST (06:30Z)
    first, second = (
        datetime(2026, 11, 1, 5, 30, tzinfo=UTC),
        datetime(2026, 11, 1, 6, 30, tzinfo=UTC),
    )
    got = asyncio.run(_series(memory_database([hits]), "America/New_York", "hour", [first, second]))
    assert [p.bucket.astimezone(UTC) for p in got] == [
        first - timedelta(minutes=30),
        second - timedelta(minutes=30),
    ]


async def test_series_refuses_a_non_timestamp_column_and_a_bad_value() -> None:
    db = memory_database([hits])
    for kwargs in (
        {"on": "what", "unit": "day"},
        {"on": "at", "unit": "day", "value": "avg"},
        {"on": "at", "unit": "day", "value": ("sum", "what")},
    ):
        with pytest.raises(XError) as caught:
            await db.hits.where().series(**kwargs)
        assert caught.value.code == "X_ENTITY_QUERY_INVALID"


def _drop_schema(url: str, schema: str) -> None:
    """Each example drops what it made, so a run cut short leaves nothing behind."""
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute(sql.SQL("DROP SCHEMA IF EXISTS {} CASCADE").format(sql.Identifier(schema)))


@pytest.mark.parametrize("zone", MIDNIGHT_ZONES)
def test_each_midnight_zone_changes_at_local_midnight_in_the_sampled_years(zone: str) -> None:
    """The property samples around real midnight changes (the zone data has them)."""
    z = ZoneInfo(zone)
    at_midnight = [
        t
        for t in TRANSITIONS[zone][1:]
        if (t.astimezone(z).hour, t.astimezone(z).minute) in {(0, 0), (1, 0), (23, 0)}
    ]
    assert at_midnight, f"{zone}: no change at midnight between 2025 and 2028"


async def test_a_day_whose_midnight_happens_twice_starts_at_the_first(
    make_db: Any,
) -> None:
    # Havana, 2026-11-01: 01:00 CDT falls back to 00:00 CST; the day starts at 00:00 CDT (04:00Z)
    zone = "America/Havana"
    first_pass, second_pass = (
        datetime(2026, 11, 1, 4, 30, tzinfo=UTC),
        datetime(2026, 11, 1, 5, 30, tzinfo=UTC),
    )
    db = make_db([hits])
    await db.migrate()
    for each in (db, memory_database([hits])):
        got = await _series(each, zone, "day", [first_pass, second_pass])
        assert [(p.bucket.astimezone(UTC), p.value) for p in got] == [
            (datetime(2026, 11, 1, 4, tzinfo=UTC), 2)
        ]
