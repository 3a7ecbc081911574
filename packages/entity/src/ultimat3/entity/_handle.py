"""The table handle (``db.<entity>``) and its query: checks, tenancy, soft delete and sealing,
the same for every store, so the memory database answers as Postgres does."""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from ultimat3.core import XError, current_clock

from ._columns import Column
from ._entity import SOFT_DELETE_COLUMN, Entity
from ._sealing import KeyRing, Sealed
from ._series import SeriesPoint, check_unit, check_zone
from ._store import OPS, Filter, Order, Store
from ._tenancy import Scope, forbid_other_tenant, scope_of
from ._values import check_value

UPSERT_CHUNK = 1_000
"""Rows per ``upsert_all`` / ``insert_all`` statement."""

_DELETED_AT = Column("timestamp", is_nullable=True)


def _refuse_write(ent: Entity, what: str, why: str, fix: str) -> XError:
    return XError(
        "X_ENTITY_WRITE_REFUSED",
        f"{ent.name}.{what}: {why}",
        fix=fix,
        meta={"entity": ent.name},
    )


class Table:
    """The handle of one entity in one database."""

    def __init__(self, ent: Entity, store: Store, key_ring: KeyRing | None) -> None:
        self.entity = ent
        self._store = store
        self._ring = key_ring

    def __repr__(self) -> str:
        return f"Table({self.entity.name!r})"

    # --- writes ----------------------------------------------------------------------------

    async def insert(self, row: Mapping[str, Any]) -> dict[str, Any]:
        """Insert one row; answer it as stored (defaults filled, sealed columns readable)."""
        self._writable("insert")
        scope = scope_of(self.entity, "insert")
        stored = await self._store.insert(self.entity, [self._complete(row, scope, "insert")])
        return self._read(stored[0])

    async def insert_all(self, rows: Iterable[Mapping[str, Any]]) -> int:
        """Insert every row in one transaction (one statement per 1,000 rows); answer the count.
        Every row is checked before the first statement."""
        self._writable("insert_all")
        scope = scope_of(self.entity, "insert_all")
        complete = [self._complete(r, scope, "insert_all") for r in rows]
        if not complete:
            return 0
        return len(await self._store.insert(self.entity, complete))

    async def upsert_all(
        self, rows: Iterable[Mapping[str, Any]], *, on_conflict: Sequence[str]
    ) -> int:
        """Insert or update on ``on_conflict`` (a unique key's columns), one statement per
        1,000 rows in one transaction. Rows sharing a key inside the call: the last one wins
        (as if upserted one by one). The columns given are the columns an update overwrites."""
        ent = self.entity
        self._writable("upsert_all")
        if ent.append_only:
            raise _refuse_write(
                ent,
                "upsert_all",
                "the entity is append-only (an upsert may overwrite a row)",
                "insert_all(rows) instead",
            )
        conflict = tuple(on_conflict) if not isinstance(on_conflict, str) else (on_conflict,)
        if frozenset(conflict) not in ent.unique_sets():
            raise XError(
                "X_ENTITY_CONFLICT_UNCOVERED",
                f"{ent.name}.upsert_all: on_conflict={list(conflict)} — no unique index of "
                f"{ent.name!r} covers exactly these columns",
                fix=f"name the columns of a unique key: {[sorted(s) for s in ent.unique_sets()]}"
                ", or declare Index((...), unique=True)",
                meta={"entity": ent.name, "columns": list(conflict)},
            )
        scope = scope_of(ent, "upsert_all")
        given: tuple[str, ...] | None = None
        by_key: dict[tuple[Any, ...], dict[str, Any]] = {}
        for raw in rows:
            keys = tuple(sorted(raw))
            if given is None:
                given = keys
            elif keys != given:
                raise XError(
                    "X_ENTITY_VALUE_INVALID",
                    f"{ent.name}.upsert_all: rows give different columns ({list(given)} vs "
                    f"{list(keys)}); an update would overwrite the missing ones",
                    fix="give every row of one upsert_all the same columns",
                    meta={"entity": ent.name},
                )
            row = self._complete(raw, scope, "upsert_all")
            key = tuple(row[c] for c in conflict)
            by_key.pop(key, None)  # the last one wins, at its own position
            by_key[key] = row
        if not by_key or given is None:
            return 0
        if any(c not in given for c in conflict):
            missing = [c for c in conflict if c not in given and c != ent.tenant_column]
            if missing:
                raise XError(
                    "X_ENTITY_VALUE_INVALID",
                    f"{ent.name}.upsert_all: rows lack the conflict column(s) {missing}",
                    fix="give every on_conflict column in each row",
                    meta={"entity": ent.name},
                )
        update = tuple(c for c in ent.columns if c in given and c not in conflict)
        if ent.soft_delete:
            update = (*update, SOFT_DELETE_COLUMN)  # an upsert revives a soft-deleted row
        guard = (scope.column, scope.tenant) if scope.column is not None else None
        return await self._store.upsert(ent, list(by_key.values()), conflict, update, guard)

    # --- reads -----------------------------------------------------------------------------

    def where(self, **equal: Any) -> Query:
        """A query of the rows whose columns equal ``equal`` (``None`` matches NULL)."""
        q = Query(self, (), (), None, with_deleted=False)
        for column, value in equal.items():
            q = q.and_where(column, "eq", value)
        return q

    async def all(self) -> list[dict[str, Any]]:
        return await self.where().all()

    async def first(self) -> dict[str, Any] | None:
        return await self.where().first()

    async def count(self) -> int:
        return await self.where().count()

    async def refresh(self, *, concurrently: bool = False) -> None:
        """``refresh materialized view [concurrently]`` (a materialized view entity only)."""
        view = self.entity.view
        if view is None or not view.materialized:
            raise XError(
                "X_ENTITY_WRITE_REFUSED",
                f"{self.entity.name}.refresh: not a materialized view",
                fix="declare the entity with view=View(sql, materialized=True)",
                meta={"entity": self.entity.name},
            )
        await self._store.refresh(self.entity, concurrently)

    # --- internals -------------------------------------------------------------------------

    def _writable(self, what: str) -> None:
        if self.entity.view is not None:
            raise _refuse_write(self.entity, what, "the entity is a view", "write to its tables")

    def _complete(self, row: Mapping[str, Any], scope: Scope, what: str) -> dict[str, Any]:
        ent = self.entity
        if not isinstance(row, Mapping):
            raise XError(
                "X_ENTITY_VALUE_INVALID",
                f"{ent.name}.{what}: a row is a {type(row).__name__}, not a mapping",
                fix="pass dicts",
                meta={"entity": ent.name},
            )
        unknown = [k for k in row if k not in ent.columns]
        if unknown:
            raise XError(
                "X_ENTITY_VALUE_INVALID",
                f"{ent.name}.{what}: unknown column(s) {unknown}",
                fix=f"the columns are {list(ent.columns)}",
                meta={"entity": ent.name, "column": unknown[0]},
            )
        out: dict[str, Any] = {}
        for name, col in ent.columns.items():
            if name in row:
                value = check_value(ent.name, name, col, row[name])
            elif name == scope.column:
                value = scope.tenant
            elif col.has_default:
                default = col.default_value
                value = check_value(
                    ent.name, name, col, default() if callable(default) else default
                )
            elif col.is_nullable:
                value = None
            else:
                raise XError(
                    "X_ENTITY_VALUE_INVALID",
                    f"{ent.name}.{name}: missing, and the column has no default and is not "
                    "nullable",
                    fix=f"give {name} a value, or declare it .default(v) / .nullable()",
                    meta={"entity": ent.name, "column": name},
                )
            if name == scope.column:
                forbid_other_tenant(ent, scope, value, what)
            if col.is_sealed and value is not None:
                value = self._key_ring().seal(value, where=f"{ent.name}.{name}")
            out[name] = value
        if ent.soft_delete:
            out[SOFT_DELETE_COLUMN] = None
        return out

    def _key_ring(self) -> KeyRing:
        if self._ring is None:
            raise XError(
                "X_CONFIG_INVALID",
                f"{self.entity.name}: sealed columns {list(self.entity.sealed_columns)} need a "
                "key ring and the database has none",
                fix="database(dsn, entities, key_ring=KeyRing({'k1': key}))",
            )
        return self._ring

    def _read(self, row: dict[str, Any]) -> dict[str, Any]:
        for name in self.entity.sealed_columns:
            stored = row.get(name)
            if stored is not None:
                where = f"{self.entity.name}.{name}"
                row[name] = Sealed(self._key_ring().unseal(stored, where=where), column=where)
        return row

    def _column(self, name: str, what: str) -> Column:
        ent = self.entity
        if ent.soft_delete and name == SOFT_DELETE_COLUMN:
            return _DELETED_AT
        col = ent.columns.get(name)
        if col is None:
            raise XError(
                "X_ENTITY_QUERY_INVALID",
                f"{ent.name}.{what}: unknown column {name!r}",
                fix=f"the columns are {list(ent.all_columns)}",
                meta={"entity": ent.name, "column": name},
            )
        if col.is_sealed:
            raise XError(
                "X_ENTITY_QUERY_INVALID",
                f"{ent.name}.{what}: {name!r} is sealed (its ciphertext differs on every write, "
                "so it cannot be compared or ordered)",
                fix="query by another column",
                meta={"entity": ent.name, "column": name},
            )
        return col


