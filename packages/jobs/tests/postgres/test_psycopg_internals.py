"""The lean Postgres path leans on psycopg internals (``DriverConnection`` overrides
``AsyncConnection.wait`` and talks to libpq through ``pgconn``). These tests fail loudly, naming
the psycopg version, the day an upgrade changes what it relies on; pyproject bounds psycopg to
the range tested here."""

from __future__ import annotations

import inspect
from typing import Any

import psycopg
from psycopg import errors as pg_errors
from psycopg import pq

from ultimat3.jobs.postgres._db import DriverConnection

TESTED = ((3, 2), (3, 4))  # [low, high): packages/jobs/pyproject.toml says psycopg>=3.2,<3.4
VERSION = psycopg.__version__


def _version() -> tuple[int, int]:
    major, minor = VERSION.split(".")[:2]
    return int(major), int("".join(c for c in minor if c.isdigit()))


def test_psycopg_is_a_version_the_lean_path_was_tested_on() -> None:
    low, high = TESTED
    assert low <= _version() < high, (
        f"psycopg {VERSION} is outside the tested range {low}..{high}: run the lean-path tests "
        "(packages/jobs/tests/postgres/test_postgres_lean.py) and widen the bound in "
        "packages/jobs/pyproject.toml and here"
    )


def test_the_members_the_lean_path_calls_still_exist() -> None:
    wait = psycopg.AsyncConnection.wait
    assert inspect.iscoroutinefunction(wait), f"psycopg {VERSION}: AsyncConnection.wait changed"
    params = list(inspect.signature(wait).parameters)
    assert params[:2] == ["self", "gen"], f"psycopg {VERSION}: AsyncConnection.wait{params}"
    for name in ("close", "cancel_safe", "cursor", "info"):
        assert hasattr(psycopg.AsyncConnection, name), f"psycopg {VERSION}: no {name}"
    for name in (
        "send_prepare",
        "send_query_prepared",
        "flush",
        "consume_input",
        "is_busy",
        "get_result",
        "socket",
        "transaction_status",
    ):
        assert hasattr(pq.PGconn, name), f"psycopg {VERSION}: PGconn has no {name}"
    assert callable(pg_errors.error_from_result), f"psycopg {VERSION}: no error_from_result"
    assert pq.ExecStatus.FATAL_ERROR and pq.TransactionStatus.ACTIVE


async def test_psycopg_still_waits_through_the_overridden_wait(database_url: str) -> None:
    """What the override is for: every statement psycopg itself runs (a cursor's, a commit)
    goes through ``wait``, so the lean watch is taken off before psycopg reads the socket."""
    calls: list[Any] = []

    class Counting(DriverConnection):
        async def wait(self, gen: Any, *args: Any, **kwargs: Any) -> Any:
            calls.append(gen)
            return await super().wait(gen, *args, **kwargs)

    conn = await Counting.connect(database_url, autocommit=False)
    try:
        before = len(calls)
        cur = await conn.execute("SELECT 1")
        assert await cur.fetchone() == (1,)
        await conn.commit()
        assert isinstance(conn.pgconn, pq.PGconn), f"psycopg {VERSION}: conn.pgconn changed"
        assert conn.pgconn.socket > 0 and conn.info.encoding
        assert len(calls) >= before + 2, (
            f"psycopg {VERSION} no longer routes its statements through AsyncConnection.wait: "
            "DriverConnection's lean watch would stay on the socket psycopg reads"
        )
    finally:
        await conn.close()
