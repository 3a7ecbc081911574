"""``series()``: rows counted or summed per unit of time, each bucket the first instant of that
unit in an IANA zone — so a day in a DST zone is 23 or 25 hours long."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from decimal import Decimal
from typing import Literal
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from ultimat3.core import XError

Unit = Literal["minute", "hour", "day", "week", "month", "quarter", "year"]
SERIES_UNITS: tuple[str, ...] = ("minute", "hour", "day", "week", "month", "quarter", "year")
SUB_DAY_UNITS = frozenset({"minute", "hour"})


@dataclass(frozen=True, slots=True)
class SeriesPoint:
    """One bucket: its first instant (an aware datetime in the series' zone) and its value."""

    bucket: datetime
    value: int | Decimal | None


def check_unit(unit: object) -> str:
    """``unit`` if ``series()`` has it, else ``X_ENTITY_QUERY_INVALID``."""
    if unit not in SERIES_UNITS:
        raise XError(
            "X_ENTITY_QUERY_INVALID",
            f"series: unit {unit!r} is not one of {list(SERIES_UNITS)}",
            fix="series(on='created_at', unit='day', time_zone='Europe/Berlin')",
        )
    return str(unit)


def check_zone(zone: object) -> ZoneInfo:
    """The IANA zone named ``zone``, else ``X_ENTITY_QUERY_INVALID``."""
    if not isinstance(zone, str) or not zone or zone.startswith(("/", ".")) or ".." in zone:
        raise XError(
            "X_ENTITY_QUERY_INVALID",
            f"series: time_zone {zone!r} is not an IANA zone name",
            fix="time_zone='Europe/Berlin' (or 'UTC')",
        )
    try:
        return ZoneInfo(zone)
    except (ZoneInfoNotFoundError, ValueError) as exc:
        raise XError(
            "X_ENTITY_QUERY_INVALID",
            f"series: time_zone {zone!r} is not an IANA zone name",
            fix="time_zone='Europe/Berlin' (or 'UTC')",
        ) from exc


def bucket_of(instant: datetime, unit: str, zone: ZoneInfo) -> datetime:
    """The first instant of the ``unit`` holding ``instant`` in ``zone`` (the memory database's
    answer; Postgres computes the same in SQL)."""
    local = instant.astimezone(zone)
    if unit == "minute":
        return local.replace(second=0, microsecond=0)
    if unit == "hour":
        # keeps the fold: in a repeated hour (fall back) each pass is its own bucket
        return local.replace(minute=0, second=0, microsecond=0)
    day = local.date()
    if unit == "week":
        day = day - timedelta(days=day.weekday())
    elif unit == "month":
        day = day.replace(day=1)
    elif unit == "quarter":
        day = day.replace(month=(day.month - 1) // 3 * 3 + 1, day=1)
    elif unit == "year":
        day = day.replace(month=1, day=1)
    midnight = datetime(day.year, day.month, day.day, tzinfo=zone)
    # round trip through UTC so the answer carries the offset in force at that instant
    return midnight.astimezone(UTC).astimezone(zone)
