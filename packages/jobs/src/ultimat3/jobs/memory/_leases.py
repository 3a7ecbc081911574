"""The memory driver's ``LeaseStore``: one slot row per held slot, keyed ``(key, slot)``."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from ultimat3.core import XError
from ultimat3.jobs.adapter import LeaseGrant


@dataclass(slots=True)
class _Slot:
    holder: str
    token: int
    expires_at_ms: int


class MemoryLeaseStore:
    """Fleet-wide slots for one process (which, for the memory driver, is the whole fleet).

    A slot is free when nobody holds it or its TTL has passed. Every grant carries a fencing token
    from one counter, greater than every token handed out before it, for any key."""

    def __init__(self, now_ms: Callable[[], int]) -> None:
        self._now_ms = now_ms
        self._slots: dict[tuple[str, int], _Slot] = {}
        self._token = 0

    async def acquire(self, key: str, *, limit: int, holder: str, ttl_ms: int) -> LeaseGrant | None:
        _check(key=key, holder=holder, ttl_ms=ttl_ms)
        if isinstance(limit, bool) or not isinstance(limit, int) or limit < 1:
            raise XError(
                "X_INVARIANT",
                f"lease {key!r}: limit {limit!r} is not a whole number >= 1",
                fix="pass limit=1 or more",
            )
        now = self._now_ms()
        chosen: int | None = None
        for slot in range(limit):
            held = self._slots.get((key, slot))
            if held is not None and held.holder == holder and held.expires_at_ms > now:
                chosen = slot
                break
        if chosen is None:
            for slot in range(limit):
                held = self._slots.get((key, slot))
                if held is None or held.expires_at_ms <= now:
                    chosen = slot
                    break
        if chosen is None:
            return None
        self._token += 1
        row = _Slot(holder=holder, token=self._token, expires_at_ms=now + ttl_ms)
        self._slots[(key, chosen)] = row
        return LeaseGrant(
            key=key, slot=chosen, holder=holder, token=row.token, expires_at_ms=row.expires_at_ms
        )

    async def renew(self, key: str, slot: int, *, holder: str, ttl_ms: int) -> bool:
        """Extend an unexpired grant of ``holder``; ``False`` once it lapsed or was taken."""
        _check(key=key, holder=holder, ttl_ms=ttl_ms)
        now = self._now_ms()
        held = self._slots.get((key, slot))
        if held is None or held.holder != holder or held.expires_at_ms <= now:
            return False
        held.expires_at_ms = now + ttl_ms
        return True

    async def release(self, key: str, slot: int, *, holder: str) -> bool:
        held = self._slots.get((key, slot))
        if held is None or held.holder != holder:
            return False
        del self._slots[(key, slot)]
        return True

    async def holders(self, key: str) -> list[LeaseGrant]:
        now = self._now_ms()
        return [
            LeaseGrant(
                key=k, slot=slot, holder=s.holder, token=s.token, expires_at_ms=s.expires_at_ms
            )
            for (k, slot), s in sorted(self._slots.items(), key=lambda kv: kv[0][1])
            if k == key and s.expires_at_ms > now
        ]

    def purge(self) -> int:
        """Forget expired slot rows; answers how many."""
        now = self._now_ms()
        stale = [k for k, s in self._slots.items() if s.expires_at_ms <= now]
        for k in stale:
            del self._slots[k]
        return len(stale)


def _check(*, key: str, holder: str, ttl_ms: int) -> None:
    if not key or not holder:
        raise XError(
            "X_INVARIANT",
            f"lease {key!r}: key and holder must be non-empty (holder {holder!r})",
            fix="name the lease key and the holder (the worker or run id)",
        )
    if isinstance(ttl_ms, bool) or not isinstance(ttl_ms, int) or ttl_ms <= 0:
        raise XError(
            "X_INVARIANT",
            f"lease {key!r}: ttl_ms {ttl_ms!r} is not a positive whole number of milliseconds",
            fix="pass ttl_ms=30000 or another positive int",
        )