class Query:
    """An immutable query over one table; each method answers a new query or runs it."""

    def __init__(
        self,
        table: Table,
        filters: tuple[Filter, ...],
        order: tuple[Order, ...],
        limit: int | None,
        *,
        with_deleted: bool,
    ) -> None:
        self._t = table
        self._filters = filters
        self._order = order
        self._limit = limit
        self._with_deleted = with_deleted

    def _copy(self, **kw: Any) -> Query:
        args: dict[str, Any] = {
            "filters": self._filters,
            "order": self._order,
            "limit": self._limit,
            "with_deleted": self._with_deleted,
        }
        args.update(kw)
        return Query(
            self._t,
            args["filters"],
            args["order"],
            args["limit"],
            with_deleted=args["with_deleted"],
        )

    def and_where(self, column: str, op: str, value: Any) -> Query:
        """Add ``column op value`` (``op`` in eq ne lt lte gt gte in like)."""
        t = self._t
        col = t._column(column, "where")
        ent = t.entity.name
        if op not in OPS:
            raise XError(
                "X_ENTITY_QUERY_INVALID",
                f"{ent}.where: operator {op!r} is not one of {list(OPS)}",
                fix="and_where('total', 'gte', 100)",
                meta={"entity": ent, "column": column},
            )
        loose = Column(col.kind, is_nullable=True)
        f: Filter
        if op in ("eq", "ne") and value is None:
            f = Filter(column, "is_null" if op == "eq" else "not_null")
        elif op == "in":
            if isinstance(value, str | bytes) or not isinstance(value, Iterable):
                raise XError(
                    "X_ENTITY_QUERY_INVALID",
                    f"{ent}.where: {column} in needs a list",
                    fix="and_where('id', 'in', [a, b])",
                    meta={"entity": ent, "column": column},
                )
            values = tuple(check_value(ent, column, col, v) for v in value)
            f = Filter(column, "in", values)
        elif op == "like":
            if col.kind != "text" or not isinstance(value, str):
                raise XError(
                    "X_ENTITY_QUERY_INVALID",
                    f"{ent}.where: like needs a text column and a str pattern",
                    fix="and_where('title', 'like', 'post %')",
                    meta={"entity": ent, "column": column},
                )
            f = Filter(column, "like", check_value(ent, column, loose, value))
        else:
            if value is None:
                raise XError(
                    "X_ENTITY_QUERY_INVALID",
                    f"{ent}.where: {column} {op} None compares with NULL (never true)",
                    fix="use eq/ne None for IS NULL / IS NOT NULL",
                    meta={"entity": ent, "column": column},
                )
            f = Filter(column, op, check_value(ent, column, loose, value))  # type: ignore[arg-type]
        return self._copy(filters=(*self._filters, f))

    def order_by(self, column: str, *, desc: bool = False) -> Query:
        """Order by ``column`` (then by the earlier orders; NULLs last ascending, first
        descending; text in code-point order)."""
        self._t._column(column, "order_by")
        return self._copy(order=(*self._order, Order(column, desc)))

    def limit(self, n: int) -> Query:
        if isinstance(n, bool) or not isinstance(n, int) or n < 0:
            raise XError(
                "X_ENTITY_QUERY_INVALID", f"{self._t.entity.name}.limit({n!r})", fix="limit(100)"
            )
        return self._copy(limit=n)

    def with_deleted(self) -> Query:
        """Include soft-deleted rows (a soft-delete entity's reads hide them by default)."""
        return self._copy(with_deleted=True)

    # --- running ---------------------------------------------------------------------------

    def _scoped(self, what: str) -> list[Filter]:
        ent = self._t.entity
        scope = scope_of(ent, what)
        filters = list(self._filters)
        if scope.column is not None:
            filters.append(Filter(scope.column, "eq", scope.tenant))
        if ent.soft_delete and not self._with_deleted:
            filters.append(Filter(SOFT_DELETE_COLUMN, "is_null"))
        return filters

    def _ordering(self) -> list[Order]:
        pk = self._t.entity.primary_key
        return [*self._order, *(Order(c) for c in pk if c not in {o.column for o in self._order})]

    async def all(self) -> list[dict[str, Any]]:
        """Every matching row (ordered as asked, then by primary key)."""
        ent = self._t.entity
        rows = await self._t._store.select(ent, self._scoped("all"), self._ordering(), self._limit)
        return [self._t._read(r) for r in rows]

    async def first(self) -> dict[str, Any] | None:
        rows = await self._copy(limit=1 if self._limit is None else min(1, self._limit)).all()
        return rows[0] if rows else None

    async def count(self) -> int:
        return await self._t._store.count(self._t.entity, self._scoped("count"))

    async def update(self, **values: Any) -> int:
        """Set ``values`` on every matching row; answer how many."""
        t, ent = self._t, self._t.entity
        t._writable("update")
        if ent.append_only:
            raise _refuse_write(ent, "update", "the entity is append-only", "insert a new row")
        if not values:
            raise XError(
                "X_ENTITY_QUERY_INVALID",
                f"{ent.name}.update: no values",
                fix="update(status='paid')",
            )
        if self._limit is not None or self._order:
            raise XError(
                "X_ENTITY_QUERY_INVALID",
                f"{ent.name}.update: a limit or order does not apply to an update",
                fix="narrow it with where",
            )
        scope = scope_of(ent, "update")
        checked: dict[str, Any] = {}
        for name, value in values.items():
            col = ent.columns.get(name)
            if col is None:
                raise XError(
                    "X_ENTITY_VALUE_INVALID",
                    f"{ent.name}.update: unknown column {name!r}",
                    fix=f"the columns are {list(ent.columns)}",
                    meta={"entity": ent.name, "column": name},
                )
            v = check_value(ent.name, name, col, value)
            if name == scope.column:
                forbid_other_tenant(ent, scope, v, "update")
            if col.is_sealed and v is not None:
                v = t._key_ring().seal(v, where=f"{ent.name}.{name}")
            checked[name] = v
        return await t._store.update(ent, self._scoped("update"), checked)

    async def delete(self) -> int:
        """Delete every matching row (a soft-delete entity: set ``deleted_at``); answer how many.
        Refused on an append-only entity."""
        t, ent = self._t, self._t.entity
        t._writable("delete")
        if ent.append_only:
            raise _refuse_write(
                ent,
                "delete",
                "the entity is append-only; its rows are never deleted",
                "keep the row; record a reversal as a new row",
            )
        if self._limit is not None or self._order:
            raise XError(
                "X_ENTITY_QUERY_INVALID",
                f"{ent.name}.delete: a limit or order does not apply to a delete",
                fix="narrow it with where",
            )
        filters = self._scoped("delete")
        if ent.soft_delete and not self._with_deleted:
            return await t._store.update(ent, filters, {SOFT_DELETE_COLUMN: current_clock().now()})
        # a hard delete: a plain entity, or with_deleted() on a soft-delete one (a purge)
        return await t._store.delete(ent, filters)

    async def series(
        self,
        *,
        on: str,
        unit: str,
        time_zone: str = "UTC",
        value: str | tuple[str, str] = "count",
    ) -> list[SeriesPoint]:
        """Matching rows per ``unit`` of ``on`` in ``time_zone``: one point per non-empty bucket,
        oldest first, each bucket the first instant of its unit in that zone."""
        ent = self._t.entity
        col = self._t._column(on, "series")
        if col.kind != "timestamp":
            raise XError(
                "X_ENTITY_QUERY_INVALID",
                f"{ent.name}.series: on={on!r} is a {col.kind}() column, not timestamp()",
                fix="series(on='created_at', ...)",
                meta={"entity": ent.name, "column": on},
            )
        check_unit(unit)
        check_zone(time_zone)
        agg: tuple[str, str | None]
        if value == "count":
            agg = ("count", None)
        elif isinstance(value, tuple) and len(value) == 2 and value[0] == "sum":
            summed = self._t._column(value[1], "series")
            if summed.kind not in ("integer", "bigint", "numeric"):
                raise XError(
                    "X_ENTITY_QUERY_INVALID",
                    f"{ent.name}.series: sum over {value[1]!r}, a {summed.kind}() column",
                    fix="value=('sum', 'amount') over a number column",
                    meta={"entity": ent.name, "column": value[1]},
                )
            agg = ("sum", value[1])
        else:
            raise XError(
                "X_ENTITY_QUERY_INVALID",
                f"{ent.name}.series: value={value!r}",
                fix="value='count' or value=('sum', 'amount')",
            )
        filters = [*self._scoped("series"), Filter(on, "not_null")]  # a NULL has no bucket
        return await self._t._store.series(ent, filters, on, unit, time_zone, agg)
