"""``LeaseStore`` over ``x_job_leases``: one row per held slot, keyed ``(lease_key, slot)``.

The primary key is what serialises two workers reaching for the same slot: both try to take it
in one ``INSERT ... ON CONFLICT DO UPDATE ... WHERE expired`` and the loser sees it taken. Tokens
come from the ``x_job_lease_tokens`` sequence, so every grant's token is greater than every token
handed out before it, for any key (the database's counter, never a clock).
"""

from __future__ import annotations

from ultimat3.core import XError
from ultimat3.jobs.adapter import LeaseGrant
from ultimat3.jobs.postgres._db import Database
from ultimat3.jobs.postgres._rows import check_text

_ATTEMPTS = 8
"""How often acquire asks again after losing a slot it saw free to another worker."""


def _check(*, key: str, holder: str, ttl_ms: int) -> None:
    if not key or not holder or not isinstance(key, str) or not isinstance(holder, str):
        raise XError(
            "X_INVARIANT",
            f"lease {key!r}: key and holder must be non-empty (holder {holder!r})",
            fix="name the lease key and the holder (the worker or run id)",
        )
    check_text(key, what="lease key")
    check_text(holder, what=f"lease {key!r}: holder")
    if isinstance(ttl_ms, bool) or not isinstance(ttl_ms, int) or ttl_ms <= 0:
        raise XError(
            "X_INVARIANT",
            f"lease {key!r}: ttl_ms {ttl_ms!r} is not a positive whole number of milliseconds",
            fix="pass ttl_ms=30000 or another positive int",
        )


class PostgresLeaseStore:
    """Fleet-wide slots: held across every process on the database, TTL-bound."""

    def __init__(self, db: Database) -> None:
        self._db = db

    async def acquire(self, key: str, *, limit: int, holder: str, ttl_ms: int) -> LeaseGrant | None:
        _check(key=key, holder=holder, ttl_ms=ttl_ms)
        if isinstance(limit, bool) or not isinstance(limit, int) or limit < 1:
            raise XError(
                "X_INVARIANT",
                f"lease {key!r}: limit {limit!r} is not a whole number >= 1",
                fix="pass limit=1 or more",
            )
        params = {"key": key, "limit": limit, "holder": holder, "ttl_ms": ttl_ms}
        for _ in range(_ATTEMPTS):
            row = await self._db.fetchone(
                "lease_acquire", params, what=f"acquiring lease {key!r} for {holder!r}"
            )
            if row is None or row[3] is None:
                return None  # every slot is held
            if row[0] is not None:
                return LeaseGrant(
                    key=key, slot=row[0], holder=holder, token=row[1], expires_at_ms=row[2]
                )
            # Another worker took the slot this statement saw free: look again.
        return None

    async def renew(self, key: str, slot: int, *, holder: str, ttl_ms: int) -> bool:
        """Extend an unexpired grant of ``holder``; ``False`` once it lapsed or was taken."""
        _check(key=key, holder=holder, ttl_ms=ttl_ms)
        n = await self._db.rowcount(
            "lease_renew",
            {"key": key, "slot": slot, "holder": holder, "ttl_ms": ttl_ms},
            what=f"renewing lease {key!r} slot {slot}",
        )
        return n > 0

    async def release(self, key: str, slot: int, *, holder: str) -> bool:
        n = await self._db.rowcount(
            "lease_release",
            {"key": key, "slot": slot, "holder": holder},
            what=f"releasing lease {key!r} slot {slot}",
        )
        return n > 0

    async def holders(self, key: str) -> list[LeaseGrant]:
        """The unexpired grants of ``key``, by slot."""
        rows = await self._db.fetchall(
            "lease_holders", {"key": key}, what=f"reading the holders of lease {key!r}"
        )
        return [
            LeaseGrant(key=key, slot=r[0], holder=r[1], token=r[2], expires_at_ms=r[3])
            for r in rows
        ]
