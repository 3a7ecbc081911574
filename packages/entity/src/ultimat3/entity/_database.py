"""``database()``: the entities on one Postgres schema — handles, ``migrate()`` and
``transaction()`` (which makes its connection ambient, so a job enqueued inside joins it)."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager
from typing import Any

import psycopg
from psycopg_pool import AsyncConnectionPool

from ultimat3.core import XError, current_connection, use_connection

from ._entity import Entity
from ._handle import Table
from ._names import check_identifier
from ._pg_migrate import migrate
from ._pg_store import Conn, PgStore
from ._sealing import KeyRing
from ._telemetry import TracedStore


def check_entities(entities: Sequence[Entity], key_ring: KeyRing | None) -> dict[str, Entity]:
    """The entities by name; refuses duplicates, dangling references, sealed without keys."""
    by_name: dict[str, Entity] = {}
    for ent in entities:
        if not isinstance(ent, Entity):
            raise XError(
                "X_CONFIG_INVALID",
                f"database: {ent!r} is not an entity()",
                fix="database(dsn, [orders, customers])",
            )
        if ent.name in by_name:
            raise XError(
                "X_CONFIG_INVALID",
                f"database: two entities named {ent.name!r}",
                fix="give each entity its own name",
            )
        by_name[ent.name] = ent
    for ent in entities:
        for col_name, col in ent.columns.items():
            ref = col.reference
            if ref is None:
                continue
            target = by_name.get(ref.target_name)
            if target is None:
                raise XError(
                    "X_CONFIG_INVALID",
                    f"{ent.name}.{col_name} references "
                    f"{ref.target_name!r}, which this database does not declare",
                    fix="pass the referenced entity to database() too",
                )
            if len(target.primary_key) != 1:
                raise XError(
                    "X_CONFIG_INVALID",
                    f"{ent.name}.{col_name} references "
                    f"{target.name!r}, which has no single-column primary key",
                    fix="reference an entity with one primary key column",
                )
        if ent.sealed_columns and key_ring is None:
            raise XError(
                "X_CONFIG_INVALID",
                f"database: {ent.name!r} has sealed columns "
                f"{list(ent.sealed_columns)} and no key_ring was given",
                fix="database(dsn, entities, key_ring=KeyRing.parse(os.environ['ENTITY_KEYS']))",
            )
    return by_name


class Database:
    """Entities on one Postgres schema. ``db.<entity name>`` is the table handle."""

    def __init__(
        self,
        source: str | AsyncConnectionPool[Any],
        entities: Sequence[Entity],
        *,
        schema: str | None,
        key_ring: KeyRing | None,
    ) -> None:
        self.entities = check_entities(entities, key_ring)
        if schema is not None:
            check_identifier(schema, what="database schema", fix="database(dsn, es, schema='app')")
        self.schema = schema
        self.key_ring = key_ring
        self._owned = isinstance(source, str)
        self._given_pool = None if isinstance(source, str) else source
        self._dsn = source if isinstance(source, str) else None
        self._pool_obj: AsyncConnectionPool[Any] | None = self._given_pool
        self._lock = asyncio.Lock()
        self.store = PgStore(self._pool, schema)
        traced = TracedStore(self.store, system="postgresql", namespace=schema)
        self._tables = {n: Table(e, traced, key_ring) for n, e in self.entities.items()}

    async def _pool(self) -> AsyncConnectionPool[Any]:
        if self._pool_obj is not None and (not self._owned or not self._pool_obj.closed):
            return self._pool_obj
        async with self._lock:
            if self._pool_obj is None:
                pool: AsyncConnectionPool[Any] = AsyncConnectionPool(
                    str(self._dsn),
                    min_size=1,
                    max_size=4,
                    open=False,
                )
                await pool.open(wait=True, timeout=10)
                self._pool_obj = pool
        return self._pool_obj

    def __getattr__(self, name: str) -> Table:
        tables = self.__dict__.get("_tables", {})
        if name in tables:
            return tables[name]  # type: ignore[no-any-return]
        raise AttributeError(f"database has no entity {name!r} (declared: {sorted(tables)})")

    def table(self, name: str) -> Table:
        """The handle of entity ``name`` (as ``db.<name>``)."""
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
        """Create what is missing (idempotent; safe from two processes at once)."""
        return await migrate(self.store, list(self.entities.values()))

    @asynccontextmanager
    async def transaction(self) -> AsyncIterator[Conn]:
        """One transaction, its connection ambient (``use_connection``) for the block: every
        handle call and every ``job.enqueue`` inside runs on it. A block inside a block is a
        savepoint. An exception leaving the block rolls it back."""
        ambient = current_connection()
        if isinstance(ambient, psycopg.AsyncConnection):
            async with ambient.transaction():
                yield ambient
            return
        pool = await self._pool()
        async with pool.connection() as conn, conn.transaction(), use_connection(conn):
            yield conn

    async def close(self) -> None:
        """Close the pool this database opened (a pool given to it stays open)."""
        if self._owned and self._pool_obj is not None:
            await self._pool_obj.close()
            self._pool_obj = None

    async def __aenter__(self) -> Database:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()


def database(
    dsn_or_pool: str | AsyncConnectionPool[Any],
    entities: Sequence[Entity],
    *,
    schema: str | None = None,
    key_ring: KeyRing | None = None,
) -> Database:
    """The entities on Postgres: a DSN (the database opens and owns a small pool on first use)
    or a psycopg ``AsyncConnectionPool`` of yours; ``schema`` qualifies every table."""
    if not isinstance(dsn_or_pool, str | AsyncConnectionPool):
        raise XError(
            "X_CONFIG_INVALID",
            f"database: {type(dsn_or_pool).__name__} is neither a DSN nor an AsyncConnectionPool",
            fix="database('postgresql://...', [...])",
        )
    return Database(dsn_or_pool, entities, schema=schema, key_ring=key_ring)
