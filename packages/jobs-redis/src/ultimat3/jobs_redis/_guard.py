"""The server guard: Redis must keep what it was given.

- ``maxmemory-policy`` is checked when a worker registers (its start): anything but
  ``noeviction`` lets Redis drop keys under memory pressure, and an evicted job is a silently
  lost job, so it is ``X_CONFIG_INVALID`` unless the driver was built with
  ``allow_eviction=True``.
- A marker key (``{prefix}:marker``, a random id written once with ``SET NX``) is read at every
  registration and worker heartbeat. A marker that vanished or changed under a running driver
  means the server lost its data (persistence off and a restart, a failover to an empty
  replica, a ``FLUSHALL``): ``jobs.redis.reset`` is logged at ERROR, ``redis_resets_total`` is
  counted, and a new marker is written so the next reset is seen too.
"""

from __future__ import annotations

import asyncio
from typing import Any

from redis.asyncio import Redis
from redis.exceptions import RedisError

from ultimat3.core import XError, log_event, meter, new_id

_resets_counter: Any = None


def resets_counter() -> Any:
    """``redis_resets_total{prefix}`` (an OpenTelemetry counter), made on first use."""
    global _resets_counter
    if _resets_counter is None:
        _resets_counter = meter().create_counter(
            "redis_resets_total",
            description="times a Redis job driver found its server had lost its data",
        )
    return _resets_counter


class ServerGuard:
    __slots__ = ("_client", "_key", "_prefix", "_timeout_s", "allow_eviction", "marker", "resets")

    def __init__(
        self, client: Redis, prefix: str, *, allow_eviction: bool, timeout_s: float | None
    ) -> None:
        self._client = client
        self._prefix = prefix
        self._key = "{" + prefix + "}:marker"
        self._timeout_s = timeout_s if timeout_s is not None else 5.0
        self.allow_eviction = allow_eviction
        self.marker: str | None = None
        """The marker this driver last saw (``None`` before the first look)."""
        self.resets = 0
        """How many times this driver found its server had lost its data."""

    async def _call(self, what: str, call: Any) -> Any:
        try:
            async with asyncio.timeout(self._timeout_s):
                return await call
        except (RedisError, OSError, TimeoutError) as exc:
            raise XError(
                "X_DRIVER_UNAVAILABLE",
                f"redis job driver: {what} failed ({type(exc).__name__}: {exc})",
                fix="check that Redis is reachable",
                meta={"operation": what},
            ) from exc

    async def check_policy(self) -> str | None:
        """The server's ``maxmemory_policy``; ``X_CONFIG_INVALID`` for an evicting one (unless
        allowed). ``INFO memory``, not ``CONFIG GET``: managed Redis often disables CONFIG."""
        info = await self._call("reading INFO memory", self._client.info("memory"))
        policy = info.get("maxmemory_policy") if isinstance(info, dict) else None
        if policy is not None and not isinstance(policy, str):
            policy = str(policy)
        if policy not in (None, "noeviction") and not self.allow_eviction:
            raise XError(
                "X_CONFIG_INVALID",
                f"redis job driver: the server's maxmemory-policy is {policy!r}: under memory "
                "pressure Redis would evict job keys, and an evicted job is silently lost",
                fix="set `maxmemory-policy noeviction` (redis.conf, or CONFIG SET "
                "maxmemory-policy noeviction), or build the driver with "
                "redis_job_driver(..., allow_eviction=True) to accept the loss",
                meta={"maxmemory_policy": policy, "prefix": self._prefix},
            )
        return policy

    async def observe_marker(self) -> bool:
        """Write the marker if absent, read it; answers whether a reset was detected (logged,
        counted)."""
        await self._call("writing the marker key", self._client.set(self._key, new_id(), nx=True))
        raw = await self._call("reading the marker key", self._client.get(self._key))
        seen = raw.decode() if isinstance(raw, bytes) else str(raw)
        before, self.marker = self.marker, seen
        if before is None or before == seen:
            return False
        self.resets += 1
        resets_counter().add(1, {"prefix": self._prefix})
        log_event(
            "jobs.redis.reset",
            prefix=self._prefix,
            resets=self.resets,
            error="the Redis server lost this driver's data (its marker key changed): jobs "
            "queued before are gone; check persistence (appendonly yes) and failover",
        )
        return True
