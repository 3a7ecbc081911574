"""The policies a job declares: ``Retry`` (with the framework's defaults) and ``Concurrency``."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Final, Generic, Literal, TypeVar, get_args

from ultimat3.core import BackoffCurve, Duration, JitterMode, parse_duration

if TYPE_CHECKING:
    from ultimat3.jobs._declare.job import Job

I = TypeVar("I")  # noqa: E741 - the input type, as the spec names it

WhenBusy = Literal["wait", "fail"]
_WHEN_BUSY: Final = get_args(WhenBusy)
_CURVES: Final = get_args(BackoffCurve)
_JITTERS: Final = get_args(JitterMode)
MAX_CONCURRENCY_KEY: Final = 200
"""The longest concurrency key ``concurrency.key(input)`` may answer."""
MAX_JOB_NAME: Final = 200
MAX_RETRY_ATTEMPTS: Final = 10_000
"""The most attempts a ``Retry`` may declare (past it a row's counters would outgrow a column)."""
DEFAULT_MAX_CRASHES: Final = 3
"""``job(max_crashes=)``'s default: isolated runs that may crash their process (a lapse whose
worker is known dead) before the job is dead with ``X_JOB_CRASHED``."""
MAX_CRASHES_CEILING: Final = 100
"""The largest ``max_crashes`` a job may declare."""

DEFAULT_RETRY_ATTEMPTS: Final = 3
DEFAULT_RETRY_DELAY_MS: Final = 1_000
DEFAULT_RETRY_MAX_DELAY_MS: Final = 3_600_000


@dataclass(frozen=True, slots=True, kw_only=True)
class Retry:
    """How a failed attempt is retried. Every field has the framework's default, so a declared
    ``Retry(attempts=5)`` is already the resolved policy; ``job.retry`` carries ``delay`` and
    ``max_delay`` normalised to milliseconds."""

    attempts: int = DEFAULT_RETRY_ATTEMPTS
    """Attempts in all, the first included. ``ctx.final_attempt`` is ``attempt >= attempts``."""
    backoff: BackoffCurve = "exponential"
    jitter: JitterMode = "equal"
    delay: Duration = DEFAULT_RETRY_DELAY_MS
    """The base delay of the backoff curve."""
    max_delay: Duration = DEFAULT_RETRY_MAX_DELAY_MS
    """The ceiling of any one wait, a retry-after's included."""
    dead_letter: bool = True
    """``False``: attempts exhausted settle ``failed`` (dropped) instead of ``dead``."""

    @property
    def delay_ms(self) -> int:
        return parse_duration(self.delay, name="retry.delay", allow_zero=True)

    @property
    def max_delay_ms(self) -> int:
        return parse_duration(self.max_delay, name="retry.max_delay", allow_zero=True)


@dataclass(frozen=True, slots=True, kw_only=True)
class Concurrency(Generic[I]):
    """A cap per key: at most ``limit`` runs sharing ``key(input)`` at once, fleet-wide."""

    key: Callable[[I], str]
    limit: int = 1
    when_busy: WhenBusy = "wait"


UNWIND_MARGIN: Final = 2
"""Attempts a compensating job's row carries past ``retry.attempts``, so a crash on the final
attempt is re-offered and unwinds. ``max_attempts`` on the row includes them; ``ctx.final_attempt``
does not."""


def attempts_for(job: Job[Any, Any]) -> int:
    """The ``max_attempts`` a new row of ``job`` carries."""
    return job.retry.attempts + (UNWIND_MARGIN if job.compensates else 0)
