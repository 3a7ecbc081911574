"""``transaction()``: the one helper that binds an app's connection for a transactional enqueue."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import psycopg
from psycopg_pool import AsyncConnectionPool

from ultimat3.core import XError, current_signal, use_connection
from ultimat3.jobs.postgres._db import Conn, Pool


@asynccontextmanager
async def transaction(source: Pool | Conn) -> AsyncIterator[Conn]:
    """Open a transaction on ``source`` (a pool: one of its connections; a connection: that one)
    and make the connection ambient for the block. Every ``job.enqueue`` made inside writes its
    row in this transaction: committed at the end of the block, the jobs are queued; rolled back
    (an exception leaves the block), they never existed.

    ``async with transaction(pool) as conn:`` — write the business rows on ``conn`` too.

    Inside a run whose signal is aborted (its timeout, a drain, a lost lease) it rethrows the
    signal's reason instead of opening a transaction: the run must stop writing."""
    signal = current_signal()
    if signal is not None and signal.aborted and signal.reason is not None:
        raise signal.reason
    if isinstance(source, AsyncConnectionPool):
        async with source.connection() as conn, conn.transaction(), use_connection(conn):
            yield conn
    elif isinstance(source, psycopg.AsyncConnection):
        async with source.transaction(), use_connection(source):
            yield source
    else:
        raise XError(
            "X_CONFIG_INVALID",
            f"transaction: {type(source).__name__} is neither a psycopg AsyncConnectionPool nor "
            "an AsyncConnection",
            fix="async with transaction(pool) as conn: ...",
        )
