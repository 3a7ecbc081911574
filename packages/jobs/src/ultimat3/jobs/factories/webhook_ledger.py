"""The ``WebhookLedger`` port of ``webhook()``: one row per delivery attempt, the failure streak
that disables an endpoint, and the two ledgers that ship — in memory, and over a Postgres table the
app migrates (``POSTGRES_WEBHOOK_LEDGER_DDL``).

A streak counts the attempts that reached the endpoint and failed (``failed`` and ``rejected``)
since its last ``delivered`` one or its last ``enable``; a throttle is the receiver asking for
time, not a failure, and a refusal before any request (the address guard, a disabled endpoint)
never reached it.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Literal, Protocol, runtime_checkable

from ultimat3.core import XError

Outcome = Literal["delivered", "failed", "throttled", "rejected", "refused"]
STREAK_OUTCOMES: frozenset[str] = frozenset({"failed", "rejected"})


@dataclass(frozen=True, slots=True)
class WebhookAttempt:
    """One delivery attempt, as the ledger records it."""

    endpoint_id: str
    event_id: str
    attempt: int
    status: int | None
    outcome: Outcome
    code: str | None
    duration_ms: int
    at: datetime


@runtime_checkable
class WebhookLedger(Protocol):
    """Where ``webhook()`` writes its attempts. Retention is the app's decision."""

    async def record(self, attempt: WebhookAttempt) -> None: ...

    async def failures_in_a_row(self, endpoint_id: str) -> int: ...

    async def disable(self, endpoint_id: str) -> None: ...


class MemoryWebhookLedger:
    """Dev and tests: ``.attempts`` in order, ``.disabled`` the endpoints turned off;
    ``enable(id)`` is the app turning one back on (the streak restarts)."""

    def __init__(self) -> None:
        self.attempts: list[WebhookAttempt] = []
        self.disabled: set[str] = set()
        self._streak: dict[str, int] = {}

    async def record(self, attempt: WebhookAttempt) -> None:
        self.attempts.append(attempt)
        if attempt.outcome == "delivered":
            self._streak[attempt.endpoint_id] = 0
        elif attempt.outcome in STREAK_OUTCOMES:
            self._streak[attempt.endpoint_id] = self._streak.get(attempt.endpoint_id, 0) + 1

    async def failures_in_a_row(self, endpoint_id: str) -> int:
        return self._streak.get(endpoint_id, 0)

    async def disable(self, endpoint_id: str) -> None:
        self.disabled.add(endpoint_id)

    async def enable(self, endpoint_id: str) -> None:
        self.disabled.discard(endpoint_id)
        self._streak[endpoint_id] = 0

    def of(self, endpoint_id: str) -> list[WebhookAttempt]:
        """The attempts to one endpoint, in order."""
        return [a for a in self.attempts if a.endpoint_id == endpoint_id]


def memory_webhook_ledger() -> MemoryWebhookLedger:
    """A ledger in this process's memory (dev only: a restart forgets every streak)."""
    return MemoryWebhookLedger()


# --- Postgres -----------------------------------------------------------------------------------

_IDENT = re.compile(r"[a-z_][a-z0-9_]{0,62}")

POSTGRES_WEBHOOK_LEDGER_DDL = """\
create table if not exists {table} (
    id          bigint generated always as identity primary key,
    endpoint_id text        not null,
    event_id    text        not null,
    attempt     integer     not null,
    status      integer,
    outcome     text        not null
                check (outcome in ('delivered', 'failed', 'throttled', 'rejected', 'refused',
                                   'enabled')),
    code        text,
    duration_ms integer     not null,
    at          timestamptz not null
);
-- failures_in_a_row reads an endpoint's newest rows first
create index if not exists {index} on {table} (endpoint_id, id desc);
create table if not exists {table}_disabled (
    endpoint_id text        primary key,
    at          timestamptz not null default now()
)"""
"""The two tables ``postgres_webhook_ledger`` writes (format with ``table`` and ``index``)."""


