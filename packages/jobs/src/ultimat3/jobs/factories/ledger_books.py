"""The ``LedgerBook``s that ship: ``memory_ledger_book()`` (dev, tests) and
``postgres_ledger_book()`` (one ``insert ... on conflict (posting_key, line) do nothing`` per
posting, its table in ``sql/ledger_lines.sql``).

Both decide a post the same way: after the insert, the key must hold exactly the lines given.
A replay of the same lines writes 0; a key holding other lines (another count, another line) is
``X_LEDGER_POSTING_CONFLICT`` and the transaction rolls back, so nothing is written.
"""

from __future__ import annotations

from collections.abc import Sequence
from importlib import resources
from typing import Any

import psycopg
from psycopg import sql
from psycopg_pool import AsyncConnectionPool

from ultimat3.core import Money, XError

from .ledger import LedgerLine

LEDGER_DDL_FILE = "sql/ledger_lines.sql"
"""The Postgres book's DDL, next to this module (``{table}`` is the qualified table name)."""


def _conflict(key: str, stored: Sequence[LedgerLine], given: Sequence[LedgerLine]) -> XError:
    return XError(
        "X_LEDGER_POSTING_CONFLICT",
        f"posting {key!r} is already stored with other lines ({len(stored)} stored, "
        f"{len(given)} given); nothing was written",
        fix="a posting key names one set of lines forever: post a correcting posting under a "
        "fresh key instead of changing this one",
        meta={"key": key, "stored": len(stored), "given": len(given)},
    )


def _accept(key: str, given: Sequence[LedgerLine], stored: list[LedgerLine], wrote: int) -> int:
    """The rule both books apply after their insert: exactly the given lines, all old or all
    new (some old and some new would be another count)."""
    if stored != list(given) or wrote not in (0, len(given)):
        raise _conflict(key, stored, given)
    return wrote


def _check_lines(key: str, lines: Sequence[LedgerLine]) -> None:
    for index, line in enumerate(lines):
        if line.posting_key != key or line.line != index:
            raise XError(
                "X_LEDGER_ENTRY_INVALID",
                f"posting {key!r}: line {index} is {line!r}; lines are numbered 0.. under "
                "their own key",
                fix="build the lines with lines_of_posting(posting)",
                meta={"key": key},
            )


class MemoryLedgerBook:
    """A ``LedgerBook`` in a dict: ``lines`` maps each key to its stored lines."""

    def __init__(self) -> None:
        self.lines: dict[str, list[LedgerLine]] = {}

    async def post(self, key: str, lines: Sequence[LedgerLine]) -> int:
        _check_lines(key, lines)
        stored = self.lines.get(key)
        if stored is None:
            self.lines[key] = list(lines)
            return len(lines)
        return _accept(key, lines, list(stored), 0)

    async def lines_of(self, key: str) -> list[LedgerLine]:
        return list(self.lines.get(key, ()))

    def balances(self) -> dict[tuple[str, str], int]:
        """Every ``(account, currency)``'s sum of minor units over the whole book."""
        out: dict[tuple[str, str], int] = {}
        for stored in self.lines.values():
            for line in stored:
                slot = (line.account, line.amount.currency)
                out[slot] = out.get(slot, 0) + line.amount.minor
        return out


def memory_ledger_book() -> MemoryLedgerBook:
    """A book in memory (dev and tests; nothing survives the process)."""
    return MemoryLedgerBook()


