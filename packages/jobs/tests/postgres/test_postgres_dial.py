"""The DSN and connection refusals, with their timing bounds: a malformed DSN or another
database's URL is X_CONFIG_INVALID at once; a refused connection is X_DRIVER_UNAVAILABLE within
~2 s naming the cause (an enqueue while Postgres is down included); a database that does not
exist or a role it does not know is X_CONFIG_INVALID (not retryable). Loopback only."""

from __future__ import annotations

import json
import socket
import time
from typing import Any
from urllib.parse import urlsplit, urlunsplit

import pytest
from pydantic import BaseModel

from ultimat3.core import XError, swap_adapter
from ultimat3.jobs import job
from ultimat3.jobs.adapter import JOB_DRIVER
from ultimat3.jobs.cli import main
from ultimat3.jobs.postgres import postgres_job_driver

BOUND_S = 3.0
"""~2 s asked; the probe is bounded at 2 s, plus scheduling on a shared box."""


class N(BaseModel):
    n: int


async def _noop(input: N, step: Any, ctx: Any) -> None:
    return None


noop = job(input=N, idempotency_key=lambda i: f"dial:{i.n}", name="dial.noop", run=_noop)


def _closed_port() -> int:
    """A loopback port nothing listens on (bound, then released)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _with(database_url: str, *, port: int | None = None, path: str | None = None,
          user: str | None = None) -> str:  # fmt: skip
    parts = urlsplit(database_url)
    host = parts.hostname or "127.0.0.1"
    netloc = f"{user or parts.username or 'postgres'}@{host}:{port or parts.port or 5432}"
    return urlunsplit((parts.scheme, netloc, path or parts.path, parts.query, ""))


async def _refusal(dsn: str) -> tuple[XError, float]:
    driver = postgres_job_driver(dsn)
    started = time.monotonic()
    try:
        with pytest.raises(XError) as caught:
            await driver.open()
    finally:
        await driver.close()
    return caught.value, time.monotonic() - started


@pytest.mark.parametrize(
    ("dsn", "needle"),
    [
        ("mysql://foo", "'mysql'"),
        ("host=127.0.0.1 nonsense_option=1", "malformed"),
        ("postgresql://[::1", "malformed"),
    ],
)
async def test_a_malformed_or_foreign_dsn_is_config_invalid_at_once(dsn: str, needle: str) -> None:
    error, took = await _refusal(dsn)
    assert error.code == "X_CONFIG_INVALID" and needle in error.message
    assert error.retry == "terminal" or error.code == "X_CONFIG_INVALID"
    assert took < 0.5


async def test_a_refused_connection_is_driver_unavailable_within_the_bound(
    database_url: str,
) -> None:
    port = _closed_port()
    error, took = await _refusal(_with(database_url, port=port))
    assert error.code == "X_DRIVER_UNAVAILABLE"
    assert "refused" in error.message.lower() and str(port) in error.message
    assert took < BOUND_S


async def test_an_enqueue_while_postgres_is_down_fails_within_the_bound(
    database_url: str,
) -> None:
    driver = postgres_job_driver(_with(database_url, port=_closed_port()))
    try:
        with swap_adapter(JOB_DRIVER, driver):
            started = time.monotonic()
            with pytest.raises(XError) as caught:
                await noop.enqueue({"n": 1})
            took = time.monotonic() - started
    finally:
        await driver.close()
    assert caught.value.code == "X_DRIVER_UNAVAILABLE" and took < BOUND_S


@pytest.mark.parametrize(
    ("change", "needle"),
    [({"path": "/no_such_database_ultimat3"}, "does not exist"),
     ({"user": "no_such_role_ultimat3"}, "does not exist")],
)  # fmt: skip
async def test_a_missing_database_or_role_is_config_invalid_not_retryable(
    database_url: str, change: dict[str, Any], needle: str
) -> None:
    error, took = await _refusal(_with(database_url, **change))
    assert error.code == "X_CONFIG_INVALID" and needle in error.message
    assert "retrying changes nothing" in (error.fix or "")
    assert took < BOUND_S


def test_the_cli_answers_a_malformed_dsn_with_the_code_not_a_traceback(
    capsys: pytest.CaptureFixture[str],
) -> None:
    assert main(["--database-url", "mysql://foo", "jobs", "list", "--json"]) == 1
    captured = capsys.readouterr()
    assert json.loads(captured.err)["error"]["code"] == "X_CONFIG_INVALID"
    assert "Traceback" not in captured.err


def test_the_cli_says_x_db_migrate_for_a_schema_nobody_migrated(
    capsys: pytest.CaptureFixture[str], database_url: str
) -> None:
    argv = ["--database-url", database_url, "--schema", "x_never_migrated_ultimat3"]
    assert main([*argv, "jobs", "list", "--json"]) == 1
    error = json.loads(capsys.readouterr().err)["error"]
    assert error["code"] == "X_CONFIG_INVALID"
    assert error["fix"].startswith("x db migrate --database-url '")
    assert error["fix"].endswith("--schema x_never_migrated_ultimat3")
    assert "await migrate" not in error["fix"]
