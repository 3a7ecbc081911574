"""OpenTelemetry for entity statements: one CLIENT span per statement a table handle sends, and
the ``db.client.operation.duration`` histogram, named after the database semantic conventions.

- Span ``"{OPERATION} {entity}"`` (``SELECT orders``, ``UPSERT orders``), kind CLIENT, with
  ``db.system.name`` (``postgresql`` / ``memory``), ``db.namespace`` (the schema, when one is
  set), ``db.collection.name``, ``db.operation.name``, ``db.operation.batch.size`` (rows given to
  a write of more than one), ``db.response.returned_rows`` (reads and inserts) or
  ``ultimat3.entity.rows_affected`` (update, delete, upsert). A failure sets the span's status
  to ERROR with ``error.type`` (the ``XError`` code, else the exception's class name).
- Histogram ``db.client.operation.duration`` (seconds) with ``db.system.name``,
  ``db.collection.name``, ``db.operation.name`` and, on a failure, ``error.type``.

Never a value: no query text, no parameters (a sealed column's plaintext, a tenant's data).
Both are no-ops until the app installs an OpenTelemetry SDK.
"""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable, Sequence
from typing import Any, Final, TypeVar

from opentelemetry.metrics import Histogram
from opentelemetry.trace import SpanKind, Status, StatusCode

from ultimat3.core import meter, tracer

from ._entity import Entity
from ._series import SeriesPoint
from ._store import Filter, Order, Store

T = TypeVar("T")
DURATION: Final = "db.client.operation.duration"
_histograms: dict[int, tuple[object, Histogram]] = {}
"""One histogram per meter, keyed by the meter's id WITH the meter held: an id alone may be
reused by a later meter once the first is collected (a new provider would then be handed the
old one's instrument, and record nothing)."""


def _duration() -> Histogram:
    m = meter()
    found = _histograms.get(id(m))
    if found is None or found[0] is not m:
        found = _histograms[id(m)] = (
            m,
            m.create_histogram(
                DURATION,
                unit="s",
                description="Duration of entity statements (one per handle call)",
            ),
        )
    return found[1]


def _error_type(exc: BaseException) -> str:
    code = getattr(exc, "code", None)
    return code if isinstance(code, str) else type(exc).__name__


class TracedStore:
    """A ``Store`` whose every statement is a span and a duration point."""

    def __init__(self, inner: Store, *, system: str, namespace: str | None) -> None:
        self._inner = inner
        self._system = system
        self._namespace = namespace

    async def _observe(
        self,
        operation: str,
        ent: Entity,
        call: Callable[[], Awaitable[T]],
        *,
        batch: int | None = None,
        returned: Callable[[T], int] | None = None,
        affected: Callable[[T], int] | None = None,
    ) -> T:
        base = {
            "db.system.name": self._system,
            "db.collection.name": ent.name,
            "db.operation.name": operation,
        }
        attributes: dict[str, Any] = dict(base)
        if self._namespace is not None:
            attributes["db.namespace"] = self._namespace
        if batch is not None and batch > 1:
            attributes["db.operation.batch.size"] = batch
        started = time.perf_counter()
        with tracer().start_as_current_span(
            f"{operation} {ent.name}",
            kind=SpanKind.CLIENT,
            attributes=attributes,
            record_exception=False,
            set_status_on_exception=False,
        ) as span:
            try:
                result = await call()
            except BaseException as exc:
                kind = _error_type(exc)
                span.set_attribute("error.type", kind)
                span.set_status(Status(StatusCode.ERROR, kind))
                _duration().record(time.perf_counter() - started, {**base, "error.type": kind})
                raise
            if returned is not None:
                span.set_attribute("db.response.returned_rows", returned(result))
            if affected is not None:
                span.set_attribute("ultimat3.entity.rows_affected", affected(result))
            _duration().record(time.perf_counter() - started, base)
            return result

    async def insert(self, ent: Entity, rows: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
        return await self._observe(
            "INSERT", ent, lambda: self._inner.insert(ent, rows), batch=len(rows), returned=len
        )

    async def upsert(
        self,
        ent: Entity,
        rows: Sequence[dict[str, Any]],
        conflict: tuple[str, ...],
        update: tuple[str, ...],
        guard: tuple[str, Any] | None,
    ) -> int:
        return await self._observe(
            "UPSERT",
            ent,
            lambda: self._inner.upsert(ent, rows, conflict, update, guard),
            batch=len(rows),
            affected=int,
        )

    async def select(
        self,
        ent: Entity,
        filters: Sequence[Filter],
        order: Sequence[Order],
        limit: int | None,
    ) -> list[dict[str, Any]]:
        return await self._observe(
            "SELECT", ent, lambda: self._inner.select(ent, filters, order, limit), returned=len
        )

    async def count(self, ent: Entity, filters: Sequence[Filter]) -> int:
        return await self._observe("COUNT", ent, lambda: self._inner.count(ent, filters))

    async def update(self, ent: Entity, filters: Sequence[Filter], values: dict[str, Any]) -> int:
        return await self._observe(
            "UPDATE", ent, lambda: self._inner.update(ent, filters, values), affected=int
        )

    async def delete(self, ent: Entity, filters: Sequence[Filter]) -> int:
        return await self._observe(
            "DELETE", ent, lambda: self._inner.delete(ent, filters), affected=int
        )

    async def series(
        self,
        ent: Entity,
        filters: Sequence[Filter],
        on: str,
        unit: str,
        zone: str,
        value: tuple[str, str | None],
    ) -> list[SeriesPoint]:
        return await self._observe(
            "SERIES",
            ent,
            lambda: self._inner.series(ent, filters, on, unit, zone, value),
            returned=len,
        )

    async def refresh(self, ent: Entity, concurrently: bool) -> None:
        await self._observe("REFRESH", ent, lambda: self._inner.refresh(ent, concurrently))

    def __getattr__(self, name: str) -> Any:  # the backend's extras (connection, ...)
        return getattr(self._inner, name)
