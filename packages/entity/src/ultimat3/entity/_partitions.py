"""``maintain_partitions(db, entity, now=)``: create ``ahead`` partitions past the current one
under a 5 s ``lock_timeout`` (``X_DB_LOCK_TIMEOUT``, retryable), then retire what ``retain``
expired — ``DETACH PARTITION ... CONCURRENTLY`` (outside any transaction, as Postgres requires)
and ``DROP``. A second call at the same instant changes nothing."""

from __future__ import annotations

import re
from datetime import UTC, datetime, timedelta
from typing import Any

import psycopg
from psycopg import sql

from ultimat3.core import XError, log_event

from ._database import Database
from ._entity import Entity
from ._partition_math import next_start
from ._pg_migrate import create_partitions, partitions_of
from ._pg_store import Conn, PgStore

PARTITION_LOCK_TIMEOUT_MS = 5000
"""How long partition DDL waits for a lock on the parent before ``X_DB_LOCK_TIMEOUT``."""

_SUFFIX = re.compile(r"_p(\d{8}|\d{6})$")


def _start_of(name: str) -> datetime | None:
    m = _SUFFIX.search(name)
    if m is None:
        return None
    digits = m.group(1)
    day = int(digits[6:8]) if len(digits) == 8 else 1
    return datetime(int(digits[:4]), int(digits[4:6]), day, tzinfo=UTC)


def _lock_timeout(exc: psycopg.Error, ent: Entity, what: str) -> XError:
    return XError(
        "X_DB_LOCK_TIMEOUT",
        f"maintain_partitions({ent.name}): {what} waited past {PARTITION_LOCK_TIMEOUT_MS} ms "
        "for a lock on the table",
        meta={"entity": ent.name, "lock_timeout_ms": PARTITION_LOCK_TIMEOUT_MS},
    )


async def _detach(store: PgStore, conn: Conn, ent: Entity, name: str) -> None:
    try:
        await conn.execute(
            sql.SQL("ALTER TABLE {} DETACH PARTITION {} CONCURRENTLY").format(
                store.ident(ent.name), store.ident(name)
            )
        )
    except psycopg.errors.LockNotAvailable as exc:
        raise _lock_timeout(exc, ent, f"detaching {name}") from exc


async def _finalize_pending(store: PgStore, conn: Conn, ent: Entity) -> list[str]:
    """Finish the ``DETACH ... CONCURRENTLY`` an earlier run left pending (interrupted or
    cancelled between its two transactions: the partition is still attached, marked
    ``inhdetachpending``, and every later ``DETACH`` of the parent is refused until it is done)
    with ``DETACH PARTITION ... FINALIZE``, outside a transaction. Answers the partitions
    finalized (they are standalone tables now)."""
    cur = await conn.execute(
        "SELECT c.relname FROM pg_inherits i JOIN pg_class c ON c.oid = i.inhrelid "
        "WHERE i.inhparent = %s::regclass AND i.inhdetachpending ORDER BY 1",
        [store.ident(ent.name).as_string(conn)],
    )
    pending = [str(r[0]) for r in await cur.fetchall()]
    await conn.commit()
    if not pending:
        return []
    await conn.set_autocommit(True)
    try:
        await conn.execute(
            sql.SQL("SET lock_timeout = {}").format(sql.Literal(f"{PARTITION_LOCK_TIMEOUT_MS}ms"))
        )
        for name in pending:
            try:
                await conn.execute(
                    sql.SQL("ALTER TABLE {} DETACH PARTITION {} FINALIZE").format(
                        store.ident(ent.name), store.ident(name)
                    )
                )
            except psycopg.errors.LockNotAvailable as exc:
                raise _lock_timeout(exc, ent, f"finalizing the pending detach of {name}") from exc
            log_event("entity.partitions.detach-finalized", table=ent.name, partition=name)
    finally:
        await conn.execute("RESET lock_timeout")
        await conn.set_autocommit(False)
    return pending


async def maintain_partitions(
    db: Database, ent: Entity | str, *, now: datetime, since: datetime | None = None
) -> dict[str, Any]:
    """Keep ``ent``'s partitions ready at ``now``: answers ``{"table", "created", "dropped"}``.
    ``since``: also create every partition back to it, and drop nothing (moving old rows in)."""
    entity = db.entities.get(ent if isinstance(ent, str) else ent.name)
    if entity is None or entity.partition_by is None:
        name = ent if isinstance(ent, str) else ent.name
        raise XError(
            "X_CONFIG_INVALID",
            f"maintain_partitions: {name!r} is not a partitioned entity of this database",
            fix="entity(..., partition_by=PartitionBy('at'))",
        )
    if now.tzinfo is None:
        raise XError(
            "X_CONFIG_INVALID",
            "maintain_partitions: now is a naive datetime",
            fix="now=datetime.now(UTC)",
        )
    by = entity.partition_by
    store = db.store
    pool = await db._pool()
    created: list[str] = []
    dropped: list[str] = []
    async with pool.connection() as conn:
        finalized = await _finalize_pending(store, conn, entity)
        try:
            async with conn.transaction():
                await conn.execute(
                    sql.SQL("SET LOCAL lock_timeout = {}").format(
                        sql.Literal(f"{PARTITION_LOCK_TIMEOUT_MS}ms")
                    )
                )
                created = await create_partitions(store, conn, entity, now, since)
        except psycopg.errors.LockNotAvailable as exc:
            raise _lock_timeout(exc, entity, "creating partitions") from exc
        retain = by.retain_ms()
        if retain is not None and since is None:
            cutoff = now - timedelta(milliseconds=retain)
            existing = await partitions_of(store, conn, entity)
            await conn.commit()
            expired = sorted(
                n
                for n in {*existing, *finalized}
                if (s := _start_of(n)) is not None and next_start(s, by.unit) <= cutoff
            )
            if expired:
                await conn.set_autocommit(True)
                try:
                    await conn.execute(
                        sql.SQL("SET lock_timeout = {}").format(
                            sql.Literal(f"{PARTITION_LOCK_TIMEOUT_MS}ms")
                        )
                    )
                    for name in expired:
                        if name not in finalized:  # a finalized one is detached already
                            await _detach(store, conn, entity, name)
                        await conn.execute(
                            sql.SQL("DROP TABLE IF EXISTS {}").format(store.ident(name))
                        )
                        dropped.append(name)
                finally:
                    await conn.execute("RESET lock_timeout")
                    await conn.set_autocommit(False)
    log_event(
        "entity.partitions.maintained",
        table=entity.name,
        created=len(created),
        dropped=len(dropped),
        finalized=finalized,
    )
    return {"table": entity.name, "created": created, "dropped": dropped}
