"""Fixtures of the fault tests: a schema of the test's own on the shared server, worker processes
that never outlive their test, and an embedded PostgreSQL for the faults only our own server may
suffer (a restart).

The helpers (``ultimat3_testkit.faults``) and the worker processes' app
(``ultimat3_testkit.fault_app``) live in the unpublished workspace member tooling/testkit."""

from __future__ import annotations

import shutil
import tempfile
import uuid
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import pytest

from ultimat3.jobs.embedded import EmbeddedPostgres, embedded_postgres
from ultimat3_testkit.faults import (
    Db,
    WorkerFactory,
    WorkerProcess,
    database_url,
    drop_schema,
    make_schema,
)


@pytest.fixture(scope="session")
def db_url() -> str:
    """The shared server (``DATABASE_URL``, default the test database on 127.0.0.1)."""
    return database_url()


@pytest.fixture
async def schema(db_url: str) -> AsyncIterator[str]:
    """A migrated schema of this test's own (with ``fault_effects``), dropped afterwards."""
    name = f"x_faults_{uuid.uuid4().hex[:12]}"
    await make_schema(db_url, name)
    try:
        yield name
    finally:
        await drop_schema(db_url, name)


@pytest.fixture
def db(db_url: str, schema: str) -> Db:
    return Db(db_url, schema)


@pytest.fixture
def workers() -> Iterator[WorkerFactory]:
    """Start worker processes; every one still alive at the end is SIGKILLed (by its pid)."""
    started: list[WorkerProcess] = []

    def start(*args: str, env: dict[str, str] | None = None) -> WorkerProcess:
        proc = WorkerProcess(args, env=env)
        started.append(proc)
        return proc

    try:
        yield start
    finally:
        for proc in started:
            proc.kill()
            shutil.rmtree(proc.dir, ignore_errors=True)


@pytest.fixture
def embedded_pg() -> Iterator[EmbeddedPostgres]:
    """A PostgreSQL 18 of this test's own (a Unix socket in a fresh folder), stopped whoever
    restarted it, then deleted. Not pytest's tmp_path: run as root, the server runs as its own
    user, and pytest keeps its tmp root at 0700."""
    base = Path(tempfile.mkdtemp(prefix="x-faults-pg-"))
    pg = embedded_postgres(base / "pg")
    try:
        pg.start()
        yield pg
    finally:
        pg.stop()
        shutil.rmtree(base, ignore_errors=True)
