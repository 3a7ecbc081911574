"""The audit sink port: where a primitive records who did what, allowed or failed.

``AUDIT_SINK`` is optional: a primitive writes a record only when an adapter is installed
(``install_adapter(AUDIT_SINK, sink)``). A sink writes at least once: it dedupes on the record's
``idempotency_key``. ``memory_audit_sink()`` keeps the records in a list (tests, a scratch app).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Literal, Protocol

from ._adapters import Port

AuditOutcome = Literal["allowed", "failed"]


@dataclass(frozen=True, slots=True)
class AuditRecord:
    """One audit record. ``input`` is what the primitive chose to record (never a secret and
    never a key an app may make an email); ``error_code`` names the failure of a ``failed``
    record (the code only: an error's message may quote the values it refused)."""

    outcome: AuditOutcome
    primitive: str
    surface: str
    name: str
    input: Mapping[str, Any]
    idempotency_key: str
    at: datetime
    tenant_id: str | None = None
    actor: str | None = None
    error_code: str | None = None


class AuditSink(Protocol):
    """Writes audit records; dedupes on ``record.idempotency_key`` (writes are at least once).
    A sink that raises refuses the record: the primitive's operation fails with it."""

    async def write(self, record: AuditRecord) -> None: ...


AUDIT_SINK: Port[AuditSink] = Port(
    "audit sink",
    fix="install_adapter(AUDIT_SINK, sink) with an object whose `async write(record)` keeps it "
    "(memory_audit_sink() in tests)",
)


@dataclass(slots=True)
class MemoryAuditSink:
    """The records in order of first write, one per idempotency key."""

    records: list[AuditRecord] = field(default_factory=list)

    async def write(self, record: AuditRecord) -> None:
        if any(r.idempotency_key == record.idempotency_key for r in self.records):
            return
        self.records.append(record)


def memory_audit_sink() -> MemoryAuditSink:
    """An in-process ``AuditSink`` (``.records``)."""
    return MemoryAuditSink()
