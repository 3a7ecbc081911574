"""The audit sink port: optional (installed or not), and the memory sink keeps one record per
idempotency key, in the order first written."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from ultimat3.core import (
    AUDIT_SINK,
    AuditRecord,
    XError,
    adapter,
    installed_adapter,
    memory_audit_sink,
    swap_adapter,
)


def _record(key: str, outcome: str = "allowed") -> AuditRecord:
    return AuditRecord(
        outcome=outcome,  # type: ignore[arg-type]
        primitive="action",
        surface="job",
        name="members.erase",
        input={"subject": "members", "run": "r1"},
        idempotency_key=key,
        at=datetime(2026, 1, 1, tzinfo=UTC),
    )


async def test_the_memory_sink_dedupes_on_the_idempotency_key() -> None:
    sink = memory_audit_sink()
    await sink.write(_record("members.erase:r1"))
    await sink.write(_record("members.erase:r1"))  # at least once: a replay writes it again
    await sink.write(_record("members.erase:r1:failed:1", "failed"))
    assert [r.idempotency_key for r in sink.records] == [
        "members.erase:r1",
        "members.erase:r1:failed:1",
    ]


def test_the_port_is_optional_and_says_how_to_install_one() -> None:
    assert installed_adapter(AUDIT_SINK) is None
    with pytest.raises(XError) as err:
        adapter(AUDIT_SINK)
    assert err.value.code == "X_ADAPTER_MISSING"
    assert "install_adapter(AUDIT_SINK" in (err.value.fix or "")
    sink = memory_audit_sink()
    with swap_adapter(AUDIT_SINK, sink):
        assert adapter(AUDIT_SINK) is sink
    assert installed_adapter(AUDIT_SINK) is None
