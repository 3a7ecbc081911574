"""The occurrence resolver: a cron expression read in an IANA zone, as instants.

ONE function answers "when does this task fire": the scheduler walks it, and
``next_task_run`` (what ``x tasks list`` and a dashboard read) asks it, so a dashboard and the
scheduler cannot disagree.

A cron expression names WALL-CLOCK times in the task's zone; a DST change makes some of them
ambiguous or missing:

- a wall time the spring-forward jump skips (02:30 in Europe/Berlin on the last Sunday of March)
  fires ONCE, at the instant the jump lands it on (03:30 local: Python's ``fold=0`` reading);
- a wall time the fall-back repeats (01:30 in America/New_York on the first Sunday of November)
  fires ONCE, at its first instant — unless the hour field is ``*``: an every-hour schedule fires
  in both repeated hours, so it stays hourly in real time (as Vixie cron does);
- two wall times that land on the same instant fire once.
"""

from __future__ import annotations

import heapq
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from functools import cache
from typing import Any, Final
from zoneinfo import ZoneInfo

DST_REACH: Final = timedelta(hours=3)
"""The widest a zone's UTC offset moves at one transition (real zones: at most 2 h): how far
around an instant the resolver looks for a wall time the change moved across it."""

_MS = timedelta(milliseconds=1)
_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)


@cache
def _croniter() -> Any:
    """croniter, imported at first use: it costs ~0.4 s, and ``import ultimat3.jobs`` should not
    pay it in a process that declares no task."""
    from croniter import croniter

    return croniter


def parse_cron(expression: str) -> Any:
    """A croniter over ``expression`` (five fields, or an alias such as ``@daily``); croniter's
    own error for anything else (the declaration turns it into a refusal)."""
    return _croniter()(expression, datetime(2000, 1, 1))


@cache
def hour_is_wild(expression: str) -> bool:
    """Whether the hour field is ``*``: an every-hour schedule fires in both repeated hours."""
    expanded = parse_cron(expression).expanded
    return bool(expanded[1] == ["*"])


def _ms(when: datetime) -> int:
    return (when - _EPOCH) // _MS


def _unsteady(zone: ZoneInfo, instant_ms: int) -> bool:
    """Whether the zone's offset changes within ``DST_REACH`` of the instant."""
    at = _EPOCH + instant_ms * _MS
    offsets = {(at + d).astimezone(zone).utcoffset() for d in (-DST_REACH, 0 * _MS, DST_REACH)}
    return len(offsets) > 1


def _instants_of(wall: datetime, zone: ZoneInfo, both_folds: bool) -> list[int]:
    """The instants a naive wall time fires at (see the module docstring)."""
    first = _ms(wall.replace(tzinfo=zone, fold=0))
    second = _ms(wall.replace(tzinfo=zone, fold=1))
    if both_folds and second > first:  # a repeated hour, on an every-hour schedule
        return [first, second]
    return [first]  # also a skipped wall time: fold=0 is the instant the jump lands it on


def occurrences(expression: str, zone: ZoneInfo, after_ms: int) -> Iterator[int]:
    """The task's occurrences strictly after ``after_ms`` (epoch ms), as epoch ms, strictly
    increasing, forever (croniter's own error for an expression that stops matching)."""
    both_folds = hour_is_wild(expression)
    local = (_EPOCH + after_ms * _MS).astimezone(zone).replace(tzinfo=None)
    start = local - DST_REACH if _unsteady(zone, after_ms) else local
    walls = _croniter()(expression, start)
    pending: list[int] = []
    last = after_ms
    while True:
        wall: datetime = walls.get_next(datetime)
        instants = _instants_of(wall, zone, both_folds)
        for instant in instants:
            heapq.heappush(pending, instant)
        # every later wall time fires at or after this bound
        reach = DST_REACH if _unsteady(zone, instants[0]) else timedelta(0)
        bound = instants[0] - reach // _MS
        while pending and pending[0] <= bound:
            instant = heapq.heappop(pending)
            if instant > last:
                last = instant
                yield instant


def next_after(expression: str, zone: ZoneInfo, after_ms: int) -> int:
    """The first occurrence strictly after ``after_ms``."""
    return next(occurrences(expression, zone, after_ms))


def in_zone(instant_ms: int, zone: ZoneInfo) -> datetime:
    """An epoch-ms instant as an aware datetime in ``zone``."""
    return (_EPOCH + instant_ms * _MS).astimezone(zone)


_DAY_MS: Final = 86_400_000


def latest_between(
    expression: str, zone: ZoneInfo, after_ms: int, until_ms: int, *, keep: int
) -> list[int]:
    """The latest ``keep`` occurrences in ``(after_ms, until_ms]``, oldest first. Scans back from
    ``until_ms`` a day, then eight times further each round, so a long-down scheduler never walks
    a month of minutes to find the last hundred."""
    span = _DAY_MS
    while True:
        start = max(after_ms, until_ms - span)
        found: list[int] = []
        for instant in occurrences(expression, zone, start):
            if instant > until_ms:
                break
            found.append(instant)
            if len(found) > keep:
                del found[0]
        if len(found) >= keep or start == after_ms:
            return found
        span *= 8
