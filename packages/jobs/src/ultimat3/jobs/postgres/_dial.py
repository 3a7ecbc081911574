"""The refusals of a DSN before a pool is built from it: a malformed DSN (or another
database's URL) is ``X_CONFIG_INVALID`` at once; one probe connection, bounded by
``PROBE_TIMEOUT_S``, tells a server that is not there (``X_DRIVER_UNAVAILABLE``, retryable,
naming the cause) from one that answers but refuses us — a database that does not exist, a bad
password, an unknown role (``X_CONFIG_INVALID``: retrying changes nothing)."""

from __future__ import annotations

import asyncio
from typing import Final

import psycopg
from psycopg.conninfo import conninfo_to_dict, make_conninfo

from ultimat3.core import XError

PROBE_TIMEOUT_S: Final = 2.0
_SCHEMES: Final = ("postgresql://", "postgres://")
_CONFIG_CAUSES: Final = (
    "does not exist",
    "password authentication failed",
    "no password supplied",
    "authentication failed",
    "no pg_hba.conf entry",
    "permission denied",
)


def redacted(dsn: str) -> str:
    """``dsn`` without its password (for messages)."""
    try:
        params = conninfo_to_dict(dsn)
    except psycopg.ProgrammingError:
        return dsn.split("@")[-1] if "@" in dsn else dsn
    params.pop("password", None)
    return make_conninfo("", **{k: str(v) for k, v in params.items()})


def check_dsn(dsn: str) -> None:
    """``X_CONFIG_INVALID`` for a DSN psycopg cannot parse, or a URL of another scheme."""
    fix = "pass a PostgreSQL URL, e.g. postgresql://user@127.0.0.1:5432/app"
    if "://" in dsn and not dsn.startswith(_SCHEMES):
        scheme = dsn.split("://", 1)[0]
        raise XError(
            "X_CONFIG_INVALID",
            f"the database URL's scheme {scheme!r} is not postgresql:// (a PostgreSQL driver)",
            fix=fix,
            meta={"scheme": scheme},
        )
    try:
        conninfo_to_dict(dsn)
    except psycopg.ProgrammingError as exc:
        raise XError(
            "X_CONFIG_INVALID",
            f"the database URL is malformed: {str(exc).splitlines()[0]}",
            fix=fix,
        ) from exc


async def probe(dsn: str, *, timeout_s: float = PROBE_TIMEOUT_S) -> None:
    """Dial once, within ``timeout_s``; raise the refusal that names the cause."""
    where = redacted(dsn)
    try:
        conn = await asyncio.wait_for(
            psycopg.AsyncConnection.connect(dsn, connect_timeout=max(1, int(timeout_s))),
            timeout=timeout_s,
        )
    except TimeoutError as exc:
        raise XError(
            "X_DRIVER_UNAVAILABLE",
            f"PostgreSQL at {where!r} did not answer within {timeout_s:g} s",
            fix="check the host and port, and that the server is running (pg_isready)",
            meta={"dsn": where, "timeout_s": timeout_s},
        ) from exc
    except psycopg.OperationalError as exc:
        cause = " ".join(str(exc).split())[:300] or type(exc).__name__
        if any(c in cause for c in _CONFIG_CAUSES):
            raise XError(
                "X_CONFIG_INVALID",
                f"PostgreSQL at {where!r} refused the connection: {cause}",
                fix="check the database name, the user and the password in the URL "
                "(createdb <name> when the database is missing); retrying changes nothing",
                meta={"dsn": where, "cause": cause},
            ) from exc
        raise XError(
            "X_DRIVER_UNAVAILABLE",
            f"PostgreSQL at {where!r} is unavailable: {cause}",
            fix="check the host and port, and that the server is running (pg_isready); "
            "safe to retry once it answers",
            meta={"dsn": where, "cause": cause},
        ) from exc
    await conn.close()
