"""``migrate()``: create what is missing — schema, tables, columns, indexes, foreign keys,
views, materialized views, partitioned parents and their partitions — in one transaction under
an advisory lock; a column whose type changed is refused, naming the difference."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from psycopg import sql
from psycopg.types.json import Jsonb

from ultimat3.core import XError, current_clock, log_event

from ._columns import Column
from ._entity import SOFT_DELETE_COLUMN, Entity
from ._names import derived_name
from ._partition_math import next_start, partition_name, ranges
from ._pg_store import Conn, PgStore

_DELETED_AT = Column("timestamp", is_nullable=True)


def _columns(ent: Entity) -> list[tuple[str, Column]]:
    cols = list(ent.columns.items())
    if ent.soft_delete:
        cols.append((SOFT_DELETE_COLUMN, _DELETED_AT))
    return cols


def _column_ddl(name: str, col: Column) -> sql.Composable:
    parts: list[sql.Composable] = [sql.Identifier(name), sql.SQL(col.sql_type)]
    if not col.is_nullable:
        parts.append(sql.SQL("NOT NULL"))
    if col.has_default and not callable(col.default_value) and not col.is_sealed:
        default = col.default_value
        literal = Jsonb(default) if col.kind == "jsonb" else default
        parts.append(sql.SQL("DEFAULT {}").format(sql.Literal(literal)))
    return sql.SQL(" ").join(parts)


async def _existing(conn: Conn, schema: str) -> dict[str, dict[str, str]]:
    cur = await conn.execute(
        "SELECT c.table_name, c.column_name, c.udt_name FROM information_schema.columns c "
        "WHERE c.table_schema = %s",
        [schema],
    )
    found: dict[str, dict[str, str]] = {}
    for table, column, udt in await cur.fetchall():
        found.setdefault(table, {})[column] = udt
    return found


async def _relkinds(conn: Conn, schema: str) -> dict[str, str]:
    cur = await conn.execute(
        "SELECT c.relname, c.relkind FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace "
        "WHERE n.nspname = %s",
        [schema],
    )
    return {str(r[0]): str(r[1]) for r in await cur.fetchall()}


def _drift(ent: Entity, found: dict[str, str]) -> list[str]:
    out = []
    for name, col in _columns(ent):
        udt = found.get(name)
        if udt is not None and udt != col.udt_name:
            out.append(f"{ent.name}.{name}: declared {col.sql_type}, the database has {udt}")
    return out


async def migrate(store: PgStore, entities: Sequence[Entity]) -> dict[str, list[str]]:
    """Create what is missing; answer ``{"created": [...]}`` naming each thing created."""
    schema = store.schema or "public"
    created: list[str] = []
    async with store.connection(atomic=True) as conn:
        await conn.execute(
            "SELECT pg_advisory_xact_lock(hashtextextended(%s, 0))", [f"ultimat3.entity:{schema}"]
        )
        await conn.execute(sql.SQL("CREATE SCHEMA IF NOT EXISTS {}").format(sql.Identifier(schema)))
        await conn.execute(sql.SQL("SET LOCAL search_path TO {}").format(sql.Identifier(schema)))
        found = await _existing(conn, schema)
        kinds = await _relkinds(conn, schema)
        problems = [p for e in entities if e.name in found for p in _drift(e, found[e.name])]
        if problems:
            raise XError(
                "X_ENTITY_SCHEMA_DRIFT",
                "migrate: " + "; ".join(problems) + " — migrate() never changes a column's type",
                fix="write a migration of your own (new column, copy, swap), or restore the "
                "declared type",
                meta={"differences": problems},
            )
        tables = [e for e in entities if e.view is None]
        for ent in tables:
            created += await _table(store, conn, ent, found.get(ent.name), kinds)
        for ent in tables:
            created += await _foreign_keys(store, conn, ent)
        for ent in (e for e in entities if e.view is not None):
            created += await _view(store, conn, ent, kinds)
        for ent in entities:
            created += await _indexes(store, conn, ent, kinds)
        for ent in tables:
            if ent.partition_by is not None:
                created += await create_partitions(store, conn, ent, current_clock().now(), None)
    log_event("entity.migrate", schema=schema, created=len(created))
    return {"created": created}


async def _table(
    store: PgStore, conn: Conn, ent: Entity, found: dict[str, str] | None, kinds: dict[str, str]
) -> list[str]:
    table = store.ident(ent.name)
    if found is None:
        body: list[sql.Composable] = [_column_ddl(n, c) for n, c in _columns(ent)]
        if ent.primary_key:
            body.append(
                sql.SQL("PRIMARY KEY ({})").format(
                    sql.SQL(", ").join(map(sql.Identifier, ent.primary_key))
                )
            )
        stmt = sql.SQL("CREATE TABLE IF NOT EXISTS {} ({})").format(table, sql.SQL(", ").join(body))
        if ent.partition_by is not None:
            stmt += sql.SQL(" PARTITION BY RANGE ({})").format(
                sql.Identifier(ent.partition_by.column)
            )
        await conn.execute(stmt)
        return [f"table {ent.name}"]
    made = []
    for name, col in _columns(ent):
        if name in found:
            continue
        if not col.is_nullable and not (col.has_default and not callable(col.default_value)):
            raise XError(
                "X_ENTITY_SCHEMA_DRIFT",
                f"migrate: {ent.name}.{name} is new, not nullable and has no default; the "
                "table's existing rows would have no value",
                fix=f"declare {name} .nullable() or .default(v), or backfill it yourself",
                meta={"entity": ent.name, "column": name},
            )
        await conn.execute(
            sql.SQL("ALTER TABLE {} ADD COLUMN IF NOT EXISTS {}").format(
                table, _column_ddl(name, col)
            )
        )
        made.append(f"column {ent.name}.{name}")
    return made


async def _foreign_keys(store: PgStore, conn: Conn, ent: Entity) -> list[str]:
    made = []
    for name, col in ent.columns.items():
        ref = col.reference
        if ref is None:
            continue
        cname = derived_name(ent.name, name, suffix="fkey")
        cur = await conn.execute(
            "SELECT 1 FROM pg_constraint WHERE conname = %s AND conrelid = %s::regclass",
            [cname, store.ident(ent.name).as_string(conn)],
        )
        if await cur.fetchone():
            continue
        target = ref.target
        target_pk = target.primary_key if not isinstance(target, str) else ()
        stmt = sql.SQL(
            "ALTER TABLE {} ADD CONSTRAINT {} FOREIGN KEY ({}) REFERENCES {} {} ON DELETE {}"
        ).format(
            store.ident(ent.name),
            sql.Identifier(cname),
            sql.Identifier(name),
            store.ident(ref.target_name),
            sql.SQL("({})").format(sql.SQL(", ").join(map(sql.Identifier, target_pk)))
            if target_pk
            else sql.SQL(""),
            sql.SQL(ref.on_delete.upper()),
        )
        await conn.execute(stmt)
        made.append(f"foreign key {cname}")
    return made


async def _view(store: PgStore, conn: Conn, ent: Entity, kinds: dict[str, str]) -> list[str]:
    view = ent.view
    assert view is not None
    if ent.name in kinds:
        return []
    body = sql.SQL(view.sql)  # the app's own declared SQL
    word = "MATERIALIZED VIEW" if view.materialized else "VIEW"
    await conn.execute(
        sql.SQL("CREATE {} {} AS {}").format(sql.SQL(word), store.ident(ent.name), body)
    )
    return [f"{word.lower()} {ent.name}"]


async def _indexes(store: PgStore, conn: Conn, ent: Entity, kinds: dict[str, str]) -> list[str]:
    if ent.view is not None and not ent.view.materialized:
        return []
    made = []
    for index in ent.all_indexes():
        name = ent.index_name(index)
        if name in kinds:
            continue
        await conn.execute(
            sql.SQL("CREATE {}INDEX IF NOT EXISTS {} ON {} ({})").format(
                sql.SQL("UNIQUE " if index.unique else ""),
                sql.Identifier(name),
                store.ident(ent.name),
                sql.SQL(", ").join(map(sql.Identifier, index.columns)),
            )
        )
        made.append(f"index {name}")
    return made


async def create_partitions(
    store: PgStore, conn: Conn, ent: Entity, now: Any, since: Any
) -> list[str]:
    """Create every missing partition from ``since`` (default: the current unit) through
    ``ahead`` units past the current one; answer the names created."""
    by = ent.partition_by
    assert by is not None
    first = since if since is not None and since < now else now
    last = next_start(now, by.unit, by.ahead)
    existing = await partitions_of(store, conn, ent)
    made = []
    for start, end in ranges(first, last, by.unit):
        name = partition_name(ent.name, start, by.unit)
        if name in existing:
            continue
        await conn.execute(
            sql.SQL(
                "CREATE TABLE IF NOT EXISTS {} PARTITION OF {} FOR VALUES FROM ({}) TO ({})"
            ).format(store.ident(name), store.ident(ent.name), sql.Literal(start), sql.Literal(end))
        )
        made.append(name)
    return made


async def partitions_of(store: PgStore, conn: Conn, ent: Entity) -> dict[str, str]:
    """``{partition name: its bound expression}`` of the parent table."""
    cur = await conn.execute(
        "SELECT c.relname, pg_get_expr(c.relpartbound, c.oid) FROM pg_inherits i "
        "JOIN pg_class c ON c.oid = i.inhrelid WHERE i.inhparent = %s::regclass",
        [store.ident(ent.name).as_string(conn)],
    )
    return {str(r[0]): str(r[1]) for r in await cur.fetchall()}
