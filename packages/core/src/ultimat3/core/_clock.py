"""Clocks: the system one, a frozen one for tests, and the ambient clock."""

from __future__ import annotations

import time
from collections.abc import Callable
from contextvars import ContextVar
from datetime import UTC, datetime, timedelta
from typing import Protocol, runtime_checkable

from ._ambient import Binding
from ._durations import Duration, parse_duration
from ._errors import XError

_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
DEFAULT_FROZEN_START = datetime(2026, 1, 1, tzinfo=UTC)


@runtime_checkable
class Clock(Protocol):
    """Tells the time: an aware UTC ``datetime`` and epoch milliseconds."""

    def now(self) -> datetime: ...

    def now_ms(self) -> int: ...


class SystemClock:
    """The wall clock."""

    def now(self) -> datetime:
        return datetime.now(UTC)

    def now_ms(self) -> int:
        return time.time_ns() // 1_000_000

    def __repr__(self) -> str:
        return "SystemClock()"


def to_epoch_ms(when: datetime | int | str, *, name: str = "when") -> int:
    """Epoch milliseconds of an aware datetime, an int of epoch ms or an ISO 8601 string."""
    if isinstance(when, bool):
        raise XError("X_INVARIANT", f"{name} {when!r} is not a time", fix=_TIME_FIX)
    if isinstance(when, int):
        return when
    if isinstance(when, str):
        try:
            parsed = datetime.fromisoformat(when)
        except ValueError:
            raise XError(
                "X_INVARIANT", f"{name} {when!r} is not an ISO 8601 time", fix=_TIME_FIX
            ) from None
        when = parsed
    if isinstance(when, datetime):
        if when.tzinfo is None or when.utcoffset() is None:
            raise XError(
                "X_INVARIANT", f"{name} {when!r} is naive: give it a timezone", fix=_TIME_FIX
            )
        return (when - _EPOCH) // timedelta(milliseconds=1)
    raise XError("X_INVARIANT", f"{name} {when!r} is not a time", fix=_TIME_FIX)


_TIME_FIX = (
    "pass an aware datetime (datetime(2026, 1, 1, tzinfo=UTC)), epoch milliseconds, or an ISO "
    "string such as '2026-01-01T00:00:00Z'"
)


def from_epoch_ms(ms: int) -> datetime:
    """The aware UTC datetime at epoch milliseconds ``ms``."""
    return _EPOCH + timedelta(milliseconds=ms)


class FrozenClock:
    """A clock that moves only when told: ``advance('3d')`` or ``set(when)``."""

    def __init__(self, start: datetime | int | str | None = None) -> None:
        self._ms = to_epoch_ms(DEFAULT_FROZEN_START if start is None else start, name="start")
        self._listeners: list[Callable[[int], None]] = []

    def now(self) -> datetime:
        return from_epoch_ms(self._ms)

    def now_ms(self) -> int:
        return self._ms

    def advance(self, duration: Duration) -> None:
        """Move forward by ``duration`` (zero allowed) and tell the subscribers."""
        self._ms += parse_duration(duration, name="advance", allow_zero=True)
        self._notify()

    def set(self, when: datetime | int | str) -> None:
        """Jump to ``when``; going backwards is allowed (a test of a clock step)."""
        self._ms = to_epoch_ms(when)
        self._notify()

    def subscribe(self, listener: Callable[[int], None]) -> Callable[[], None]:
        """Call ``listener(now_ms)`` after every move; returns an unsubscribe."""
        self._listeners.append(listener)

        def unsubscribe() -> None:
            if listener in self._listeners:
                self._listeners.remove(listener)

        return unsubscribe

    def _notify(self) -> None:
        for listener in list(self._listeners):
            listener(self._ms)

    def __repr__(self) -> str:
        return f"FrozenClock({self.now().isoformat()!r})"


_default_clock: Clock = SystemClock()
_clock_var: ContextVar[Clock | None] = ContextVar("ultimat3_clock", default=None)


def current_clock() -> Clock:
    """The ambient clock: the innermost ``use_clock``, else the installed one (system)."""
    return _clock_var.get() or _default_clock


def use_clock(clock: Clock) -> Binding[Clock | None]:
    """Make ``clock`` ambient for a ``with`` / ``async with`` block."""
    return Binding(_clock_var, clock)


def install_clock(clock: Clock | None) -> None:
    """Set the process default clock (``None`` restores the system clock)."""
    global _default_clock
    _default_clock = clock if clock is not None else SystemClock()
