"""``memory_database(entities)``: the same handles in memory, for an app's tests. It answers as
the Postgres database does (the conformance suite in ``ultimat3.entity.testing`` holds both to
it): uniqueness, upsert, tenancy, soft delete, series, sealing. It does not enforce foreign keys
and cannot run a view's SQL (a view reads empty; ``refresh`` is ``X_NOT_IMPLEMENTED``)."""

from __future__ import annotations

import copy
import re
from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager
from datetime import UTC
from typing import Any

from ultimat3.core import XError

from ._database import check_entities
from ._entity import Entity
from ._handle import Table
from ._sealing import KeyRing
from ._series import SeriesPoint, bucket_of, check_zone
from ._store import Filter, Order
from ._telemetry import TracedStore
from ._tenancy import tenant_collision

Row = dict[str, Any]


def _like(pattern: str) -> re.Pattern[str]:
    out, i = [], 0
    while i < len(pattern):
        ch = pattern[i]
        if ch == "\\" and i + 1 < len(pattern):
            out.append(re.escape(pattern[i + 1]))
            i += 2
            continue
        out.append(".*" if ch == "%" else "." if ch == "_" else re.escape(ch))
        i += 1
    return re.compile("".join(out), re.DOTALL)


def _match(row: Row, f: Filter) -> bool:
    v = row.get(f.column)
    if f.op == "is_null":
        return v is None
    if f.op == "not_null":
        return v is not None
    if v is None:
        return False
    if f.op == "in":
        return v in f.value
    if f.op == "like":
        return _like(f.value).fullmatch(v) is not None
    w = f.value
    return bool(
        {
            "eq": lambda: v == w,
            "ne": lambda: v != w,
            "lt": lambda: v < w,
            "lte": lambda: v <= w,
            "gt": lambda: v > w,
            "gte": lambda: v >= w,
        }[f.op]()
    )


class _Desc:
    __slots__ = ("v",)

    def __init__(self, v: Any) -> None:
        self.v = v

    def __lt__(self, other: _Desc) -> bool:
        return bool(other.v < self.v)

    def __eq__(self, other: object) -> bool:
        return isinstance(other, _Desc) and bool(self.v == other.v)


def _sort_key(order: Sequence[Order]) -> Any:
    def key(row: Row) -> tuple[Any, ...]:
        parts: list[Any] = []
        for o in order:
            v = row.get(o.column)
            if o.desc:  # NULLS FIRST
                parts.append((0, None) if v is None else (1, _Desc(v)))
            else:  # NULLS LAST
                parts.append((1, None) if v is None else (0, v))
        return tuple(parts)

    return key


