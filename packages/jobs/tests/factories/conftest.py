"""Fixtures of the entity factories' tests: entity databases on the real Postgres
(``DATABASE_URL``), each test on schemas of its own, dropped afterwards."""

from __future__ import annotations

import os
import uuid
from collections.abc import AsyncIterator, Callable, Iterator, Sequence

import psycopg
import pytest
from psycopg import sql

from ultimat3.entity import Database, Entity, database

MakeDb = Callable[..., Database]


def _url() -> str:
    return os.environ.get("DATABASE_URL") or "postgresql://postgres@127.0.0.1:5432/test"


def fresh_schema() -> str:
    return f"x_efx_{uuid.uuid4().hex[:16]}"


def drop_schemas(schemas: Sequence[str]) -> None:
    with psycopg.connect(_url(), autocommit=True) as conn:
        for schema in schemas:
            conn.execute(sql.SQL("DROP SCHEMA IF EXISTS {} CASCADE").format(sql.Identifier(schema)))


@pytest.fixture
async def make_db() -> AsyncIterator[MakeDb]:
    """``make_db(entities)``: a database on a fresh schema of this test's own."""
    made: list[Database] = []

    def make(entities: Sequence[Entity], **kw: object) -> Database:
        db = database(_url(), entities, schema=fresh_schema(), **kw)  # type: ignore[arg-type]
        made.append(db)
        return db

    try:
        yield make
    finally:
        for db in made:
            await db.close()
        drop_schemas([db.schema for db in made if db.schema is not None])


@pytest.fixture
def new_schema() -> Iterator[Callable[[], str]]:
    """For tests that run an event loop per hypothesis example: ``new_schema()`` names a fresh
    schema, dropped after the test."""
    made: list[str] = []

    def make() -> str:
        made.append(fresh_schema())
        return made[-1]

    try:
        yield make
    finally:
        drop_schemas(made)
