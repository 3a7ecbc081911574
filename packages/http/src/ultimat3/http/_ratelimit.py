"""``rate_limiter()``: ``limit`` hits per ``window`` for each key, over a pluggable store.

One algorithm, GCRA (the generic cell rate algorithm, a token bucket kept as ONE number per key:
the theoretical arrival time, ``tat``), so each store is a single atomic read-modify-write: a dict
in memory, one Lua script on Redis, one ``insert ... on conflict do update`` on Postgres. A key
may spend its whole ``limit`` at once, then one hit every ``window / limit``.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Literal, Protocol, runtime_checkable

from ultimat3.core import Clock, Duration, XError, current_clock, parse_duration

Scope = Literal["process", "shared"]


@dataclass(frozen=True, slots=True)
class RateDecision:
    """One hit's verdict: ``remaining`` hits now, or the seconds until one may pass."""

    allowed: bool
    remaining: int
    retry_after_seconds: float


@runtime_checkable
class RateLimitStore(Protocol):
    """Where the per-key ``tat`` lives. ``shared`` says whether every process sees one value."""

    shared: bool

    async def spend(self, key: str, *, now_ms: int, interval_ms: int, window_ms: int) -> int:
        """Atomically: ``tat = max(stored, now)``; when ``tat + interval - now <= window`` store
        ``tat + interval`` and answer it, else store nothing and answer ``-tat`` (negative: a
        refusal, carrying the stored time so the caller can say when it frees)."""
        ...


class MemoryRateLimitStore:
    """The process's own dict: exact within one process, never shared."""

    shared = False

    def __init__(self) -> None:
        self._tat: dict[str, int] = {}

    async def spend(self, key: str, *, now_ms: int, interval_ms: int, window_ms: int) -> int:
        tat = max(self._tat.get(key, now_ms), now_ms)
        new = tat + interval_ms
        if new - now_ms > window_ms:
            return -tat
        self._tat[key] = new
        if len(self._tat) > 100_000:  # drop keys whose bucket is full again
            self._tat = {k: v for k, v in self._tat.items() if v > now_ms}
        return new


def memory_rate_limit_store() -> MemoryRateLimitStore:
    """A per-process store (``scope='process'`` only)."""
    return MemoryRateLimitStore()


class RateLimiter:
    """``await limiter.hit(key)`` answers a ``RateDecision``; ``await limiter.check(key)`` raises
    ``X_RATE_LIMITED`` (``meta.retry_after_seconds``) when the hit is refused."""

    def __init__(
        self,
        *,
        limit: int,
        window_ms: int,
        store: RateLimitStore,
        scope: Scope,
        clock: Clock | None,
        prefix: str,
    ) -> None:
        self.limit = limit
        self.window_ms = window_ms
        self.store = store
        self.scope = scope
        self.prefix = prefix
        self._clock = clock
        self._interval_ms = max(1, window_ms // limit)
        # the bucket holds `limit` hits: `limit - 1` intervals of tolerance past the one spent
        self._tolerance_ms = self._interval_ms * limit

    async def hit(self, key: str) -> RateDecision:
        if not isinstance(key, str) or not key:
            raise XError(
                "X_CONFIG_INVALID",
                f"rate limiter: key {key!r} is not a non-empty str",
                fix="key the limit by what it protects, e.g. limiter.hit(f'vendor:{org_id}')",
            )
        now = (self._clock or current_clock()).now_ms()
        got = await self.store.spend(
            self.prefix + key,
            now_ms=now,
            interval_ms=self._interval_ms,
            window_ms=self._tolerance_ms,
        )
        if got >= 0:
            left = (self._tolerance_ms - (got - now)) // self._interval_ms
            return RateDecision(allowed=True, remaining=max(0, int(left)), retry_after_seconds=0.0)
        tat = -got
        wait_ms = max(1, tat + self._interval_ms - self._tolerance_ms - now)
        return RateDecision(
            allowed=False, remaining=0, retry_after_seconds=math.ceil(wait_ms) / 1000
        )

    async def check(self, key: str) -> RateDecision:
        decision = await self.hit(key)
        if not decision.allowed:
            raise XError(
                "X_RATE_LIMITED",
                f"rate limit of {self.limit} per {self.window_ms} ms is spent for this key; "
                f"retry in {decision.retry_after_seconds:g}s",
                meta={"retry_after_seconds": decision.retry_after_seconds, "limit": self.limit},
            )
        return decision


def rate_limiter(
    *,
    limit: int,
    window: Duration,
    store: RateLimitStore | None = None,
    scope: Scope = "process",
    clock: Clock | None = None,
    prefix: str = "",
) -> RateLimiter:
    """``limit`` hits per ``window`` per key. ``scope='shared'`` (a fleet budget) needs a store
    every process shares (Postgres or Redis): the memory store there is
    ``X_RATE_LIMIT_NOT_SHARED`` — N workers would each spend the whole budget."""
    if isinstance(limit, bool) or not isinstance(limit, int) or limit < 1:
        raise XError(
            "X_CONFIG_INVALID",
            f"rate_limiter: limit {limit!r} is not an int >= 1",
            fix="rate_limiter(limit=600, window='1m')",
        )
    window_ms = parse_duration(window)
    if window_ms < limit:
        raise XError(
            "X_CONFIG_INVALID",
            f"rate_limiter: a window of {window_ms} ms cannot hold {limit} hits (1 ms each at "
            "least)",
            fix="widen the window or lower the limit",
        )
    if scope not in ("process", "shared"):
        raise XError(
            "X_CONFIG_INVALID",
            f"rate_limiter: scope {scope!r} is not 'process' or 'shared'",
            fix="scope='shared' for a fleet budget, 'process' for one process's own",
        )
    chosen = store if store is not None else memory_rate_limit_store()
    if not isinstance(chosen, RateLimitStore):
        raise XError(
            "X_CONFIG_INVALID",
            f"rate_limiter: store {type(chosen).__name__} has no spend() / shared",
            fix="pass memory_rate_limit_store(), postgres_rate_limit_store(...) or "
            "redis_rate_limit_store(...)",
        )
    if scope == "shared" and not chosen.shared:
        raise XError(
            "X_RATE_LIMIT_NOT_SHARED",
            f"rate_limiter(scope='shared') over {type(chosen).__name__}, which each process "
            "holds on its own: N workers would each spend the whole budget",
            fix="pass store=postgres_rate_limit_store(dsn) or redis_rate_limit_store(client)",
        )
    return RateLimiter(
        limit=limit,
        window_ms=window_ms,
        store=chosen,
        scope=scope,
        clock=clock,
        prefix=prefix,
    )
