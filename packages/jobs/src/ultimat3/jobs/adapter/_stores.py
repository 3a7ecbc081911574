"""The stores beside a driver: leases (concurrency and locks), the backfill ledger, the event
bus (``step.wait_for_event``) and the outbox store."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Protocol, runtime_checkable

from ._model import (
    BackfillRow,
    EnqueueRequest,
    LeaseGrant,
)


@runtime_checkable
class LeaseStore(Protocol):
    """Fleet-wide slots: one row per held slot, keyed ``(key, slot)``; TTL-bound."""

    async def acquire(self, key: str, *, limit: int, holder: str, ttl_ms: int) -> LeaseGrant | None:
        """Take a free (or expired) slot ``0..limit-1`` of ``key`` for ``holder``; a holder that
        already holds a slot of the key gets that slot back, renewed. ``None`` when all are held.
        Each grant carries a fencing token greater than every earlier token."""
        ...

    async def renew(self, key: str, slot: int, *, holder: str, ttl_ms: int) -> bool: ...

    async def release(self, key: str, slot: int, *, holder: str) -> bool: ...

    async def holders(self, key: str) -> list[LeaseGrant]:
        """The unexpired grants of ``key``."""
        ...


@runtime_checkable
class BackfillLedger(Protocol):
    async def begin(self, name: str, *, job_id: str | None, cursor: Any) -> BackfillRow: ...

    async def advance(self, backfill_id: str, *, rows: int, cursor: Any) -> None: ...

    async def finish(self, backfill_id: str, *, state: str) -> None: ...

    async def list(self, *, limit: int = 200) -> list[BackfillRow]: ...


@runtime_checkable
class EventBus(Protocol):
    """What ``step.wait_for_event`` resumes from. ``publish`` joins the ambient transaction."""

    async def publish(self, event: str, payload: Any, *, connection: object | None = None) -> str:
        """Store one event; answers its id. Wakes the rows waiting on it."""
        ...

    async def marker(self) -> str:
        """An opaque position: every event published after this call is "after" it."""
        ...

    async def find_after(self, event: str, marker: str, *, limit: int = 100) -> list[Any]:
        """Payloads of ``event`` published after ``marker``, oldest first."""
        ...


@runtime_checkable
class OutboxStore(Protocol):
    """The transactional record behind an enqueue made in a transaction the driver cannot join."""

    def accepts(self, connection: object) -> bool: ...

    async def stage(self, connection: object, requests: Sequence[EnqueueRequest]) -> None: ...

    async def claim_batch(self, *, limit: int, lease_ms: int) -> list[tuple[str, EnqueueRequest]]:
        """Committed, unpublished rows: ``(outbox_row_id, request)``, in staging order."""
        ...

    async def mark_published_many(self, row_ids: Sequence[str]) -> None: ...

    async def release(self, row_ids: Sequence[str]) -> None: ...
