"""``x relay`` and ``x worker --relay`` as real processes against the real Postgres server: rows
staged in the app's transaction are published (woken by the commit), SIGTERM stops the loop
after its pass, and a relay with no outbox, or an outbox nobody migrated, is refused at once."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import sys
import textwrap
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import psycopg
import pytest
from psycopg import sql

from ultimat3.core import new_id
from ultimat3.jobs.adapter import EnqueueRequest
from ultimat3.jobs.postgres import postgres_job_driver, postgres_outbox_store


@pytest.fixture
def pg_url() -> str:
    return os.environ.get("DATABASE_URL") or "postgresql://postgres@127.0.0.1:5432/test"


@pytest.fixture
def schema(pg_url: str) -> Iterator[str]:
    name = f"x_relay_{uuid.uuid4().hex[:16]}"
    try:
        yield name
    finally:
        with psycopg.connect(pg_url, autocommit=True) as conn:
            conn.execute(sql.SQL("DROP SCHEMA IF EXISTS {} CASCADE").format(sql.Identifier(name)))


def x(*argv: str, env: dict[str, str], cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "ultimat3.jobs.cli", *argv],
        env=env,
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=60,
    )


def spawn(*argv: str, env: dict[str, str], cwd: Path) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, "-m", "ultimat3.jobs.cli", *argv],
        env=env,
        cwd=cwd,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def req(i: int, name: str = "relayed") -> EnqueueRequest:
    return EnqueueRequest(
        id=new_id(),
        run_id=new_id(),
        name=name,
        queue="default",
        payload={"n": i},
        idempotency_key=f"r{i}",
        max_attempts=3,
    )


async def _stage(pg_url: str, schema: str, requests: list[EnqueueRequest]) -> None:
    store = postgres_outbox_store(pg_url, schema=schema)
    try:
        async with await psycopg.AsyncConnection.connect(pg_url) as conn:
            await store.stage(conn, requests)
            await conn.commit()
    finally:
        await store.close()


async def _states(pg_url: str, schema: str, name: str) -> list[str]:
    driver = postgres_job_driver(pg_url, schema=schema)
    try:
        return [r.state for r in await driver.introspect.list(name=name)]
    finally:
        await driver.close()


def _wait_for(pg_url: str, schema: str, name: str, want: int, pred: str | None = None) -> list[str]:
    deadline = time.monotonic() + 20
    states: list[str] = []
    while time.monotonic() < deadline:
        states = asyncio.run(_states(pg_url, schema, name))
        if len(states) >= want and (pred is None or all(s == pred for s in states)):
            break
        time.sleep(0.1)
    return states


def _wait_line(proc: subprocess.Popen[str], text: str) -> list[str]:
    assert proc.stderr is not None
    seen: list[str] = []
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        line = proc.stderr.readline()
        if not line:
            break
        seen.append(line)
        if text in line:
            return seen
    raise AssertionError(f"never printed {text!r}: {seen}")


def test_x_relay_publishes_staged_rows_and_stops_on_sigterm(
    tmp_path: Path, pg_url: str, schema: str
) -> None:
    env = {**os.environ, "DATABASE_URL": pg_url}
    assert x("db", "migrate", "--schema", schema, env=env, cwd=tmp_path).returncode == 0
    asyncio.run(_stage(pg_url, schema, [req(0)]))  # staged before the relay starts
    relay = spawn(
        "relay", "--schema", schema, "--relay-idle-max-ms", "60000", "--json", env=env, cwd=tmp_path
    )
    try:
        _wait_line(relay, "x relay: publishing the outbox")
        assert _wait_for(pg_url, schema, "relayed", 1) == ["ready"]
        time.sleep(1.0)  # idle now: its next poll is many seconds away, the commit wakes it
        asyncio.run(_stage(pg_url, schema, [req(1), req(2)]))
        assert len(_wait_for(pg_url, schema, "relayed", 3)) == 3
        relay.send_signal(signal.SIGTERM)
        out, err = relay.communicate(timeout=30)
    finally:
        if relay.poll() is None:
            relay.kill()
            relay.wait()
    assert relay.returncode == 0, err
    answer = json.loads(out)
    assert answer["signal"] == "SIGTERM"
    assert answer["stats"]["published"] == 3 and answer["stats"]["wakes"] >= 1
    assert answer["stats"]["running"] is False


APP = """
from typing import Any

from pydantic import BaseModel

from ultimat3.jobs import job


class N(BaseModel):
    n: int


async def body(input: N, step: Any, ctx: Any) -> int:
    return input.n


relayed = job(input=N, idempotency_key=lambda i: f"r{i.n}", name="relayed", run=body)
"""


def test_x_worker_relay_publishes_and_runs_what_the_app_staged(
    tmp_path: Path, pg_url: str, schema: str
) -> None:
    module = f"relay_app_{uuid.uuid4().hex}"
    (tmp_path / f"{module}.py").write_text(textwrap.dedent(APP))
    env = {**os.environ, "DATABASE_URL": pg_url}
    assert x("db", "migrate", "--schema", schema, env=env, cwd=tmp_path).returncode == 0
    worker = spawn(
        "worker", "--app", f"{module}:relayed", "--schema", schema, "--relay", "--json",
        env=env, cwd=tmp_path,
    )  # fmt: skip
    try:
        _wait_line(worker, "running; SIGTERM")
        asyncio.run(_stage(pg_url, schema, [req(i) for i in range(3)]))
        assert _wait_for(pg_url, schema, "relayed", 3, pred="done") == ["done"] * 3
        worker.send_signal(signal.SIGTERM)
        out, err = worker.communicate(timeout=30)
    finally:
        if worker.poll() is None:
            worker.kill()
            worker.wait()
    assert worker.returncode == 0, err
    answer = json.loads(out)
    assert answer["relay"]["published"] == 3 and answer["stats"]["completed"] == 3


def _error(stderr: str) -> dict[str, str]:
    doc = json.loads(stderr[stderr.index("{\n") :])
    return doc["error"]  # type: ignore[no-any-return]


def test_x_relay_refuses_a_missing_or_unmigrated_outbox(
    tmp_path: Path, pg_url: str, schema: str
) -> None:
    env = {k: v for k, v in os.environ.items() if k not in ("DATABASE_URL", "OUTBOX_DATABASE_URL")}
    start = time.monotonic()
    nothing = x("relay", "--json", "--driver", "redis", "--redis-url", "redis://127.0.0.1:6379/0",
                env=env, cwd=tmp_path)  # fmt: skip
    assert nothing.returncode == 1
    err = _error(nothing.stderr)
    assert err["code"] == "X_CONFIG_INVALID" and "--outbox-url" in err["fix"]
    unmigrated = x("relay", "--json", "--database-url", pg_url, "--schema", schema,
                   env=env, cwd=tmp_path)  # fmt: skip
    assert unmigrated.returncode == 1, unmigrated.stdout
    err = _error(unmigrated.stderr)
    assert err["code"] == "X_CONFIG_INVALID" and "x db migrate" in err["fix"]
    assert time.monotonic() - start < 30
