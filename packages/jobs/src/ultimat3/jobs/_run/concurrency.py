"""Fleet-wide concurrency: a run takes a slot of its lease key before its body runs.

``concurrency=N`` caps the job under the lease key ``job:<name>``; ``Concurrency(key=...)`` caps
each ``job:<name>:<key(input)>``. The slot lives in the driver's ``LeaseStore`` (one row per held
slot), its holder is the JOB id — so a retry, a sleep resume or a redelivery meeting its own slot
not yet released gets it back, and a run is never failed by its own earlier claim — and its TTL
is the worker's visibility timeout, renewed with the heartbeat and released once the run settled.
A renewal the store refuses means another run may now hold the slot: ``ctx.signal`` aborts with
``X_JOB_SLOT_LOST``.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Final

from ultimat3.core import XError, log_event
from ultimat3.jobs.adapter import ClaimedJob, LeaseStore

if TYPE_CHECKING:
    from ultimat3.jobs._declare.job import Job

LEASE_PREFIX: Final = "job:"


def lease_key(job: Job[Any, Any], value: Any) -> str:
    """``job:<name>`` for a plain cap, ``job:<name>:<key(input)>`` for a keyed one. The key is
    asked at the claim: whatever it throws fails that attempt (the ordinary retry path)."""
    key = job.concurrency_key_for(value)
    return f"{LEASE_PREFIX}{job.name}" if key is None else f"{LEASE_PREFIX}{job.name}:{key}"


@dataclass(slots=True)
class SlotHold:
    """The slot one run holds while its body runs."""

    leases: LeaseStore
    key: str
    slot: int
    holder: str
    ttl_ms: int
    token: int
    lost: bool = False

    async def renew(self, claimed: ClaimedJob, on_lost: Callable[[XError], None]) -> None:
        """Extend the slot (with the heartbeat). A refusal loses it at once; a failure that
        raises is retried on the next beat (and refused there once the TTL has passed)."""
        if self.lost:
            return
        try:
            landed = await self.leases.renew(
                self.key, self.slot, holder=self.holder, ttl_ms=self.ttl_ms
            )
        except Exception as exc:
            log_event(
                "jobs.slot.renew-failed",
                level="warning",
                job_id=claimed.id,
                job=claimed.name,
                lease=self.key,
                error=f"{type(exc).__name__}: {exc}",
            )
            return
        if landed:
            return
        self.lost = True
        log_event(
            "jobs.slot.lost", level="error", job_id=claimed.id, job=claimed.name, lease=self.key
        )
        on_lost(
            XError(
                "X_JOB_SLOT_LOST",
                f"job {claimed.name!r} ({claimed.id}) lost its concurrency slot {self.slot} of "
                f"{self.key!r}: the lease store refused the renewal, so another run may hold it",
                fix="none — the run is handed back and runs again once it holds a slot; keep "
                "bodies honouring ctx.signal so a lost slot stops them",
                meta={"job_id": claimed.id, "lease": self.key, "slot": self.slot},
            )
        )

    async def release(self, claimed: ClaimedJob) -> None:
        try:
            await self.leases.release(self.key, self.slot, holder=self.holder)
        except Exception as exc:  # the TTL frees it anyway
            log_event(
                "jobs.slot.release-failed",
                level="warning",
                job_id=claimed.id,
                job=claimed.name,
                lease=self.key,
                error=f"{type(exc).__name__}: {exc}",
            )


async def take_slot(
    job: Job[Any, Any], value: Any, claimed: ClaimedJob, leases: LeaseStore, *, ttl_ms: int
) -> tuple[str, SlotHold | None]:
    """Acquire a slot for this run: ``(lease key, hold)``, the hold ``None`` when every slot is
    held by other runs."""
    key = lease_key(job, value)
    assert job.concurrency is not None
    grant = await leases.acquire(key, limit=job.concurrency, holder=claimed.id, ttl_ms=ttl_ms)
    if grant is None:
        return key, None
    return key, SlotHold(leases, key, grant.slot, claimed.id, ttl_ms, grant.token)


async def key_busy(job: Job[Any, Any], claimed: ClaimedJob, key: str, leases: LeaseStore) -> XError:
    """``X_JOB_KEY_BUSY``: ``when_busy='fail'`` over a busy key, naming who holds it."""
    try:
        holders = [g.holder for g in await leases.holders(key)]
    except Exception:
        holders = []
    by = ", ".join(holders) if holders else "other runs"
    return XError(
        "X_JOB_KEY_BUSY",
        f"job {job.name!r} ({claimed.id}): the concurrency key {key!r} is busy — all "
        f"{job.concurrency} slot(s) held by {by}; when_busy='fail' refuses the run, its body "
        "never ran",
        fix=f"x jobs retry {claimed.id} re-queues it once the other run settles; or declare "
        "when_busy='wait'",
        meta={"job_id": claimed.id, "job": job.name, "lease": key, "holders": holders},
    )


def unenforceable(job: Job[Any, Any], driver_name: str) -> XError:
    return XError(
        "X_JOB_CONCURRENCY_UNENFORCEABLE",
        f"job {job.name!r} declares concurrency but the driver {driver_name!r} has no lease "
        "store: the cap cannot be held across the fleet",
        fix="use a driver with a LeaseStore (postgres_job_driver(), memory_job_driver()) or drop "
        f"concurrency from {job.name!r}",
        meta={"jobs": [job.name], "driver": driver_name},
    )
