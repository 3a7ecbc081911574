"""``x jobs drain --to redis``, driven as a user drives it (the CLI's ``main`` and a real ``x``
process) against a real Postgres and a redis-server of the test's own: the rows no worker holds
move with their steps, none is lost or doubled across a crash in the middle, Redis's live-key
dedupe keeps one live job per key, and every refusal names its offence before anything moves."""

from __future__ import annotations

import asyncio
import io
import json
import os
import signal
import subprocess
import sys
import time
import uuid
from collections.abc import AsyncIterator
from datetime import datetime
from typing import Any

import psycopg
import pytest
from psycopg import sql
from pydantic import BaseModel

from ultimat3.core import XError, new_id, swap_adapter
from ultimat3.jobs import job, job_worker
from ultimat3.jobs.adapter import JOB_DRIVER, EnqueueRequest, job_cursor
from ultimat3.jobs.cli._main import main_async
from ultimat3.jobs.postgres import PostgresJobDriver, migrate, postgres_job_driver
from ultimat3.jobs.postgres._drain import PostgresDrainBatch
from ultimat3.jobs_redis import RedisJobDriver, redis_job_driver

DATABASE_URL = os.environ.get("DATABASE_URL") or "postgresql://postgres@127.0.0.1:5432/test"


@pytest.fixture
async def pg() -> AsyncIterator[PostgresJobDriver]:
    schema = f"x_test_{uuid.uuid4().hex[:16]}"
    await migrate(DATABASE_URL, schema=schema)
    driver = postgres_job_driver(DATABASE_URL, schema=schema)
    try:
        yield driver
    finally:
        await driver.close()
        async with await psycopg.AsyncConnection.connect(DATABASE_URL, autocommit=True) as conn:
            await conn.execute(
                sql.SQL("DROP SCHEMA IF EXISTS {} CASCADE").format(sql.Identifier(schema))
            )


@pytest.fixture
async def target(redis_server: Any) -> AsyncIterator[RedisJobDriver]:
    """The Redis the drain moves onto: a server of the test's own (fsync always), prefix 'x',
    the prefix the command uses."""
    driver = redis_job_driver(redis_server.url)
    try:
        yield driver
    finally:
        await driver.close()


def env_of(pg: PostgresJobDriver, redis_url: str | None) -> dict[str, str]:
    env = {"DATABASE_URL": DATABASE_URL}
    if redis_url is not None:
        env["REDIS_URL"] = redis_url
    return env


async def x(*argv: str, pg: PostgresJobDriver, redis_url: str | None) -> tuple[int, Any, list[str]]:
    """``x <argv> --schema <pg's> --json`` through the CLI's main; answers the exit code, stdout
    as JSON (or None) and the stderr lines."""
    out, err = io.StringIO(), io.StringIO()
    code = await main_async(
        [*argv, "--schema", pg.schema, "--json"],
        env=env_of(pg, redis_url),
        stdout=out,
        stderr=err,
    )
    text = out.getvalue()
    return code, (json.loads(text) if text.strip() else None), err.getvalue().splitlines()


def request(n: int, *, queue: str = "mail", delay_ms: int | None = None) -> EnqueueRequest:
    return EnqueueRequest(
        id=new_id(),
        run_id=new_id(),
        name="drain.mail",
        queue=queue,
        payload={"n": n},
        idempotency_key=f"mail:{n}",
        max_attempts=3,
        tenant_id="acme" if n % 2 else None,
        delay_ms=delay_ms,
    )


async def every_row(intro: Any) -> list[Any]:
    rows: list[Any] = []
    after = None
    while True:
        page = await intro.list(limit=200, after=after)
        rows.extend(page)
        if len(page) < 200:
            return rows
        after = job_cursor(page[-1])


async def pg_rows(pg: PostgresJobDriver) -> dict[str, Any]:
    return {r.id: r for r in await every_row(pg.introspect)}


async def redis_rows(driver: RedisJobDriver) -> dict[str, Any]:
    rows = await every_row(driver.introspect)
    assert len({r.id for r in rows}) == len(rows), "one id twice"
    return {r.id: r for r in rows}


class Mail(BaseModel):
    n: int


executed: list[str] = []


async def _send(input: Mail, step: Any, ctx: Any) -> int:
    async def render(signal: Any) -> str:
        executed.append(f"render:{input.n}")
        return f"hello {input.n}"

    body = await step.run("render", render)
    executed.append(f"send:{input.n}:{body}")
    return input.n


