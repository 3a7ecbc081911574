"""What a worker says about each attempt, and the traceback a failure keeps.

One log line per attempt that did not simply complete: ``jobs.attempt.failed`` (warning: the
attempt failed and the run is retried, with the delay), ``jobs.run.dead-lettered`` (error: the
run is buried dead, with its traceback), ``jobs.run.failed`` (error: buried failed — a
``dead_letter=False`` job, or a busy key refused). A lease loss is ``jobs.lease.lost`` (the
heartbeat's). A completed run logs ``jobs.run.completed`` at DEBUG with its duration. Every line
carries ``job``, ``job_id``, ``attempt``, ``queue`` and ``code``.

``last_error`` keeps the body's traceback (``traceback``), bounded to ``MAX_TRACEBACK_BYTES``:
the newest frames are kept, the oldest cut.
"""

from __future__ import annotations

import traceback as tb
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, Final

from opentelemetry.metrics import Histogram

from ultimat3.core import log_event, meter

if TYPE_CHECKING:
    from ultimat3.jobs._run.outcome import RunOutcome
    from ultimat3.jobs.adapter import ClaimedJob

MAX_TRACEBACK_BYTES: Final = 8192
"""A stored traceback's bound: the newest frames are kept."""
_CUT: Final = "... (older frames cut: the traceback is bounded to 8 KiB)\n"

_duration: Histogram | None = None


def job_duration_histogram() -> Histogram:
    """``job_duration_seconds{job, queue, outcome}``: one point per attempt settled."""
    global _duration
    if _duration is None:
        _duration = meter().create_histogram(
            "job_duration_seconds",
            unit="s",
            description="an attempt's run time, from its claim to its settle",
        )
    return _duration


def bounded_traceback(exc: BaseException) -> str | None:
    """``exc``'s formatted traceback (its chain too), at most ``MAX_TRACEBACK_BYTES`` bytes of
    UTF-8, newest frames kept; ``None`` for an exception never raised (no frames)."""
    if exc.__traceback__ is None:
        return None
    # stored as JSON text: no NUL, no lone surrogate (Postgres refuses both)
    raw = "".join(tb.format_exception(exc)).replace("\x00", "\\x00").encode("utf-8", "replace")
    text = raw.decode("utf-8")
    if len(raw) <= MAX_TRACEBACK_BYTES:
        return text
    keep = MAX_TRACEBACK_BYTES - len(_CUT.encode())
    tail = raw[-keep:].decode("utf-8", errors="ignore")
    newline = tail.find("\n")  # start at a whole line
    return _CUT + (tail[newline + 1 :] if 0 <= newline < len(tail) - 1 else tail)


def log_outcome(claimed: ClaimedJob, outcome: RunOutcome, duration_s: float) -> None:
    """The attempt's log line (none for a release, a suspension, a lost lease or a settle that
    did not land: a drain, a busy cap and a sleep are not failures; a loss is the heartbeat's
    ``jobs.lease.lost``, a miss ``jobs.settle.unowned``)."""
    if not outcome.landed:  # another claim owns the run: jobs.settle.unowned said so
        return
    kind = outcome.outcome
    if kind == "done":  # every run's line: its fields passed as they are, no dict merged
        log_event(
            "jobs.run.completed",
            level="debug",
            job=claimed.name,
            job_id=claimed.id,
            attempt=claimed.attempt,
            queue=claimed.queue,
            duration_ms=int(duration_s * 1000),
        )
        return
    base: dict[str, Any] = {
        "job": claimed.name,
        "job_id": claimed.id,
        "attempt": claimed.attempt,
        "queue": claimed.queue,
    }
    error: Mapping[str, Any] = outcome.error or {}
    if kind == "retry":
        log_event(
            "jobs.attempt.failed",
            **base,
            max_attempts=claimed.max_attempts,
            code=error.get("code"),
            error=str(error.get("message"))[:500],
            retry_in_ms=outcome.delay_ms,
        )
    elif kind in ("dead", "failed"):
        log_event(
            "jobs.run.dead-lettered" if kind == "dead" else "jobs.run.failed",
            **base,
            code=error.get("code"),
            error=str(error.get("message"))[:500],
            traceback=error.get("traceback"),
        )