class PostgresWebhookLedger:
    """A ledger over ``<table>`` (one row per attempt) and ``<table>_disabled``.

    ``failures_in_a_row`` is one index range scan over the endpoint's newest rows (stopping at
    its last ``delivered`` or ``enabled`` row); ``enable(id)`` writes an ``enabled`` row and
    deletes the disabled mark; ``is_disabled(id)`` reads it."""

    def __init__(self, source: Any, *, schema: str | None, table: str) -> None:
        for label, value in (("schema", schema), ("table", table)):
            if value is not None and not _IDENT.fullmatch(value):
                raise XError(
                    "X_CONFIG_INVALID",
                    f"postgres_webhook_ledger: {label} {value!r} is not a lowercase SQL identifier",
                    fix="letters, digits and '_' (at most 63), starting with a letter or '_'",
                )
        self._source = source
        self._owned: Any = None
        self.table = f"{schema}.{table}" if schema else table
        self._index = f"{table}_endpoint_idx"

    @property
    def ddl(self) -> str:
        """The DDL for this ledger's tables (what ``migrate()`` runs)."""
        return POSTGRES_WEBHOOK_LEDGER_DDL.format(table=self.table, index=self._index)

    async def _pool(self) -> Any:
        if isinstance(self._source, str):
            if self._owned is None:
                from psycopg_pool import AsyncConnectionPool

                self._owned = AsyncConnectionPool(self._source, min_size=1, max_size=4, open=False)
                await self._owned.open()
            return self._owned
        return self._source

    async def migrate(self) -> None:
        """Create the tables (idempotent). Apps with their own migrations run ``ddl`` there."""
        pool = await self._pool()
        async with pool.connection() as conn:
            for statement in _statements(self.ddl):
                await conn.execute(statement)

    async def record(self, attempt: WebhookAttempt) -> None:
        pool = await self._pool()
        async with pool.connection() as conn:
            await conn.execute(
                f"insert into {self.table} (endpoint_id, event_id, attempt, status, outcome, "
                "code, duration_ms, at) values (%s, %s, %s, %s, %s, %s, %s, %s)",
                (
                    attempt.endpoint_id,
                    attempt.event_id,
                    attempt.attempt,
                    attempt.status,
                    attempt.outcome,
                    attempt.code,
                    attempt.duration_ms,
                    attempt.at,
                ),
            )

    async def failures_in_a_row(self, endpoint_id: str) -> int:
        pool = await self._pool()
        async with pool.connection() as conn:
            cur = await conn.execute(
                f"select count(*) filter (where outcome in ('failed', 'rejected')) "
                f"from {self.table} where endpoint_id = %(e)s and id > coalesce(("
                f"select max(id) from {self.table} where endpoint_id = %(e)s "
                "and outcome in ('delivered', 'enabled')), 0)",
                {"e": endpoint_id},
            )
            row = await cur.fetchone()
        return int(row[0]) if row is not None else 0

    async def disable(self, endpoint_id: str) -> None:
        pool = await self._pool()
        async with pool.connection() as conn:
            await conn.execute(
                f"insert into {self.table}_disabled (endpoint_id) values (%s) "
                "on conflict (endpoint_id) do nothing",
                (endpoint_id,),
            )

    async def is_disabled(self, endpoint_id: str) -> bool:
        pool = await self._pool()
        async with pool.connection() as conn:
            cur = await conn.execute(
                f"select 1 from {self.table}_disabled where endpoint_id = %s", (endpoint_id,)
            )
            return await cur.fetchone() is not None

    async def enable(self, endpoint_id: str) -> None:
        pool = await self._pool()
        async with pool.connection() as conn, conn.transaction():
            await conn.execute(
                f"delete from {self.table}_disabled where endpoint_id = %s", (endpoint_id,)
            )
            await conn.execute(
                f"insert into {self.table} (endpoint_id, event_id, attempt, status, outcome, "
                "code, duration_ms, at) values (%s, '', 0, null, 'enabled', null, 0, now())",
                (endpoint_id,),
            )

    async def attempts(self, endpoint_id: str) -> list[WebhookAttempt]:
        """The attempts to one endpoint, oldest first."""
        pool = await self._pool()
        async with pool.connection() as conn:
            cur = await conn.execute(
                "select endpoint_id, event_id, attempt, status, outcome, code, duration_ms, at "
                f"from {self.table} where endpoint_id = %s and outcome <> 'enabled' order by id",
                (endpoint_id,),
            )
            rows = await cur.fetchall()
        return [WebhookAttempt(*row) for row in rows]

    async def close(self) -> None:
        owned, self._owned = self._owned, None
        if owned is not None:
            await owned.close()


def _statements(ddl: str) -> Iterator[str]:
    for part in ddl.split(";"):
        lines = [ln for ln in part.splitlines() if ln.strip() and not ln.strip().startswith("--")]
        if lines:
            yield "\n".join(lines)


def postgres_webhook_ledger(
    dsn_or_pool: Any, *, schema: str | None = None, table: str = "webhook_deliveries"
) -> PostgresWebhookLedger:
    """A ledger over a Postgres table (DSN or psycopg ``AsyncConnectionPool``); create the tables
    with ``await ledger.migrate()`` or run ``ledger.ddl`` in the app's own migrations."""
    return PostgresWebhookLedger(dsn_or_pool, schema=schema, table=table)