class PostgresLedgerBook:
    """A ``LedgerBook`` over one Postgres table (``sql/ledger_lines.sql``)."""

    def __init__(
        self, source: str | AsyncConnectionPool[Any], *, schema: str | None, table: str
    ) -> None:
        self._owned = isinstance(source, str)
        self._pool: AsyncConnectionPool[Any] = (
            AsyncConnectionPool(source, min_size=1, max_size=4, open=False)
            if isinstance(source, str)
            else source
        )
        self._opened = False
        self.schema = schema
        self.table = table
        self._name = sql.Identifier(schema, table) if schema else sql.Identifier(table)
        self._insert = sql.SQL(
            "insert into {t} (posting_key, line, account, minor, currency) "
            "select * from unnest(%s::text[], %s::int[], %s::text[], %s::bigint[], %s::text[]) "
            "on conflict (posting_key, line) do nothing"
        ).format(t=self._name)
        self._select = sql.SQL(
            "select posting_key, line, account, minor, currency from {t} "
            "where posting_key = %s order by line"
        ).format(t=self._name)

    async def _ready(self) -> AsyncConnectionPool[Any]:
        if self._owned and not self._opened:
            await self._pool.open()
            self._opened = True
        return self._pool

    def ddl(self) -> str:
        """The ``create table if not exists`` this book needs, for its schema and table."""
        text = resources.files(__package__).joinpath(LEDGER_DDL_FILE).read_text("utf-8")
        return text.replace("{table}", self._name.as_string(None))

    async def migrate(self) -> None:
        """Create the schema (when one was named) and the table, if missing (idempotent)."""
        pool = await self._ready()
        async with pool.connection() as conn, conn.transaction():
            if self.schema:
                await conn.execute(
                    sql.SQL("create schema if not exists {s}").format(s=sql.Identifier(self.schema))
                )
            await conn.execute(self.ddl().encode())

    async def post(self, key: str, lines: Sequence[LedgerLine]) -> int:
        _check_lines(key, lines)
        pool = await self._ready()
        try:
            async with pool.connection() as conn, conn.transaction():
                cur = await conn.execute(
                    self._insert,
                    (
                        [line.posting_key for line in lines],
                        [line.line for line in lines],
                        [line.account for line in lines],
                        [line.amount.minor for line in lines],
                        [line.amount.currency for line in lines],
                    ),
                )
                wrote = max(cur.rowcount, 0)
                stored = await self._read(conn, key)
                return _accept(key, lines, stored, wrote)  # a conflict rolls the insert back
        except psycopg.Error as exc:
            raise XError(
                "X_DRIVER_UNAVAILABLE",
                f"ledger book {self._name.as_string(None)}: the post of {key!r} failed: "
                f"{str(exc).splitlines()[0] if str(exc) else type(exc).__name__}",
                fix="check the database is reachable and the book's table exists "
                "(await book.migrate())",
                meta={"key": key},
            ) from exc

    async def lines_of(self, key: str) -> list[LedgerLine]:
        pool = await self._ready()
        async with pool.connection() as conn:
            return await self._read(conn, key)

    async def _read(self, conn: psycopg.AsyncConnection[Any], key: str) -> list[LedgerLine]:
        cur = await conn.execute(self._select, (key,))
        return [
            LedgerLine(posting_key, line, account, Money(int(minor), currency))
            for posting_key, line, account, minor, currency in await cur.fetchall()
        ]

    async def close(self) -> None:
        """Close the pool the book opened (a caller's pool is the caller's)."""
        if self._owned and self._opened:
            await self._pool.close()
            self._opened = False


def postgres_ledger_book(
    dsn_or_pool: str | AsyncConnectionPool[Any],
    *,
    schema: str | None = None,
    table: str = "ledger_lines",
) -> PostgresLedgerBook:
    """A book over ``<schema>.<table>`` (``await book.migrate()`` creates it; the DDL is
    ``book.ddl()``). A DSN gets a small pool of the book's own; a pool is used as is."""
    for label, value in (("table", table), ("schema", schema)):
        if value is not None and (not isinstance(value, str) or not value.strip()):
            raise XError(
                "X_CONFIG_INVALID",
                f"postgres_ledger_book: {label} {value!r} is not a non-empty str",
                fix="postgres_ledger_book(pool, schema='app', table='ledger_lines')",
            )
    if not isinstance(dsn_or_pool, str | AsyncConnectionPool):
        raise XError(
            "X_CONFIG_INVALID",
            f"postgres_ledger_book: {type(dsn_or_pool).__name__} is neither a DSN nor a "
            "psycopg AsyncConnectionPool",
            fix="postgres_ledger_book('postgresql://...') or postgres_ledger_book(pool)",
        )
    return PostgresLedgerBook(dsn_or_pool, schema=schema, table=table)


__all__ = [
    "LEDGER_DDL_FILE",
    "MemoryLedgerBook",
    "PostgresLedgerBook",
    "memory_ledger_book",
    "postgres_ledger_book",
]