mail = job(input=Mail, idempotency_key=lambda i: f"mail:{i.n}", name="drain.mail", run=_send)


def ms(value: Any) -> Any:
    """A time to Redis's resolution (milliseconds); anything else as it is."""
    if isinstance(value, datetime):
        return value.replace(microsecond=value.microsecond // 1000 * 1000)
    return value


COPIED = ("run_id", "name", "queue", "state", "attempts", "max_attempts", "run_at",
          "created_at", "idempotency_key", "payload", "tenant_id", "last_error")  # fmt: skip


async def test_drain_moves_ready_and_delayed_rows_with_their_steps_and_a_retry_replays(
    pg: PostgresJobDriver, target: RedisJobDriver, redis_server: Any
) -> None:
    ready = await pg.enqueue_many([request(n) for n in range(23)])
    delayed = await pg.enqueue_many(
        [request(n, queue="slow", delay_ms=3_600_000) for n in (100, 101)]
    )
    # A job that ran once: its step completed, then the body failed and it waits for its retry.
    (retried,) = await pg.enqueue_many([request(200, queue="slow")])
    (claimed,) = await pg.claim(
        queues=["slow"], limit=1, worker_id="w", visibility_timeout_ms=30_000
    )
    assert claimed.id == retried.id
    assert await pg.steps.record(claimed.id, "render", state="completed", worker_id="w",
                                 claim=claimed.claim, output="hello 200")  # fmt: skip
    assert await pg.nack(claimed.id, worker_id="w", claim=claimed.claim, outcome="retry",
                         error={"code": "X_BOOM", "message": "smtp down"})  # fmt: skip
    # A finished job stays where it is.
    (finished,) = await pg.enqueue_many([request(300, queue="done")])
    (c,) = await pg.claim(queues=["done"], limit=1, worker_id="w", visibility_timeout_ms=30_000)
    assert await pg.ack(c.id, worker_id="w", claim=c.claim, result=1)
    before = await pg_rows(pg)

    code, out, err = await x("jobs", "drain", "--to", "redis", "--batch", "7", pg=pg,
                             redis_url=redis_server.url)  # fmt: skip
    assert code == 0, err
    assert (out["moved"], out["present"], out["deduped"]) == (26, 0, 0)
    assert out["batches"] == 5  # mail: 7 + 7 + 7 + 2; slow: 3
    assert sorted(out["queues"]) == ["mail", "slow"] and out["paused"] == []
    assert sum("batch" in line for line in err) == 5, err

    assert set(await pg_rows(pg)) == {finished.id}, "only the finished row stays on Postgres"
    assert await pg.introspect.paused_queues() == [], "the queues the drain paused are resumed"
    moved = await redis_rows(target)
    assert set(moved) == {r.id for r in (*ready, *delayed, retried)}
    for job_id, row in moved.items():
        was = before[job_id]
        for name in COPIED:
            assert ms(getattr(row, name)) == ms(getattr(was, name)), (name, was, row)
    shown = await target.introspect.show(retried.id)
    assert list(shown.steps) == ["render"]
    assert (shown.steps["render"].state, shown.steps["render"].output) == ("completed", "hello 200")

    # On Redis the retry replays the completed step from storage and runs the rest.
    executed.clear()
    with swap_adapter(JOB_DRIVER, target):
        worker = job_worker(jobs=[mail], queues=["slow"], poll_interval_ms=10,
                            idle_poll_max_ms=20, handle_signals=False)  # fmt: skip
        await worker.start()
        try:
            for _ in range(500):
                if (await target.introspect.show(retried.id)).state == "done":
                    break
                await asyncio.sleep(0.02)
        finally:
            await worker.stop()
    assert executed == ["send:200:hello 200"], "the completed step ran again"
    assert (await target.introspect.show(retried.id)).attempts == 2


async def test_a_key_redis_already_holds_live_is_deduped_onto_that_job(
    pg: PostgresJobDriver, target: RedisJobDriver, redis_server: Any
) -> None:
    on_pg = await pg.enqueue_many([request(n) for n in range(3)])
    (already,) = await target.enqueue_many([request(1)])  # the app enqueued mail:1 on Redis too
    code, out, _ = await x("jobs", "drain", "--to", "redis", pg=pg, redis_url=redis_server.url)
    assert code == 0
    assert (out["moved"], out["deduped"]) == (2, 1)
    assert out["deduped_onto"] == [{"id": on_pg[1].id, "holder": already.id}]
    rows = await redis_rows(target)
    assert set(rows) == {on_pg[0].id, already.id, on_pg[2].id}
    assert await pg_rows(pg) == {}


async def test_a_crash_between_redis_and_the_commit_loses_nothing_and_doubles_nothing(
    pg: PostgresJobDriver, target: RedisJobDriver, redis_server: Any, monkeypatch: Any
) -> None:
    made = await pg.enqueue_many([request(n) for n in range(20)])
    deletes = 0
    real_delete = PostgresDrainBatch.delete

    async def dies_on_the_second(self: PostgresDrainBatch) -> int:
        nonlocal deletes
        deletes += 1
        if deletes == 2:  # batch 2 landed on Redis; the process dies before its commit
            raise KeyboardInterrupt("killed")
        return await real_delete(self)

    monkeypatch.setattr(PostgresDrainBatch, "delete", dies_on_the_second)
    with pytest.raises(KeyboardInterrupt):
        await x("jobs", "drain", "--to", "redis", "--batch", "6", pg=pg,
                redis_url=redis_server.url)  # fmt: skip
    monkeypatch.setattr(PostgresDrainBatch, "delete", real_delete)
    assert len(await redis_rows(target)) == 12, "batches 1 and 2 reached Redis"
    assert len(await pg_rows(pg)) == 14, "batch 2 rolled back onto Postgres"
    assert await pg.introspect.paused_queues() == ["mail"]
    assert (
        await pg.claim(queues=["mail"], limit=50, worker_id="w", visibility_timeout_ms=1000) == []
    )

    code, out, _ = await x("jobs", "drain", "--to", "redis", "--batch", "6", pg=pg,
                           redis_url=redis_server.url)  # fmt: skip
    assert code == 0
    assert (out["moved"], out["present"], out["deduped"]) == (8, 6, 0)
    assert out["paused"] == ["mail"], "paused by the crashed run: left for the operator"
    assert await pg_rows(pg) == {}
    rows = await redis_rows(target)
    assert set(rows) == {r.id for r in made}
    assert {r.state for r in rows.values()} == {"ready"}
    assert (await target.stats())[0].ready == 20


async def test_a_drain_stopped_by_redis_says_what_to_do_and_a_rerun_finishes(
    pg: PostgresJobDriver, target: RedisJobDriver, redis_server: Any, monkeypatch: Any
) -> None:
    made = await pg.enqueue_many([request(n) for n in range(9)])
    real_import = RedisJobDriver.import_jobs
    calls = 0

    async def down_on_the_second(self: RedisJobDriver, jobs: Any) -> Any:
        nonlocal calls
        calls += 1
        if calls == 2:
            raise XError("X_DRIVER_UNAVAILABLE", "Redis went away", fix="start it")
        return await real_import(self, jobs)

    monkeypatch.setattr(RedisJobDriver, "import_jobs", down_on_the_second)
    code, out, err = await x("jobs", "drain", "--to", "redis", "--batch", "4", pg=pg,
                             redis_url=redis_server.url)  # fmt: skip
    assert code == 1 and out is None
    assert any("mail stay paused on Postgres" in line for line in err), err
    assert '"X_DRIVER_UNAVAILABLE"' in "\n".join(err)
    assert len(await redis_rows(target)) == 4 and len(await pg_rows(pg)) == 5
    monkeypatch.setattr(RedisJobDriver, "import_jobs", real_import)
    code, out, _ = await x("jobs", "drain", "--to", "redis", "--batch", "4", pg=pg,
                           redis_url=redis_server.url)  # fmt: skip
    assert code == 0 and out["moved"] == 5
    assert set(await redis_rows(target)) == {r.id for r in made}


async def test_a_drain_process_killed_mid_run_and_run_again_moves_every_row_once(
    pg: PostgresJobDriver, target: RedisJobDriver, redis_server: Any
) -> None:
    made = await pg.enqueue_many([request(n) for n in range(1500)])
    env = {**os.environ, **env_of(pg, redis_server.url)}
    argv = [sys.executable, "-m", "ultimat3.jobs.cli", "jobs", "drain", "--to", "redis",
            "--batch", "10", "--schema", pg.schema]  # fmt: skip
    process = await asyncio.create_subprocess_exec(
        *argv, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE
    )
    assert process.stderr is not None
    batches = 0
    deadline = time.monotonic() + 60
    while batches < 5 and time.monotonic() < deadline:
        line = (await process.stderr.readline()).decode()
        batches += "batch" in line
    process.send_signal(signal.SIGKILL)
    await process.wait()
    assert batches == 5
    midway = len(await redis_rows(target))
    assert 0 < midway < 1500, "killed in the middle"

    again = await asyncio.create_subprocess_exec(
        *argv, "--json", env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE
    )
    stdout, stderr = await asyncio.wait_for(again.communicate(), timeout=120)
    assert again.returncode == 0, stderr.decode()
    out = json.loads(stdout)
    assert out["moved"] == 1500 - midway
    assert out["present"] <= 10, "at most the batch the kill caught is on both sides"
    assert await pg_rows(pg) == {}
    rows = await redis_rows(target)
    assert set(rows) == {r.id for r in made}, "a row lost or a row doubled"
    assert (await target.stats())[0].ready == 1500


async def test_running_rows_refuse_the_drain_and_nothing_moves(
    pg: PostgresJobDriver, target: RedisJobDriver, redis_server: Any
) -> None:
    await pg.enqueue_many([request(n) for n in range(3)])
    await pg.claim(queues=["mail"], limit=1, worker_id="w", visibility_timeout_ms=30_000)
    code, out, err = await x("jobs", "drain", "--to", "redis", pg=pg, redis_url=redis_server.url)
    assert code == 1 and out is None
    error = json.loads("\n".join(err[1:]))["error"]
    assert error["code"] == "X_JOB_NOT_REMOVABLE"
    assert "1 running" in error["message"] and "mail" in error["message"]
    assert "SIGTERM" in error["fix"]
    assert await redis_rows(target) == {}
    assert len(await pg_rows(pg)) == 3
    assert await pg.introspect.paused_queues() == [], "the refusal leaves no queue paused"


@pytest.mark.parametrize(
    ("argv", "redis", "code", "said"),
    [
        (("--to", "memory"), True, "X_CONFIG_INVALID", "lost when x exits"),
        (("--to", "postgres"), True, "X_CONFIG_INVALID", "the source is the postgres driver"),
        (("--to", "redis", "--driver", "redis"), True, "X_CONFIG_INVALID", "the source is the"),
        (("--to", "postgres", "--driver", "redis"), True, "X_NOT_IMPLEMENTED", "from redis"),
        (("--to", "redis", "--batch", "0"), True, "X_CONFIG_INVALID", "--batch 0"),
        (("--to", "redis", "--batch", "1001"), True, "X_CONFIG_INVALID", "--batch 1001"),
        (("--to", "redis"), False, "X_CONFIG_INVALID", "neither --redis-url nor REDIS_URL"),
    ],
)
async def test_drain_refusals_name_the_offence_and_move_nothing(
    pg: PostgresJobDriver,
    redis_server: Any,
    argv: tuple[str, ...],
    redis: bool,
    code: str,
    said: str,
) -> None:
    await pg.enqueue_many([request(1)])
    exit_code, out, err = await x("jobs", "drain", *argv, pg=pg,
                                  redis_url=redis_server.url if redis else None)  # fmt: skip
    assert exit_code == 1 and out is None
    error = json.loads("\n".join(err))["error"]
    assert error["code"] == code and said in error["message"], error
    assert error["fix"]
    assert len(await pg_rows(pg)) == 1 and await pg.introspect.paused_queues() == []


async def test_drain_refuses_without_a_database_or_a_reachable_redis(
    pg: PostgresJobDriver, redis_server: Any, dead_url: str
) -> None:
    out, err = io.StringIO(), io.StringIO()
    env = {"REDIS_URL": redis_server.url}
    code = await main_async(["jobs", "drain", "--to", "redis", "--json"], env=env, stdout=out,
                            stderr=err)  # fmt: skip
    assert code == 1
    error = json.loads(err.getvalue())["error"]
    assert error["code"] == "X_CONFIG_INVALID" and "DATABASE_URL" in error["message"]

    await pg.enqueue_many([request(1)])
    code, _, lines = await x("jobs", "drain", "--to", "redis", pg=pg, redis_url=dead_url)
    assert code == 1
    error = json.loads("\n".join(lines))["error"]
    assert error["code"] == "X_DRIVER_UNAVAILABLE"
    assert len(await pg_rows(pg)) == 1 and await pg.introspect.paused_queues() == []