class MemoryStore:
    """Rows per entity in lists of dicts."""

    def __init__(self, entities: dict[str, Entity]) -> None:
        self.rows: dict[str, list[Row]] = {name: [] for name in entities}

    def _taken(self, ent: Entity, rows: list[Row], row: Row, skip: Row | None = None) -> str | None:
        for cols in ent.unique_sets():
            key = tuple(row[c] for c in sorted(cols))
            if any(v is None for v in key):
                continue  # NULLs are distinct
            for other in rows:
                if other is not skip and tuple(other[c] for c in sorted(cols)) == key:
                    return ", ".join(sorted(cols))
        return None

    def _conflict(self, ent: Entity, cols: str) -> XError:
        return XError(
            "X_ENTITY_CONFLICT",
            f"{ent.name}: a unique key is taken ({cols})",
            fix="upsert_all(rows, on_conflict=[...]) to overwrite, or change the key",
            meta={"entity": ent.name},
        )

    async def insert(self, ent: Entity, rows: Sequence[Row]) -> list[Row]:
        table = list(self.rows[ent.name])
        for row in rows:
            taken = self._taken(ent, table, row)
            if taken:
                raise self._conflict(ent, taken)
            table.append(dict(row))
        self.rows[ent.name] = table
        return [copy.deepcopy(r) for r in rows]

    async def upsert(
        self,
        ent: Entity,
        rows: Sequence[Row],
        conflict: tuple[str, ...],
        update: tuple[str, ...],
        guard: tuple[str, Any] | None,
    ) -> int:
        table = [dict(r) for r in self.rows[ent.name]]
        written = collided = 0
        for row in rows:
            key = tuple(row[c] for c in conflict)
            existing = None
            if all(v is not None for v in key):
                existing = next((r for r in table if tuple(r[c] for c in conflict) == key), None)
            if existing is None:
                taken = self._taken(ent, table, row)
                if taken:
                    raise self._conflict(ent, taken)
                table.append(dict(row))
                written += 1
            elif not update:
                continue
            elif guard is not None and existing[guard[0]] != row[guard[0]]:
                collided += 1
            else:
                merged = {**existing, **{c: row[c] for c in update}}
                taken = self._taken(ent, table, merged, skip=existing)
                if taken:
                    raise self._conflict(ent, taken)
                existing.update(merged)
                written += 1
        if collided:
            raise tenant_collision(ent, collided, conflict)
        self.rows[ent.name] = table
        return written

    async def select(
        self, ent: Entity, filters: Sequence[Filter], order: Sequence[Order], limit: int | None
    ) -> list[Row]:
        got = [r for r in self.rows[ent.name] if all(_match(r, f) for f in filters)]
        if order:
            got.sort(key=_sort_key(order))
        if limit is not None:
            got = got[:limit]
        return [copy.deepcopy(r) for r in got]

    async def count(self, ent: Entity, filters: Sequence[Filter]) -> int:
        return sum(1 for r in self.rows[ent.name] if all(_match(r, f) for f in filters))

    async def update(self, ent: Entity, filters: Sequence[Filter], values: dict[str, Any]) -> int:
        table = [dict(r) for r in self.rows[ent.name]]
        n = 0
        for row in table:
            if all(_match(row, f) for f in filters):
                merged = {**row, **values}
                taken = self._taken(ent, table, merged, skip=row)
                if taken:
                    raise self._conflict(ent, taken)
                row.update(copy.deepcopy(values))
                n += 1
        self.rows[ent.name] = table
        return n

    async def delete(self, ent: Entity, filters: Sequence[Filter]) -> int:
        before = self.rows[ent.name]
        keep = [r for r in before if not all(_match(r, f) for f in filters)]
        self.rows[ent.name] = keep
        return len(before) - len(keep)

    async def series(
        self,
        ent: Entity,
        filters: Sequence[Filter],
        on: str,
        unit: str,
        zone: str,
        value: tuple[str, str | None],
    ) -> list[SeriesPoint]:
        tz = check_zone(zone)
        buckets: dict[Any, list[Row]] = {}
        for row in self.rows[ent.name]:
            if row.get(on) is None or not all(_match(row, f) for f in filters):
                continue
            # keyed in UTC: two wall-clock-equal buckets of a repeated hour stay apart
            buckets.setdefault(bucket_of(row[on], unit, tz).astimezone(UTC), []).append(row)
        points = []
        for bucket in sorted(buckets):
            rows = buckets[bucket]
            local = bucket.astimezone(tz)
            if value[0] == "count":
                points.append(SeriesPoint(local, len(rows)))
                continue
            nums = [r[str(value[1])] for r in rows if r[str(value[1])] is not None]
            points.append(SeriesPoint(local, sum(nums) if nums else None))
        return points

    async def refresh(self, ent: Entity, concurrently: bool) -> None:
        raise XError(
            "X_NOT_IMPLEMENTED",
            f"{ent.name}.refresh: the memory database cannot run a view's SQL",
            fix="test views against Postgres",
        )


class MemoryDatabase:
    """The memory twin of :class:`~ultimat3.entity.Database`."""

    def __init__(self, entities: Sequence[Entity], *, key_ring: KeyRing | None) -> None:
        self.entities = check_entities(entities, key_ring)
        self.schema: str | None = None
        self.key_ring = key_ring
        self.store = MemoryStore(self.entities)
        traced = TracedStore(self.store, system="memory", namespace=None)
        self._tables = {n: Table(e, traced, key_ring) for n, e in self.entities.items()}
        self._migrated = False

    def __getattr__(self, name: str) -> Table:
        tables = self.__dict__.get("_tables", {})
        if name in tables:
            return tables[name]  # type: ignore[no-any-return]
        raise AttributeError(f"database has no entity {name!r} (declared: {sorted(tables)})")

    def table(self, name: str) -> Table:
        try:
            return self._tables[name]
        except KeyError:
            raise XError(
                "X_CONFIG_INVALID",
                f"database: no entity {name!r}",
                fix=f"one of {sorted(self._tables)}",
            ) from None

    def __getitem__(self, name: str) -> Table:
        return self.table(name)

    async def migrate(self) -> dict[str, list[str]]:
        """Nothing to create in memory; answers what Postgres would have created first time."""
        if self._migrated:
            return {"created": []}
        self._migrated = True
        return {"created": [f"table {n}" for n, e in self.entities.items() if e.view is None]}

    @asynccontextmanager
    async def transaction(self) -> AsyncIterator[None]:
        """All or nothing: an exception leaving the block restores the rows as they were at
        its start (a nested block restores its own part — a savepoint). Not isolated from
        other tasks writing at the same time."""
        saved = copy.deepcopy(self.store.rows)
        try:
            yield None
        except BaseException:
            self.store.rows = saved
            raise

    async def close(self) -> None:
        return None

    async def __aenter__(self) -> MemoryDatabase:
        return self

    async def __aexit__(self, *exc: object) -> None:
        return None


def memory_database(
    entities: Sequence[Entity], *, key_ring: KeyRing | None = None
) -> MemoryDatabase:
    """The entities in memory: the same handle API, held to the same conformance suite."""
    return MemoryDatabase(entities, key_ring=key_ring)
