"""Durations: ``'500ms'``, ``'90s'``, ``'2m'``, ``'3h'``, ``'3d'``, ``'1w'``, int ms, timedelta."""

from __future__ import annotations

import re
from datetime import timedelta
from typing import TypeAlias

from ._errors import XError

Duration: TypeAlias = str | int | timedelta
"""A duration: a string such as ``'1h30m'``, an int of milliseconds or a ``timedelta``."""

MAX_DURATION_MS = 3_155_760_000_000
"""The longest duration accepted: 100 Julian years, in milliseconds."""

_UNITS: dict[str, int] = {
    "w": 604_800_000,
    "d": 86_400_000,
    "h": 3_600_000,
    "m": 60_000,
    "s": 1_000,
    "ms": 1,
}
_PART = re.compile(r"(\d+)(ms|w|d|h|m|s)")
_WHOLE = re.compile(r"(?:\d+(?:ms|w|d|h|m|s))+")
_FIX = (
    "pass '500ms', '90s', '2m', '3h', '3d', '1w', a compound such as '1h30m', an int of "
    "milliseconds or a datetime.timedelta"
)


def _refuse(name: str, value: object, why: str) -> XError:
    shown = repr(value)
    if len(shown) > 80:
        shown = shown[:77] + "..."
    return XError("X_DURATION_INVALID", f"{name} {shown} is not a valid duration: {why}", fix=_FIX)


def parse_duration(value: Duration, *, name: str = "duration", allow_zero: bool = False) -> int:
    """Milliseconds in ``value``; refuses bools, floats, negatives, zero (unless allowed), junk."""
    ms: int
    raw: object = value
    if isinstance(raw, bool):
        raise _refuse(name, value, "a bool is not a duration")
    if isinstance(raw, int):
        ms = raw
    elif isinstance(raw, timedelta):
        micros = (raw.days * 86_400 + raw.seconds) * 1_000_000 + raw.microseconds
        if micros % 1_000:
            raise _refuse(name, value, "durations are whole milliseconds")
        ms = micros // 1_000
    elif isinstance(raw, str):
        if not _WHOLE.fullmatch(raw):
            raise _refuse(name, value, "expected digits and a unit (ms, s, m, h, d, w)")
        ms = 0
        for number, unit in _PART.findall(raw):
            if len(number) > 20:
                raise _refuse(name, value, "longer than 100 years")
            ms += int(number) * _UNITS[unit]
    else:
        kind = type(raw).__name__
        raise _refuse(name, value, f"a {kind} is not a duration (use an int of milliseconds)")
    if ms < 0:
        raise _refuse(name, value, "negative")
    if ms == 0 and not allow_zero:
        raise _refuse(name, value, "must be greater than zero")
    if ms > MAX_DURATION_MS:
        raise _refuse(name, value, "longer than 100 years")
    return ms


def format_duration(ms: int) -> str:
    """The shortest compound string for ``ms`` (``5_400_000`` → ``'1h30m'``, ``0`` → ``'0ms'``)."""
    if isinstance(ms, bool) or not isinstance(ms, int) or ms < 0:
        raise _refuse("ms", ms, "format_duration takes a non-negative int of milliseconds")
    if ms == 0:
        return "0ms"
    parts: list[str] = []
    rest = ms
    for unit, size in _UNITS.items():
        count, rest = divmod(rest, size)
        if count:
            parts.append(f"{count}{unit}")
    return "".join(parts)
