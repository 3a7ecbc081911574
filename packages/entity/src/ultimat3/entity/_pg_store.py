"""The Postgres store: every statement composed with ``psycopg.sql`` (identifiers quoted,
values parameters), on the ambient connection when one is bound, else on a pooled one."""

from __future__ import annotations

import uuid as _uuid
from collections.abc import AsyncIterator, Callable, Sequence
from contextlib import asynccontextmanager
from datetime import UTC, datetime
from decimal import Decimal
from typing import Any
from zoneinfo import ZoneInfo

import psycopg
from psycopg import sql
from psycopg.rows import dict_row, tuple_row
from psycopg.types.json import Jsonb
from psycopg_pool import AsyncConnectionPool

from ultimat3.core import XError, current_connection

from ._entity import SOFT_DELETE_COLUMN, Entity
from ._handle import UPSERT_CHUNK
from ._series import SUB_DAY_UNITS, SeriesPoint
from ._store import Filter, Order
from ._tenancy import tenant_collision

Conn = psycopg.AsyncConnection[Any]

_CMP = {"eq": "=", "ne": "<>", "lt": "<", "lte": "<=", "gt": ">", "gte": ">=", "like": "LIKE"}


class PgStore:
    """Statements for one schema; ``pool`` is opened on first use."""

    def __init__(self, pool: Callable[[], Any], schema: str | None) -> None:
        self._pool = pool
        self.schema = schema
        self._texts: dict[tuple[Any, ...], str] = {}

    def ident(self, name: str) -> sql.Identifier:
        return sql.Identifier(self.schema, name) if self.schema else sql.Identifier(name)

    @asynccontextmanager
    async def connection(self, *, atomic: bool = False) -> AsyncIterator[Conn]:
        """The ambient connection (joining its transaction; ``atomic``: a savepoint), or one
        from the pool (``atomic``: its own transaction)."""
        ambient = current_connection()
        if isinstance(ambient, psycopg.AsyncConnection):
            if atomic:
                async with ambient.transaction():
                    yield ambient
            else:
                yield ambient
            return
        pool: AsyncConnectionPool[Any] = await self._pool()
        async with pool.connection() as conn:
            if atomic:
                async with conn.transaction():
                    yield conn
            else:
                yield conn

    # --- encoding --------------------------------------------------------------------------

    def _param(self, ent: Entity, column: str, value: Any) -> Any:
        if value is None:
            return None
        col = ent.columns.get(column)
        if col is None or col.is_sealed:
            return value
        if col.kind == "uuid":
            return _uuid.UUID(value)
        if col.kind == "jsonb":
            return Jsonb(value)
        return value

    def _decode(self, ent: Entity, row: dict[str, Any]) -> dict[str, Any]:
        for name, col in ent.columns.items():
            v = row.get(name)
            if v is None:
                continue
            if col.is_sealed:
                row[name] = bytes(v)
            elif col.kind == "uuid":
                row[name] = str(v)
            elif col.kind == "timestamp":
                row[name] = v.astimezone(UTC)
            elif col.kind == "numeric" and not isinstance(v, Decimal):
                row[name] = Decimal(v)
        if ent.soft_delete and row.get(SOFT_DELETE_COLUMN) is not None:
            row[SOFT_DELETE_COLUMN] = row[SOFT_DELETE_COLUMN].astimezone(UTC)
        return row

    def _where(self, ent: Entity, filters: Sequence[Filter]) -> tuple[sql.Composable, list[Any]]:
        if not filters:
            return sql.SQL(""), []
        parts: list[sql.Composable] = []
        params: list[Any] = []
        for f in filters:
            col = sql.Identifier(f.column)
            text = ent.columns.get(f.column) is not None and ent.columns[f.column].kind == "text"
            lhs: sql.Composable = sql.SQL('{} COLLATE "C"').format(col) if text else col
            if f.op == "is_null":
                parts.append(sql.SQL("{} IS NULL").format(col))
            elif f.op == "not_null":
                parts.append(sql.SQL("{} IS NOT NULL").format(col))
            elif f.op == "in":
                parts.append(sql.SQL("{} = ANY(%s)").format(col))
                params.append([self._param(ent, f.column, v) for v in f.value])
            elif f.op == "like":
                parts.append(sql.SQL("{} LIKE %s").format(col))
                params.append(f.value)
            else:
                parts.append(sql.SQL("{} {} %s").format(lhs, sql.SQL(_CMP[f.op])))
                params.append(self._param(ent, f.column, f.value))
        return sql.SQL(" WHERE ") + sql.SQL(" AND ").join(parts), params

    # --- statements ------------------------------------------------------------------------

    def _type(self, ent: Entity, column: str) -> str:
        col = ent.columns.get(column)
        return "timestamptz" if col is None else col.sql_type  # None: deleted_at

    def _unnest(self, ent: Entity, cols: list[str]) -> sql.Composed:
        """``SELECT * FROM unnest(%s::type[], ...)``: one array parameter per column, so a
        1,000-row statement has as many parameters as columns (and one text, cached)."""
        arrays = sql.SQL(", ").join(
            # a uuid column travels as text[] (cast on the server: no UUID object per value)
            sql.SQL("%b::text[]::uuid[]" if self._type(ent, c) == "uuid" else "%b::{}[]").format(
                sql.SQL(self._type(ent, c))
            )
            for c in cols
        )
        return sql.SQL("SELECT * FROM unnest({})").format(arrays)

    def _arrays(self, ent: Entity, cols: list[str], rows: Sequence[dict[str, Any]]) -> list[Any]:
        out: list[Any] = []
        for c in cols:
            col = ent.columns.get(c)
            if col is not None and col.kind == "jsonb" and not col.is_sealed:
                out.append([None if r[c] is None else Jsonb(r[c]) for r in rows])
            else:  # uuid as its text (see _unnest); the rest as normalized
                out.append([r[c] for r in rows])
        return out

    def _text(self, key: tuple[Any, ...], conn: Conn, build: Callable[[], sql.Composed]) -> str:
        text = self._texts.get(key)
        if text is None:
            text = self._texts[key] = build().as_string(conn)
        return text

    async def insert(self, ent: Entity, rows: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
        cols = list(rows[0])

        def build() -> sql.Composed:
            return sql.SQL("INSERT INTO {} ({}) {} RETURNING *").format(
                self.ident(ent.name),
                sql.SQL(", ").join(map(sql.Identifier, cols)),
                self._unnest(ent, cols),
            )

        out: list[dict[str, Any]] = []
        async with self.connection(atomic=len(rows) > UPSERT_CHUNK) as conn:
            stmt = self._text(("insert", ent.name, *cols), conn, build)
            for start in range(0, len(rows), UPSERT_CHUNK):
                chunk = rows[start : start + UPSERT_CHUNK]
                out.extend(await self._fetch(conn, stmt, self._arrays(ent, cols, chunk), ent))
        return out

    async def upsert(
        self,
        ent: Entity,
        rows: Sequence[dict[str, Any]],
        conflict: tuple[str, ...],
        update: tuple[str, ...],
        guard: tuple[str, Any] | None,
    ) -> int:
        cols = list(rows[0])
        alias = sql.Identifier(ent.name)

        def build() -> sql.Composed:
            action: sql.Composable
            if update:
                action = sql.SQL("DO UPDATE SET {}").format(
                    sql.SQL(", ").join(
                        sql.SQL("{0} = EXCLUDED.{0}").format(sql.Identifier(c)) for c in update
                    )
                )
                if guard is not None:
                    action += sql.SQL(" WHERE {}.{} = EXCLUDED.{}").format(
                        alias, sql.Identifier(guard[0]), sql.Identifier(guard[0])
                    )
            else:
                action = sql.SQL("DO NOTHING")
            return sql.SQL("INSERT INTO {} AS {} ({}) {} ON CONFLICT ({}) {}").format(
                self.ident(ent.name),
                alias,
                sql.SQL(", ").join(map(sql.Identifier, cols)),
                self._unnest(ent, cols),
                sql.SQL(", ").join(map(sql.Identifier, conflict)),
                action,
            )

        key = ("upsert", ent.name, tuple(cols), conflict, update, guard is not None)
        written = 0
        async with self.connection(atomic=True) as conn:
            stmt = self._text(key, conn, build)
            for start in range(0, len(rows), UPSERT_CHUNK):
                chunk = rows[start : start + UPSERT_CHUNK]
                written += await self._rowcount(conn, stmt, self._arrays(ent, cols, chunk), ent)
            if guard is not None and written < len(rows):
                # raised inside the block: the transaction (or savepoint) rolls every chunk back
                raise tenant_collision(ent, len(rows) - written, conflict)
        return written

    async def select(
        self, ent: Entity, filters: Sequence[Filter], order: Sequence[Order], limit: int | None
    ) -> list[dict[str, Any]]:
        where, params = self._where(ent, filters)
        stmt = sql.SQL("SELECT * FROM {}{}").format(self.ident(ent.name), where)
        if order:
            stmt += sql.SQL(" ORDER BY ") + sql.SQL(", ").join(self._order(ent, o) for o in order)
        if limit is not None:
            stmt += sql.SQL(" LIMIT %s")
            params.append(limit)
        async with self.connection() as conn:
            return await self._fetch(conn, stmt, params, ent)

    def _order(self, ent: Entity, o: Order) -> sql.Composable:
        col = ent.columns.get(o.column)
        text = col is not None and col.kind == "text"
        ident: sql.Composable = sql.Identifier(o.column)
        if text:
            ident = sql.SQL('{} COLLATE "C"').format(ident)
        return sql.SQL("{} DESC NULLS FIRST" if o.desc else "{} ASC NULLS LAST").format(ident)

    async def count(self, ent: Entity, filters: Sequence[Filter]) -> int:
        where, params = self._where(ent, filters)
        stmt = sql.SQL("SELECT count(*) FROM {}{}").format(self.ident(ent.name), where)
        async with self.connection() as conn:
            rows = await self._tuples(conn, stmt, params, ent)
        return int(rows[0][0])

    async def update(self, ent: Entity, filters: Sequence[Filter], values: dict[str, Any]) -> int:
        where, params = self._where(ent, filters)
        sets = sql.SQL(", ").join(sql.SQL("{} = %s").format(sql.Identifier(c)) for c in values)
        stmt = sql.SQL("UPDATE {} SET {}{}").format(self.ident(ent.name), sets, where)
        params = [self._param(ent, c, v) for c, v in values.items()] + params
        async with self.connection() as conn:
            return await self._rowcount(conn, stmt, params, ent)

    async def delete(self, ent: Entity, filters: Sequence[Filter]) -> int:
        where, params = self._where(ent, filters)
        stmt = sql.SQL("DELETE FROM {}{}").format(self.ident(ent.name), where)
        async with self.connection() as conn:
            return await self._rowcount(conn, stmt, params, ent)

    async def series(
        self,
        ent: Entity,
        filters: Sequence[Filter],
        on: str,
        unit: str,
        zone: str,
        value: tuple[str, str | None],
    ) -> list[SeriesPoint]:
        where, params = self._where(ent, filters)
        col = sql.Identifier(on)
        if unit in SUB_DAY_UNITS:
            # the wall-clock offset into the unit, taken off the instant: exact in a repeated
            # hour (a fall back), where a local-time round trip would pick one of two instants
            bucket = sql.SQL(
                "{c} - (({c} AT TIME ZONE %s) - date_trunc(%s, {c} AT TIME ZONE %s))"
            ).format(c=col)
            bparams: list[Any] = [zone, unit, zone]
        else:
            bucket = sql.SQL("date_trunc(%s, {}, %s)").format(col)
            bparams = [unit, zone]
        agg = (
            sql.SQL("count(*)")
            if value[0] == "count"
            else sql.SQL("sum({})").format(sql.Identifier(str(value[1])))
        )
        stmt = sql.SQL("SELECT {} AS bucket, {} AS value FROM {}{} GROUP BY 1 ORDER BY 1").format(
            bucket, agg, self.ident(ent.name), where
        )
        if unit not in SUB_DAY_UNITS:
            # date_trunc groups by the local date correctly, but where local midnight happens
            # twice (a zone falling back AT midnight: Havana, Cairo, Beirut) it labels the group
            # with the later instant, after the rows of the first pass. The label is the
            # earliest instant whose local time is that midnight: fixed once per bucket.
            stmt = sql.SQL(
                "SELECT (SELECT min(v.c) FROM (VALUES (g.bucket), "
                "(g.bucket - interval '30 minutes'), (g.bucket - interval '1 hour'), "
                "(g.bucket - interval '2 hours')) AS v(c) "
                "WHERE (v.c AT TIME ZONE %s) = (g.bucket AT TIME ZONE %s)) AS bucket, g.value "
                "FROM ({}) AS g ORDER BY 1"
            ).format(stmt)
            bparams = [zone, zone, *bparams]
        async with self.connection() as conn:
            rows = await self._tuples(conn, stmt, [*bparams, *params], ent)
        tz = ZoneInfo(zone)
        kind = ent.columns[value[1]].kind if value[1] else "bigint"
        return [SeriesPoint(_aware(b).astimezone(tz), _number(v, kind)) for b, v in rows]

    async def refresh(self, ent: Entity, concurrently: bool) -> None:
        stmt = sql.SQL("REFRESH MATERIALIZED VIEW {}{}").format(
            sql.SQL("CONCURRENTLY ") if concurrently else sql.SQL(""), self.ident(ent.name)
        )
        async with self.connection() as conn:
            await self._rowcount(conn, stmt, [], ent)

    # --- execution -------------------------------------------------------------------------

    async def _fetch(
        self, conn: Conn, stmt: str | sql.Composed | sql.SQL, params: list[Any], ent: Entity
    ) -> list[dict[str, Any]]:
        try:
            async with conn.cursor(row_factory=dict_row) as cur:
                await cur.execute(stmt, params)
                rows = await cur.fetchall()
        except psycopg.Error as exc:
            raise wrap_error(exc, ent) from exc
        return [self._decode(ent, r) for r in rows]

    async def _tuples(
        self, conn: Conn, stmt: str | sql.Composed | sql.SQL, params: list[Any], ent: Entity
    ) -> list[tuple[Any, ...]]:
        try:
            async with conn.cursor(row_factory=tuple_row) as cur:
                await cur.execute(stmt, params)
                return await cur.fetchall()
        except psycopg.Error as exc:
            raise wrap_error(exc, ent) from exc

    async def _rowcount(
        self, conn: Conn, stmt: str | sql.Composed | sql.SQL, params: list[Any], ent: Entity
    ) -> int:
        try:
            async with conn.cursor() as cur:
                await cur.execute(stmt, params)
                return max(cur.rowcount, 0)
        except psycopg.Error as exc:
            raise wrap_error(exc, ent) from exc


def _aware(value: datetime) -> datetime:
    return value if value.tzinfo is not None else value.replace(tzinfo=UTC)


def _number(value: Any, kind: str) -> int | Decimal | None:
    if value is None:
        return None
    if kind == "numeric":
        return Decimal(value)
    return int(value)


def wrap_error(exc: psycopg.Error, ent: Entity) -> XError:
    """A psycopg error as an ``XError`` naming the entity (the cause is kept)."""
    diag = exc.diag
    detail = diag.message_detail or diag.message_primary or str(exc)
    meta = {"entity": ent.name, "sqlstate": exc.sqlstate}
    if isinstance(exc, psycopg.errors.UniqueViolation):
        return XError(
            "X_ENTITY_CONFLICT",
            f"{ent.name}: a unique key is taken ({detail})",
            fix="upsert_all(rows, on_conflict=[...]) to overwrite, or change the key",
            meta=meta,
        )
    if isinstance(exc, psycopg.errors.LockNotAvailable):
        return XError("X_DB_LOCK_TIMEOUT", f"{ent.name}: {detail}", meta=meta)
    if isinstance(exc, psycopg.errors.UndefinedTable | psycopg.errors.UndefinedColumn):
        return XError(
            "X_ENTITY_SCHEMA_DRIFT",
            f"{ent.name}: {detail} — the database lacks what the declaration has",
            fix="await db.migrate()",
            meta=meta,
        )
    if isinstance(exc, psycopg.errors.IntegrityError):
        return XError(
            "X_ENTITY_VALUE_INVALID",
            f"{ent.name}: {detail}",
            fix="write a row the table's constraints accept",
            meta=meta,
        )
    if isinstance(exc, psycopg.OperationalError):
        return XError("X_DRIVER_UNAVAILABLE", f"{ent.name}: {detail}", meta=meta)
    return XError("X_INVARIANT", f"{ent.name}: {type(exc).__name__}: {detail}", meta=meta)
