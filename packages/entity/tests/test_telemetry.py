"""Entity statements are OpenTelemetry CLIENT spans (``"{OPERATION} {entity}"``, the database
semantic conventions' attributes, never a value) and points of ``db.client.operation.duration``,
on Postgres and in memory alike; a refused statement's span is an ERROR with ``error.type``."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import pytest
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import HistogramDataPoint, InMemoryMetricReader
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import SpanKind, StatusCode

from ultimat3.core import XError, new_id
from ultimat3.entity import KeyRing, entity, integer, memory_database, text
from ultimat3.entity import _telemetry as entity_telemetry
from ultimat3.entity import uuid as uuid_col

MakeDb = Callable[..., Any]
SECRET = "do-not-trace-me-4111"
orders = entity(
    "orders",
    columns={
        "id": uuid_col().primary_key(),
        "sku": text(),
        "qty": integer(),
        "card": text().sealed().nullable(),
    },
)
RING = KeyRing({"k1": KeyRing.generate_key()})


class Otel:
    def __init__(
        self, exporter: InMemorySpanExporter, reader: InMemoryMetricReader, tracer: Any
    ) -> None:
        self.exporter, self.reader, self.tracer = exporter, reader, tracer

    def spans(self) -> list[ReadableSpan]:
        return list(self.exporter.get_finished_spans())

    def durations(self) -> dict[tuple[tuple[str, Any], ...], int]:
        data = self.reader.get_metrics_data()
        out: dict[tuple[tuple[str, Any], ...], int] = {}
        for rm in data.resource_metrics if data else ():
            for sm in rm.scope_metrics:
                for m in sm.metrics:
                    if m.name == "db.client.operation.duration":
                        assert m.unit == "s"
                        for p in m.data.data_points:
                            assert isinstance(p, HistogramDataPoint)
                            out[tuple(sorted(dict(p.attributes or {}).items()))] = p.count
        return out


@pytest.fixture
def otel(monkeypatch: pytest.MonkeyPatch) -> Iterator[Otel]:
    exporter = InMemorySpanExporter()
    tracer_provider = TracerProvider()
    tracer_provider.add_span_processor(SimpleSpanProcessor(exporter))
    reader = InMemoryMetricReader()
    meter_provider = MeterProvider(metric_readers=[reader])
    tracer = tracer_provider.get_tracer("ultimat3")
    meter = meter_provider.get_meter("ultimat3")
    monkeypatch.setattr(entity_telemetry, "tracer", lambda: tracer)
    monkeypatch.setattr(entity_telemetry, "meter", lambda: meter)
    yield Otel(exporter, reader, tracer)
    tracer_provider.shutdown()
    meter_provider.shutdown()


async def exercise(db: Any) -> None:
    await db.migrate()
    a, b = new_id(), new_id()
    await db.orders.insert({"id": a, "sku": "tea", "qty": 1, "card": SECRET})
    await db.orders.insert_all(
        [{"id": b, "sku": "cake", "qty": 2}, {"id": new_id(), "sku": "x", "qty": 0}]
    )
    await db.orders.where(sku="tea").all()
    await db.orders.count()
    await db.orders.where(id=b).update(qty=3)
    await db.orders.upsert_all([{"id": a, "sku": "tea", "qty": 5}], on_conflict=["id"])
    await db.orders.where(qty=0).delete()


def check(otel: Otel, system: str, namespace: str | None) -> None:
    spans = otel.spans()
    names = [s.name for s in spans]
    assert names == [
        "INSERT orders",
        "INSERT orders",
        "SELECT orders",
        "COUNT orders",
        "UPDATE orders",
        "UPSERT orders",
        "DELETE orders",
    ]
    for s in spans:
        a = dict(s.attributes or {})
        assert s.kind == SpanKind.CLIENT
        assert a["db.system.name"] == system and a["db.collection.name"] == "orders"
        assert a["db.operation.name"] == s.name.split()[0]
        assert a.get("db.namespace") == namespace
        assert SECRET not in repr(a) and "tea" not in repr(a), "a value on a span"
    by = {s.name: dict(s.attributes or {}) for s in spans}
    assert dict(spans[1].attributes or {})["db.operation.batch.size"] == 2
    assert "db.operation.batch.size" not in dict(spans[0].attributes or {})
    assert by["SELECT orders"]["db.response.returned_rows"] == 1
    assert by["UPDATE orders"]["ultimat3.entity.rows_affected"] == 1
    assert by["DELETE orders"]["ultimat3.entity.rows_affected"] == 1
    points = otel.durations()
    insert_key = tuple(
        sorted(
            {
                "db.system.name": system,
                "db.collection.name": "orders",
                "db.operation.name": "INSERT",
            }.items()
        )
    )
    assert points[insert_key] == 2
    assert sum(points.values()) == 7


async def test_postgres_statements_are_spans_and_duration_points(
    make_db: MakeDb, otel: Otel
) -> None:
    db = make_db([orders], RING)
    await exercise(db)
    check(otel, "postgresql", db.schema)


async def test_memory_statements_are_spans_and_duration_points(otel: Otel) -> None:
    await exercise(memory_database([orders], key_ring=RING))
    check(otel, "memory", None)


async def test_a_refused_statement_is_an_error_span_with_its_code(
    make_db: MakeDb, otel: Otel
) -> None:
    db = make_db([orders], RING)
    await db.migrate()
    pid = new_id()
    await db.orders.insert({"id": pid, "sku": "a", "qty": 1})
    with pytest.raises(XError) as caught:
        await db.orders.insert({"id": pid, "sku": "a", "qty": 1})
    (_, failed) = otel.spans()
    assert failed.status.status_code == StatusCode.ERROR
    assert dict(failed.attributes or {})["error.type"] == caught.value.code
    failed_key = {k for k in otel.durations() if ("error.type", caught.value.code) in k}
    assert len(failed_key) == 1


async def test_a_statement_span_is_a_child_of_the_callers_span(make_db: MakeDb, otel: Otel) -> None:
    db = make_db([orders], RING)
    await db.migrate()
    with otel.tracer.start_as_current_span("request") as parent:
        await db.orders.count()
    (child, outer) = otel.spans()
    assert child.parent is not None
    assert child.parent.span_id == parent.get_span_context().span_id
    assert outer.name == "request"
