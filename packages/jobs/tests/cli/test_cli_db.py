"""x db migrate (the Postgres schema, progress on stderr) and x db backfill --list (the ledger)."""

from __future__ import annotations

import asyncio
import json
import os
import sys
import types
import uuid
from typing import Any

import pytest

from ultimat3.core import FrozenClock
from ultimat3.jobs.adapter import memory_job_driver
from ultimat3.jobs.cli import main

Capture = pytest.CaptureFixture[str]


@pytest.fixture
def pg_url() -> str:
    """The real server (CI's DATABASE_URL); these tests never skip: a missing server fails."""
    return os.environ.get("DATABASE_URL") or "postgresql://postgres@127.0.0.1:5432/test"


@pytest.fixture
def migrations(monkeypatch: pytest.MonkeyPatch) -> list[dict[str, Any]]:
    """A stand-in ``ultimat3.jobs.postgres.migrate`` that reports progress and records calls."""
    calls: list[dict[str, Any]] = []

    async def migrate(dsn: str, *, schema: str | None = None, progress: Any = None) -> list[str]:
        calls.append({"dsn": dsn, "schema": schema})
        for name in ("0001_jobs", "0002_steps"):
            if progress is not None:
                progress(f"applying {name}")
        return ["0001_jobs", "0002_steps"]

    fake = types.ModuleType("ultimat3.jobs.postgres")
    fake.migrate = migrate  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, "ultimat3.jobs.postgres", fake)
    return calls


def test_migrate_runs_on_the_pg_url_with_progress_on_stderr(
    capsys: Capture, migrations: list[dict[str, Any]]
) -> None:
    env = {"DATABASE_URL": "postgresql://app:s3cret@db:5432/app"}
    assert main(["db", "migrate", "--json", "--schema", "jobs"], env=env) == 0
    assert migrations == [{"dsn": "postgresql://app:s3cret@db:5432/app", "schema": "jobs"}]
    captured = capsys.readouterr()
    out = json.loads(captured.out)
    assert out["migrated"] is True and out["schema"] == "jobs"
    assert out["result"] == ["0001_jobs", "0002_steps"]
    assert out["database"] == "postgresql://app:***@db:5432/app"
    assert "applying 0001_jobs" in captured.err and "applying 0002_steps" in captured.err
    assert "migrating postgresql://app:***@db:5432/app" in captured.err
    assert "s3cret" not in captured.err + captured.out


def test_migrate_json_names_the_default_schema_public(
    capsys: Capture, migrations: list[dict[str, Any]]
) -> None:
    assert main(["db", "migrate", "--json"], env={"DATABASE_URL": "postgresql://db/app"}) == 0
    assert migrations == [{"dsn": "postgresql://db/app", "schema": None}]
    assert json.loads(capsys.readouterr().out)["schema"] == "public"


def test_migrate_prints_what_it_applied_without_json(
    capsys: Capture, migrations: list[dict[str, Any]]
) -> None:
    assert main(["db", "migrate", "--database-url", "postgresql://db/app"], env={}) == 0
    assert "applied versions 0001_jobs, 0002_steps" in capsys.readouterr().out


def test_migrate_needs_a_pg_url_even_with_a_given_driver(capsys: Capture) -> None:
    assert main(["db", "migrate", "--json"], driver=memory_job_driver(), env={}) == 1
    error = json.loads(capsys.readouterr().err)["error"]
    assert error["code"] == "X_CONFIG_INVALID" and "DATABASE_URL" in error["fix"]


def test_migrate_without_the_postgres_driver_is_config_invalid(
    capsys: Capture, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setitem(sys.modules, "ultimat3.jobs.postgres", types.ModuleType("bare"))
    assert main(["db", "migrate", "--json"], env={"DATABASE_URL": "postgresql://db/app"}) == 1
    error = json.loads(capsys.readouterr().err)["error"]
    assert error["code"] == "X_CONFIG_INVALID" and "migrate" in error["message"]


def test_backfill_list_answers_the_whole_ledger_newest_first(capsys: Capture) -> None:
    clock = FrozenClock("2026-03-01T00:00:00Z")
    driver = memory_job_driver(clock=clock)

    async def passes() -> tuple[str, str]:
        old = await driver.backfills.begin("reindex", job_id="job-1", cursor=None)
        await driver.backfills.advance(old.id, rows=500, cursor={"after": 500})
        await driver.backfills.finish(old.id, state="done")
        clock.advance("1m")
        new = await driver.backfills.begin("rescore", job_id=None, cursor={"after": 0})
        return old.id, new.id

    old_id, new_id = asyncio.run(passes())
    assert main(["db", "backfill", "--list", "--json"], driver=driver) == 0
    rows = json.loads(capsys.readouterr().out)["backfills"]
    assert [(r["id"], r["state"]) for r in rows] == [(new_id, "running"), (old_id, "done")]
    assert rows[1]["rows"] == 500 and rows[1]["cursor"] == {"after": 500}
    assert rows[1]["job_id"] == "job-1"

    assert main(["db", "backfill", "--list"], driver=driver) == 0
    text = capsys.readouterr().out
    assert "reindex" in text and "rescore" in text and "500" in text


def test_backfill_without_list_is_a_usage_error(capsys: Capture) -> None:
    assert main(["db", "backfill"], driver=memory_job_driver()) == 2
    assert "--list" in capsys.readouterr().err


# --- against the real server (DATABASE_URL; never skipped) --------------------------------------


def test_migrate_list_and_show_against_postgres(capsys: Capture, pg_url: str) -> None:
    import psycopg
    from psycopg import sql

    from ultimat3.core import new_id
    from ultimat3.jobs.adapter import EnqueueRequest
    from ultimat3.jobs.postgres import postgres_job_driver

    schema = f"x_cli_{uuid.uuid4().hex[:16]}"
    env = {"DATABASE_URL": pg_url}
    try:
        assert main(["db", "migrate", "--json", "--schema", schema], env=env) == 0
        first = json.loads(capsys.readouterr().out)
        assert first["migrated"] is True and first["result"]
        assert main(["db", "migrate", "--json", "--schema", schema], env=env) == 0
        assert json.loads(capsys.readouterr().out)["result"] == []

        job_id = new_id()

        async def enqueue() -> None:
            driver = postgres_job_driver(pg_url, schema=schema)
            try:
                request = EnqueueRequest(
                    id=job_id,
                    run_id=new_id(),
                    name="onboard",
                    queue="default",
                    payload={"n": 1},
                    idempotency_key=f"onboard:{job_id}",
                    max_attempts=3,
                )
                await driver.enqueue(request)
            finally:
                await driver.close()

        asyncio.run(enqueue())
        assert main(["jobs", "list", "--json", "--schema", schema], env=env) == 0
        rows = json.loads(capsys.readouterr().out)["jobs"]
        assert [(r["id"], r["state"]) for r in rows] == [(job_id, "ready")]
        assert main(["jobs", "show", job_id, "--json", "--schema", schema], env=env) == 0
        assert json.loads(capsys.readouterr().out)["idempotency_key"] == f"onboard:{job_id}"
        assert main(["jobs", "show", new_id(), "--json", "--schema", schema], env=env) == 1
        assert json.loads(capsys.readouterr().err)["error"]["code"] == "X_JOB_NOT_FOUND"
    finally:

        async def drop() -> None:
            async with await psycopg.AsyncConnection.connect(pg_url, autocommit=True) as c:
                await c.execute(
                    sql.SQL("DROP SCHEMA IF EXISTS {} CASCADE").format(sql.Identifier(schema))
                )

        asyncio.run(drop())
