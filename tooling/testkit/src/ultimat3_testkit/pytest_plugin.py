"""The workspace's shared pytest fixtures (a pytest plugin: the ``pytest11`` entry point of
``ultimat3-testkit``, so every test folder of the workspace has them without a conftest that
edits ``sys.path``).

Postgres ones run against a real server (``DATABASE_URL``, default
``postgresql://postgres@127.0.0.1:5432/test``) and never skip: a missing server fails.
``engine`` / ``pg_engine`` (``engine_drivers``) are the fixtures every engine test runs over,
memory and Postgres.
"""

from __future__ import annotations

import os
import uuid
from collections import Counter
from collections.abc import AsyncIterator
from typing import Any

import pytest

from ultimat3.jobs.postgres import PostgresJobDriver, migrate, postgres_job_driver
from ultimat3.jobs.postgres._db import Database
from ultimat3_testkit.engine_drivers import drop_schema, engine, pg_engine

__all__ = [
    "database_url",
    "engine",
    "pg_driver",
    "pg_engine",
    "pg_schema",
    "scratch_schemas",
    "statements",
]

DEFAULT_DATABASE_URL = "postgresql://postgres@127.0.0.1:5432/test"


@pytest.fixture(scope="session")
def database_url() -> str:
    """The server the Postgres tests use."""
    return os.environ.get("DATABASE_URL") or DEFAULT_DATABASE_URL


@pytest.fixture
async def pg_schema(database_url: str) -> AsyncIterator[str]:
    """A schema of this test's own, migrated, dropped afterwards (xdist-safe: unique names)."""
    schema = f"x_test_{uuid.uuid4().hex[:16]}"
    await migrate(database_url, schema=schema)
    try:
        yield schema
    finally:
        await drop_schema(database_url, schema)


@pytest.fixture
async def pg_driver(database_url: str, pg_schema: str) -> AsyncIterator[PostgresJobDriver]:
    """A Postgres driver over this test's own schema; closed afterwards."""
    driver = postgres_job_driver(database_url, schema=pg_schema)
    try:
        yield driver
    finally:
        await driver.close()


@pytest.fixture
async def scratch_schemas(database_url: str) -> AsyncIterator[list[str]]:
    """A list the test appends the schemas it creates to; each is dropped afterwards."""
    made: list[str] = []
    try:
        yield made
    finally:
        for schema in made:
            await drop_schema(database_url, schema)


@pytest.fixture
def statements(monkeypatch: pytest.MonkeyPatch) -> Counter[str]:
    """Counts the statements every Postgres driver of the test sends, by name (the throttle's
    trailing wake, sent on its own timer, is not counted)."""
    sent: Counter[str] = Counter()
    for method in ("fetchall", "fetchone", "rowcount"):
        original = getattr(Database, method)

        async def counted(self: Database, name: str, *a: Any, _o: Any = original, **kw: Any) -> Any:
            if name != "wake_probe":
                sent[name] += 1
            return await _o(self, name, *a, **kw)

        monkeypatch.setattr(Database, method, counted)
    return sent
