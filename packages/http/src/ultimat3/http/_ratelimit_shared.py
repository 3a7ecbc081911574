"""The shared rate-limit stores: Postgres (``[postgres]`` extra) and Redis (``[redis]`` extra).

Each is ONE atomic statement per hit (see ``_ratelimit``'s ``spend`` contract). The drivers are
imported when a store is built, so ``ultimat3.http`` itself needs neither."""

from __future__ import annotations

import importlib
import re
from typing import Any

from ultimat3.core import XError

_IDENT = re.compile(r"[a-z_][a-z0-9_]{0,62}")


def _need(module: str, extra: str) -> Any:
    try:
        return importlib.import_module(module)
    except ImportError as exc:
        raise XError(
            "X_CONFIG_INVALID",
            f"the {extra} rate-limit store needs {module}, which is not installed",
            fix=f'pip install "ultimat3-http[{extra}]"',
        ) from exc


def _ident(label: str, value: str) -> str:
    if not _IDENT.fullmatch(value):
        raise XError(
            "X_CONFIG_INVALID",
            f"{label} {value!r} is not a lowercase SQL identifier",
            fix="use letters, digits and '_' (at most 63), starting with a letter or '_'",
        )
    return value


class PostgresRateLimitStore:
    """Rate-limit state in ``<schema>.<table>`` (``key text primary key, tat bigint``).

    ``await store.migrate()`` creates the table (idempotent); ``close()`` closes a pool the store
    opened itself."""

    shared = True

    def __init__(self, source: Any, *, schema: str | None, table: str) -> None:
        self._source = source
        self._owned: Any = None
        self._qualified = (
            f"{_ident('schema', schema)}.{_ident('table', table)}"
            if schema
            else _ident("table", table)
        )
        t = self._qualified
        self._upsert = (
            f"insert into {t} as r (key, tat) values (%(key)s, %(now)s + %(interval)s) "
            f"on conflict (key) do update set tat = greatest(r.tat, %(now)s) + %(interval)s "
            f"where greatest(r.tat, %(now)s) + %(interval)s - %(now)s <= %(window)s "
            f"returning tat"
        )
        self._read = f"select tat from {t} where key = %(key)s"

    @property
    def ddl(self) -> str:
        """The table this store needs (what ``migrate`` runs)."""
        schema = self._qualified.split(".")[0] if "." in self._qualified else None
        head = f"create schema if not exists {schema};\n" if schema else ""
        return head + (
            f"create table if not exists {self._qualified} "
            "(key text primary key, tat bigint not null)"
        )

    async def _pool(self) -> Any:
        if isinstance(self._source, str):
            if self._owned is None:
                pool_mod = _need("psycopg_pool", "postgres")
                self._owned = pool_mod.AsyncConnectionPool(
                    self._source, min_size=1, max_size=4, open=False
                )
                await self._owned.open()
            return self._owned
        return self._source

    async def migrate(self) -> None:
        pool = await self._pool()
        async with pool.connection() as conn:
            for statement in self.ddl.split(";\n"):
                await conn.execute(statement)

    async def spend(self, key: str, *, now_ms: int, interval_ms: int, window_ms: int) -> int:
        params = {"key": key, "now": now_ms, "interval": interval_ms, "window": window_ms}
        pool = await self._pool()
        async with pool.connection() as conn:
            cur = await conn.execute(self._upsert, params)
            row = await cur.fetchone()
            if row is not None:
                return int(row[0])
            cur = await conn.execute(self._read, params)
            row = await cur.fetchone()
            return -int(row[0]) if row is not None else -now_ms

    async def close(self) -> None:
        owned, self._owned = self._owned, None
        if owned is not None:
            await owned.close()


def postgres_rate_limit_store(
    dsn_or_pool: Any, *, schema: str | None = None, table: str = "x_rate_limits"
) -> PostgresRateLimitStore:
    """A store every process shares, over a DSN or a psycopg ``AsyncConnectionPool``."""
    _need("psycopg", "postgres")
    return PostgresRateLimitStore(dsn_or_pool, schema=schema, table=table)


_SPEND_LUA = """
local now = tonumber(ARGV[1])
local interval = tonumber(ARGV[2])
local window = tonumber(ARGV[3])
local tat = tonumber(redis.call('GET', KEYS[1]) or now)
if tat < now then tat = now end
local new = tat + interval
if new - now > window then return -tat end
redis.call('SET', KEYS[1], new, 'PX', new - now)
return new
"""


class RedisRateLimitStore:
    """Rate-limit state as one Redis key per limiter key (expiring when its bucket is full)."""

    shared = True

    def __init__(self, client: Any, *, prefix: str) -> None:
        self._client = client
        self._prefix = prefix
        self._script = client.register_script(_SPEND_LUA)

    async def spend(self, key: str, *, now_ms: int, interval_ms: int, window_ms: int) -> int:
        got = await self._script(keys=[self._prefix + key], args=[now_ms, interval_ms, window_ms])
        return int(got)


def redis_rate_limit_store(client: Any, *, prefix: str = "x:rl:") -> RedisRateLimitStore:
    """A store every process shares, over a ``redis.asyncio.Redis`` client (or a URL)."""
    redis_mod = _need("redis.asyncio", "redis")
    if isinstance(client, str):
        client = redis_mod.Redis.from_url(client)
    return RedisRateLimitStore(client, prefix=prefix)
