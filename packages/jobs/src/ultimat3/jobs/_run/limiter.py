"""``concurrency_limiter``: at most N body starts per window, per tenant, in one worker process.

    worker = job_worker(jobs=[sync], limiter=concurrency_limiter(rate_per_tenant=10, window="1s"))

A start is a body that ran: the limiter is asked after the run's concurrency slot (a claim handed
back over ``concurrency`` or refused by its key spends nothing) and right before the body. A run
over its tenant's rate is handed back uncounted, due when the oldest start in the window ages out,
with ``X_RATE_LIMITED`` as its last error: a backlog waits, it is never dead-lettered for waiting.
Rows without a tenant share the limiter's own bucket. It is per process, never a ``job()`` field:
N worker processes start up to N times the rate — a fleet-wide budget is a shared rate limiter
in the body (the spec's "fleet budget" row).

The window slides: in ANY span of ``window`` at most ``rate_per_tenant`` bodies of one tenant
start (a log of the last N start times per tenant, not a token bucket, whose burst can start
2N - 1 in one window).
"""

from __future__ import annotations

import math
from collections import deque
from typing import TYPE_CHECKING, Final

from ultimat3.core import XError, parse_duration

if TYPE_CHECKING:
    from ultimat3.jobs.adapter import ClaimedJob

_TOLERANCE_MS: Final = 1e-6
PRUNE_AT: Final = 4096
"""Tenants tracked before the idle ones (no start within the window) are forgotten."""


class ConcurrencyLimiter:
    """Made by :func:`concurrency_limiter`; the worker asks :meth:`try_start` before each body."""

    __slots__ = ("_starts", "rate_per_tenant", "window_ms")

    def __init__(self, *, rate_per_tenant: int, window_ms: int) -> None:
        self.rate_per_tenant = rate_per_tenant
        self.window_ms = window_ms
        self._starts: dict[str | None, deque[float]] = {}

    def try_start(self, tenant_id: str | None, now_s: float) -> int | None:
        """Spend one start of ``tenant_id``'s window at ``now_s`` (a monotonic clock, seconds):
        ``None`` when it may start, else the whole milliseconds until it may (>= 1)."""
        starts = self._starts.get(tenant_id)  # None: the shared bucket of rows with no tenant
        if starts is None:
            if len(self._starts) >= PRUNE_AT:
                self._prune(now_s)
            starts = self._starts[tenant_id] = deque(maxlen=self.rate_per_tenant)
        if len(starts) == self.rate_per_tenant:
            # in ms, with a nanosecond's tolerance: a retry due exactly when the oldest start
            # ages out must not be refused over a float's last bit
            wait_ms = starts[0] * 1000 + self.window_ms - now_s * 1000
            if wait_ms > _TOLERANCE_MS:
                return max(1, math.ceil(wait_ms - _TOLERANCE_MS))
        starts.append(now_s)  # a full deque drops its oldest, which has aged out
        return None

    def tracked(self) -> int:
        """How many tenants the limiter holds a window for."""
        return len(self._starts)

    def _prune(self, now_s: float) -> None:
        cut = now_s - self.window_ms / 1000
        for key in [k for k, s in self._starts.items() if not s or s[-1] <= cut]:
            del self._starts[key]

    def __repr__(self) -> str:
        return (
            f"concurrency_limiter(rate_per_tenant={self.rate_per_tenant}, "
            f"window_ms={self.window_ms})"
        )


def concurrency_limiter(*, rate_per_tenant: int, window: str | int = "1s") -> ConcurrencyLimiter:
    """At most ``rate_per_tenant`` body starts per tenant in any ``window`` (a duration such as
    ``'1s'``, ``'1m'``, or milliseconds), in this worker process. Pass it as
    ``job_worker(limiter=...)``."""
    if isinstance(rate_per_tenant, bool) or not isinstance(rate_per_tenant, int):
        raise _refuse(f"rate_per_tenant {rate_per_tenant!r} is not a whole number")
    if rate_per_tenant < 1:
        raise _refuse(f"rate_per_tenant {rate_per_tenant} is below 1: no tenant could ever start")
    try:
        window_ms = parse_duration(window, name="window")
    except XError as exc:
        raise _refuse(f"window {window!r} is not a duration ({exc.message})") from exc
    return ConcurrencyLimiter(rate_per_tenant=rate_per_tenant, window_ms=window_ms)


def _refuse(message: str) -> XError:
    return XError(
        "X_CONFIG_INVALID",
        f"concurrency_limiter: {message}",
        fix="concurrency_limiter(rate_per_tenant=10, window='1s')",
    )


def rate_limited(claimed: ClaimedJob, wait_ms: int) -> XError:
    """What a run over its tenant's rate is handed back with (its row's last error)."""
    tenant = "no tenant" if claimed.tenant_id is None else f"tenant {claimed.tenant_id!r}"
    return XError(
        "X_RATE_LIMITED",
        f"job {claimed.name!r} ({claimed.id}) was not started: {tenant} spent this worker's "
        f"starts for the window; it starts in {wait_ms} ms, the attempt uncounted",
        fix="nothing to do: it waits its turn; raise rate_per_tenant to start more at once",
        meta={"job_id": claimed.id, "tenant_id": claimed.tenant_id, "retry_after_ms": wait_ms},
    )
