"""The Redis driver's ``LeaseStore``: fleet-wide slots in one hash per lease key.

A slot is free when nobody holds it or its TTL has passed (the server's clock). Every grant carries
a fencing token from one ``INCR`` counter, greater than every token granted before, for any key.
A lease key's hash expires a minute after its last slot's TTL, so idle keys clean themselves up.
"""

from __future__ import annotations

from ultimat3.core import XError
from ultimat3.jobs.adapter import LeaseGrant

from ._codec import pairs, text
from ._scripts import ScriptRunner


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


def _slot(key: str, slot: int) -> int:
    if isinstance(slot, bool) or not isinstance(slot, int) or slot < 0:
        raise XError(
            "X_INVARIANT",
            f"lease {key!r}: slot {slot!r} is not a slot number",
            fix="pass the slot the grant named (grant.slot)",
        )
    return slot


class RedisLeaseStore:
    def __init__(self, runner: ScriptRunner) -> None:
        self._r = runner

    async def acquire(self, key: str, *, limit: int, holder: str, ttl_ms: int) -> LeaseGrant | None:
        _check(key=key, holder=holder, ttl_ms=ttl_ms)
        if isinstance(limit, bool) or not isinstance(limit, int) or limit < 1:
            raise XError(
                "X_INVARIANT",
                f"lease {key!r}: limit {limit!r} is not a whole number >= 1",
                fix="pass limit=1 or more",
            )
        reply = await self._r.run("lease_acquire", key, limit, holder, ttl_ms, op="take a lease")
        if reply is None:
            return None
        slot, token, expires = (int(v) for v in reply)
        return LeaseGrant(key=key, slot=slot, holder=holder, token=token, expires_at_ms=expires)

    async def renew(self, key: str, slot: int, *, holder: str, ttl_ms: int) -> bool:
        """Extend an unexpired grant of ``holder``; ``False`` once it lapsed or was taken."""
        _check(key=key, holder=holder, ttl_ms=ttl_ms)
        return bool(
            await self._r.run(
                "lease_renew", key, _slot(key, slot), holder, ttl_ms, op="renew a lease"
            )
        )

    async def release(self, key: str, slot: int, *, holder: str) -> bool:
        return bool(
            await self._r.run("lease_release", key, _slot(key, slot), holder, op="release a lease")
        )

    async def holders(self, key: str) -> list[LeaseGrant]:
        now, flat = await self._r.run("lease_holders", key, op="read lease holders")
        fields = {k: text(v) for k, v in pairs(flat).items()}
        grants: list[LeaseGrant] = []
        for name, holder in fields.items():
            if not name.startswith("h"):
                continue
            slot = name[1:]
            expires = int(fields.get("e" + slot, "0"))
            if expires > int(now):
                grants.append(
                    LeaseGrant(
                        key=key,
                        slot=int(slot),
                        holder=holder,
                        token=int(fields.get("t" + slot, "0")),
                        expires_at_ms=expires,
                    )
                )
        grants.sort(key=lambda g: g.slot)
        return grants
