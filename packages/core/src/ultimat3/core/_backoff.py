"""Retry backoff: exponential, linear or fixed curves with equal, full or no jitter."""

from __future__ import annotations

import random
from typing import Literal, get_args

from ._durations import Duration, parse_duration
from ._errors import XError

BackoffCurve = Literal["exponential", "linear", "fixed"]
JitterMode = Literal["equal", "none", "full"]
_CURVES: tuple[str, ...] = get_args(BackoffCurve)
_JITTERS: tuple[str, ...] = get_args(JitterMode)
_rng = random.Random()


def backoff_delay(
    attempt: int,
    *,
    base: Duration = 1000,
    max_delay: Duration = 3_600_000,
    curve: BackoffCurve = "exponential",
    jitter: JitterMode = "equal",
    rng: random.Random | None = None,
) -> int:
    """Milliseconds to wait after failed ``attempt`` (1-based), clamped then jittered."""
    if isinstance(attempt, bool) or not isinstance(attempt, int) or attempt < 1:
        raise XError(
            "X_INVARIANT",
            f"backoff_delay: attempt {attempt!r} must be an int >= 1 (the attempt that failed)",
            fix="backoff_delay(1) after the first failure",
        )
    if curve not in _CURVES:
        raise XError(
            "X_INVARIANT",
            f"backoff_delay: unknown curve {curve!r}",
            fix="use curve='exponential', 'linear' or 'fixed'",
        )
    if jitter not in _JITTERS:
        raise XError(
            "X_INVARIANT",
            f"backoff_delay: unknown jitter {jitter!r}",
            fix="use jitter='equal', 'none' or 'full'",
        )
    base_ms = parse_duration(base, name="base", allow_zero=True)
    cap = parse_duration(max_delay, name="max_delay", allow_zero=True)
    if curve == "exponential":
        # 2**(attempt-1) past 64 doublings is beyond any cap: skip the huge integer.
        d = cap if attempt > 64 and base_ms else base_ms * (1 << min(attempt - 1, 64))
    elif curve == "linear":
        d = base_ms * attempt
    else:
        d = base_ms
    d = min(d, cap)
    r = rng if rng is not None else _rng
    if jitter == "none":
        return d
    if jitter == "full":
        return r.randint(0, d)
    half = d // 2
    return half + r.randint(0, d - half)
