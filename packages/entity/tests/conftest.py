"""Fixtures of the entity tests: a real Postgres (``DATABASE_URL``, default
``postgresql://postgres@127.0.0.1:5432/test``), each test on a schema of its own, dropped after."""

from __future__ import annotations

import os
import uuid
from collections.abc import AsyncIterator, Callable, Iterator, Sequence

import psycopg
import pytest
from psycopg import sql

from ultimat3.entity import Database, Entity, KeyRing, database

DEFAULT_DATABASE_URL = "postgresql://postgres@127.0.0.1:5432/test"

MakeDb = Callable[..., Database]


@pytest.fixture(scope="session")
def database_url() -> str:
    return os.environ.get("DATABASE_URL") or DEFAULT_DATABASE_URL


async def drop_schema(url: str, schema: str) -> None:
    async with await psycopg.AsyncConnection.connect(url, autocommit=True) as conn:
        await conn.execute(
            sql.SQL("DROP SCHEMA IF EXISTS {} CASCADE").format(sql.Identifier(schema))
        )


@pytest.fixture
def sync_schema(database_url: str) -> Iterator[str]:
    """A schema name of this test's own for tests that run their own event loop per example
    (hypothesis over Postgres); dropped afterwards."""
    schema = f"x_ent_{uuid.uuid4().hex[:16]}"
    try:
        yield schema
    finally:
        with psycopg.connect(database_url, autocommit=True) as conn:
            conn.execute(sql.SQL("DROP SCHEMA IF EXISTS {} CASCADE").format(sql.Identifier(schema)))


@pytest.fixture
async def make_db(database_url: str) -> AsyncIterator[MakeDb]:
    """``make_db(entities, key_ring=None)``: a database on a fresh schema of this test's own."""
    made: list[Database] = []

    def make(
        entities: Sequence[Entity], key_ring: KeyRing | None = None, *, schema: str | None = None
    ) -> Database:
        """``schema=`` another database's schema: a second view of the same tables."""
        schema = schema or f"x_ent_{uuid.uuid4().hex[:16]}"
        db = database(database_url, entities, schema=schema, key_ring=key_ring)
        made.append(db)
        return db

    try:
        yield make
    finally:
        for db in made:
            await db.close()
        for schema in {db.schema for db in made}:
            assert schema is not None
            await drop_schema(database_url, schema)
