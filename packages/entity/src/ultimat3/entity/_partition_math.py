"""Partition ranges: one per UTC month or day, named ``<table>_pYYYYMM`` / ``<table>_pYYYYMMDD``."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from ._names import MAX_IDENTIFIER_BYTES, derived_name


def unit_start(instant: datetime, unit: str) -> datetime:
    """The first instant (UTC) of the month or day holding ``instant``."""
    t = instant.astimezone(UTC)
    if unit == "day":
        return datetime(t.year, t.month, t.day, tzinfo=UTC)
    return datetime(t.year, t.month, 1, tzinfo=UTC)


def next_start(start: datetime, unit: str, n: int = 1) -> datetime:
    """``n`` units after ``start`` (``n`` may be negative)."""
    if unit == "day":
        return start + timedelta(days=n)
    months = start.year * 12 + (start.month - 1) + n
    return datetime(months // 12, months % 12 + 1, 1, tzinfo=UTC)


def partition_name(table: str, start: datetime, unit: str) -> str:
    suffix = "p" + start.strftime("%Y%m%d" if unit == "day" else "%Y%m")
    name = f"{table}_{suffix}"
    if len(name) <= MAX_IDENTIFIER_BYTES:
        return name
    return derived_name(table, suffix=suffix)


def ranges(first: datetime, last: datetime, unit: str) -> list[tuple[datetime, datetime]]:
    """Every ``[start, end)`` from the unit holding ``first`` to the one holding ``last``."""
    out: list[tuple[datetime, datetime]] = []
    start = unit_start(first, unit)
    stop = unit_start(last, unit)
    while start <= stop:
        end = next_start(start, unit)
        out.append((start, end))
        start = end
    return out
