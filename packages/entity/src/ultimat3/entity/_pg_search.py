"""The Postgres full-text ``SearchIndex``: one table (``tsvector`` generated from the text, a
GIN index over it), every write one statement guarded by the stored version."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from psycopg import sql

from ultimat3.core import XError

from ._database import Database
from ._names import check_identifier, derived_name
from ._search import DocList, HitList, SearchDocument, SearchHit

_CONFIGS = frozenset({"simple", "english", "german", "french", "spanish", "italian", "dutch"})


class PostgresSearchIndex:
    """Documents in ``<schema>.<table>`` of ``db`` (on its ambient transaction when inside
    ``db.transaction()``)."""

    def __init__(self, db: Database, *, table: str, config: str) -> None:
        check_identifier(table, what="postgres_search_index table", fix="table='search_documents'")
        if config not in _CONFIGS:
            raise XError(
                "X_CONFIG_INVALID",
                f"postgres_search_index: text search config "
                f"{config!r} is not one of {sorted(_CONFIGS)}",
                fix="config='simple'",
            )
        self._db = db
        self._table = table
        self._config = config

    def _t(self) -> sql.Identifier:
        return self._db.store.ident(self._table)

    async def migrate(self) -> None:
        """Create the documents table and its GIN index when missing."""
        schema = self._db.schema
        async with self._db.store.connection(atomic=True) as conn:
            if schema:
                await conn.execute(
                    sql.SQL("CREATE SCHEMA IF NOT EXISTS {}").format(sql.Identifier(schema))
                )
            await conn.execute(
                sql.SQL(
                    "CREATE TABLE IF NOT EXISTS {t} (id text PRIMARY KEY, entity text NOT NULL, "
                    "tenant text, version bigint NOT NULL, body text NOT NULL, "
                    "removed boolean NOT NULL DEFAULT false, "
                    "tsv tsvector GENERATED ALWAYS AS (to_tsvector({cfg}, body)) STORED)"
                ).format(t=self._t(), cfg=sql.Literal(self._config))
            )
            await conn.execute(
                sql.SQL("CREATE INDEX IF NOT EXISTS {} ON {} USING gin (tsv)").format(
                    sql.Identifier(derived_name(self._table, "tsv", suffix="idx")), self._t()
                )
            )

    async def _write(self, rows: list[tuple[Any, ...]], removed: bool) -> int:
        if not rows:
            return 0
        stmt = sql.SQL(
            "INSERT INTO {t} AS d (id, entity, tenant, version, body, removed) "
            "SELECT * FROM unnest(%s::text[], %s::text[], %s::text[], %s::bigint[], %s::text[], "
            "%s::boolean[]) "
            "ON CONFLICT (id) DO UPDATE SET entity = EXCLUDED.entity, tenant = "
            "COALESCE(EXCLUDED.tenant, d.tenant), version = EXCLUDED.version, body = "
            "EXCLUDED.body, removed = EXCLUDED.removed WHERE d.version < EXCLUDED.version"
        ).format(t=self._t())
        cols = [list(c) for c in zip(*rows, strict=True)]
        cols.append([removed] * len(rows))
        async with self._db.store.connection() as conn, conn.cursor() as cur:
            await cur.execute(stmt, cols)
            return max(cur.rowcount, 0)

    async def upsert(self, docs: Sequence[SearchDocument]) -> int:
        latest: dict[str, SearchDocument] = {}
        for d in docs:  # one statement cannot touch a row twice: keep each id's newest
            if d.id not in latest or latest[d.id].version < d.version:
                latest[d.id] = d
        rows = [(d.id, d.entity, d.tenant, d.version, d.text) for d in latest.values()]
        return await self._write(rows, removed=False)

    async def remove(self, ids: Sequence[str], version: int) -> int:
        rows = [(i, i.split(":", 1)[0], None, version, "") for i in dict.fromkeys(ids)]
        return await self._write(rows, removed=True)

    async def list(
        self, *, tenant: str | None = None, after: str | None = None, limit: int = 500
    ) -> DocList:
        stmt = sql.SQL(
            "SELECT id, entity, tenant, body, version FROM {} WHERE NOT removed "
            'AND (%s::text IS NULL OR tenant = %s) AND (%s::text IS NULL OR id COLLATE "C" > %s) '
            'ORDER BY id COLLATE "C" LIMIT %s'
        ).format(self._t())
        async with self._db.store.connection() as conn, conn.cursor() as cur:
            await cur.execute(stmt, [tenant, tenant, after, after, limit])
            return [SearchDocument(r[0], r[1], r[2], r[3], int(r[4])) for r in await cur.fetchall()]

    async def search(self, query: str, *, tenant: str | None = None, limit: int = 20) -> HitList:
        stmt = sql.SQL(
            "SELECT id, ts_rank(tsv, q) FROM {}, plainto_tsquery({cfg}, %s) q "
            "WHERE NOT removed AND tsv @@ q AND (%s::text IS NULL OR tenant = %s) "
            'ORDER BY 2 DESC, id COLLATE "C" LIMIT %s'
        ).format(self._t(), cfg=sql.Literal(self._config))
        async with self._db.store.connection() as conn, conn.cursor() as cur:
            await cur.execute(stmt, [query, tenant, tenant, limit])
            return [SearchHit(str(r[0]), float(r[1])) for r in await cur.fetchall()]


def postgres_search_index(
    db: Database, *, table: str = "search_documents", config: str = "simple"
) -> PostgresSearchIndex:
    """The full-text index on ``db``'s schema; ``await index.migrate()`` once."""
    return PostgresSearchIndex(db, table=table, config=config)
