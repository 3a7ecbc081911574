"""x as a real process against the real Postgres server: migrate, a worker that runs a job, the
job shown done, and SIGTERM draining the worker to a clean exit."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
import time
import uuid
from pathlib import Path

import pytest

from ultimat3.core import new_id


@pytest.fixture
def pg_url() -> str:
    """The real server (CI's DATABASE_URL); these tests never skip: a missing server fails."""
    return os.environ.get("DATABASE_URL") or "postgresql://postgres@127.0.0.1:5432/test"


APP = """
from typing import Any

from pydantic import BaseModel

from ultimat3.jobs import job


class Ping(BaseModel):
    n: int


async def ping(input: Ping, step: Any, ctx: Any) -> int:
    return await step.run("double", lambda signal: input.n * 2)


JOBS = [job(input=Ping, idempotency_key=lambda i: f"ping:{i.n}", name="ping", run=ping)]
"""


def x(*argv: str, env: dict[str, str], cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "ultimat3.jobs.cli", *argv],
        env=env,
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=60,
    )


def test_a_worker_process_runs_a_job_and_drains_on_sigterm(tmp_path: Path, pg_url: str) -> None:
    import asyncio

    import psycopg
    from psycopg import sql

    from ultimat3.jobs.adapter import EnqueueRequest
    from ultimat3.jobs.postgres import postgres_job_driver

    schema = f"x_cli_{uuid.uuid4().hex[:16]}"
    module = f"cli_process_app_{uuid.uuid4().hex}"
    (tmp_path / f"{module}.py").write_text(textwrap.dedent(APP))
    env = {**os.environ, "DATABASE_URL": pg_url}
    env.pop("REDIS_URL", None)
    try:
        migrated = x("db", "migrate", "--schema", schema, "--json", env=env, cwd=tmp_path)
        assert migrated.returncode == 0, migrated.stderr
        assert "x db migrate: migrating" in migrated.stderr

        job_id = new_id()

        async def enqueue() -> None:
            driver = postgres_job_driver(pg_url, schema=schema)
            try:
                await driver.enqueue(
                    EnqueueRequest(
                        id=job_id,
                        run_id=new_id(),
                        name="ping",
                        queue="default",
                        payload={"n": 21},
                        idempotency_key="ping:21",
                        max_attempts=3,
                    )
                )
            finally:
                await driver.close()

        asyncio.run(enqueue())
        command = ["worker", "--app", f"{module}:JOBS", "--schema", schema, "--json"]
        worker = subprocess.Popen(
            [sys.executable, "-m", "ultimat3.jobs.cli", *command],
            env=env,
            cwd=tmp_path,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        try:
            state = None
            deadline = time.monotonic() + 30
            while time.monotonic() < deadline:
                shown = x(
                    "jobs", "show", job_id, "--schema", schema, "--json", env=env, cwd=tmp_path
                )
                assert shown.returncode == 0, shown.stderr
                row = json.loads(shown.stdout)
                state = row["state"]
                if state == "done":
                    break
                time.sleep(0.2)
            assert state == "done", row
            assert row["result"] == 42
            assert row["steps"]["double"]["executions"] == 1
            worker.send_signal(signal.SIGTERM)
            out, err = worker.communicate(timeout=30)
        finally:
            if worker.poll() is None:
                worker.kill()
                worker.communicate()
        assert worker.returncode == 0, err
        answer = json.loads(out)
        assert answer["signal"] == "SIGTERM" and answer["stats"]["completed"] == 1
        assert "SIGTERM received: draining" in err
    finally:

        async def drop() -> None:
            async with await psycopg.AsyncConnection.connect(pg_url, autocommit=True) as c:
                await c.execute(
                    sql.SQL("DROP SCHEMA IF EXISTS {} CASCADE").format(sql.Identifier(schema))
                )

        asyncio.run(drop())
