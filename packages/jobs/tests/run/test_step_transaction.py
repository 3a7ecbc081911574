"""``step.transaction`` and ``step.key`` (#23): the effect and the checkpoint commit together or
not at all; a key stable across retries and replays. On memory and Postgres (``engine``)."""

from __future__ import annotations

from typing import Any

import psycopg
import pytest
from psycopg import sql
from pydantic import BaseModel

from ultimat3.jobs import Retry, job
from ultimat3.jobs.memory import MemoryTransaction
from ultimat3_testkit.engine_drivers import Engine


class Key(BaseModel):
    key: str = "k"


async def _effects_table(engine: Engine) -> sql.Composed | None:
    """On Postgres, a ``tx_effects`` table in the engine's schema (``None`` on memory)."""
    if not engine.on_postgres:
        return None
    assert engine.database_url is not None and engine.schema is not None
    table = sql.Identifier(engine.schema, "tx_effects")
    async with await psycopg.AsyncConnection.connect(engine.database_url, autocommit=True) as conn:
        await conn.execute(
            sql.SQL("CREATE TABLE {} (job_id text, attempt int, note text)").format(table)
        )
    return sql.SQL("INSERT INTO {} (job_id, attempt, note) VALUES (%s, %s, %s)").format(table)


async def _count(engine: Engine) -> int:
    assert engine.database_url is not None and engine.schema is not None
    table = sql.Identifier(engine.schema, "tx_effects")
    async with await psycopg.AsyncConnection.connect(engine.database_url, autocommit=True) as conn:
        cur = await conn.execute(sql.SQL("SELECT count(*) FROM {}").format(table))
        row = await cur.fetchone()
    assert row is not None
    return int(row[0])


async def test_step_key_is_the_job_id_and_the_step_name_on_every_attempt(engine: Engine) -> None:
    keys: list[str] = []

    @job(input=Key, idempotency_key=lambda i: i.key, retry=Retry(attempts=3, delay=0))
    async def keyed(input: Key, step: Any, ctx: Any) -> None:
        keys.append(step.key("charge"))
        if ctx.attempt < 3:
            raise RuntimeError("again")

    trace = await engine.harness([keyed])(keyed, {})
    assert trace.state == "done"
    assert len(keys) == 3 and len(set(keys)) == 1
    assert keys[0] == f"{trace.id}:charge"


async def test_step_key_refuses_an_empty_or_reserved_name(engine: Engine) -> None:
    @job(input=Key, idempotency_key=lambda i: i.key, retry=Retry(attempts=1))
    async def bad(input: Key, step: Any, ctx: Any) -> None:
        step.key("")

    trace = await engine.harness([bad])(bad, {})
    assert trace.state == "dead"
    assert trace.last_error is not None
    assert trace.last_error["code"] == "X_JOB_DECLARATION_INVALID"


async def test_a_transaction_step_commits_its_effect_once_and_replays_its_output(
    engine: Engine,
) -> None:
    insert = await _effects_table(engine)
    seen: list[Any] = []
    ran: list[int] = []

    @job(input=Key, idempotency_key=lambda i: i.key, retry=Retry(attempts=3, delay=0))
    async def charge(input: Key, step: Any, ctx: Any) -> None:
        async def fn(conn: Any) -> dict[str, int]:
            ran.append(ctx.attempt)
            if insert is not None:
                await conn.execute(insert, (ctx.job_id, ctx.attempt, "charged"))
            else:
                assert isinstance(conn, MemoryTransaction)
            return {"charged": 1}

        seen.append(await step.transaction("charge", fn))
        if ctx.attempt == 1:
            raise RuntimeError("after the checkpoint")

    trace = await engine.harness([charge])(charge, {})
    assert trace.state == "done"
    assert ran == [1]  # the second attempt replays it
    assert seen == [{"charged": 1}, {"charged": 1}]
    assert trace.steps["charge"].state == "completed"
    assert trace.steps["charge"].executions == 1
    if engine.on_postgres:
        assert await _count(engine) == 1


async def test_a_transaction_step_that_raises_rolls_its_effect_back(engine: Engine) -> None:
    insert = await _effects_table(engine)
    ran: list[int] = []

    @job(input=Key, idempotency_key=lambda i: i.key, retry=Retry(attempts=2, delay=0))
    async def flaky(input: Key, step: Any, ctx: Any) -> None:
        async def fn(conn: Any) -> str:
            ran.append(ctx.attempt)
            if insert is not None:
                await conn.execute(insert, (ctx.job_id, ctx.attempt, "half"))
            if ctx.attempt == 1:
                raise RuntimeError("after the effect, before the checkpoint")
            return "ok"

        await step.transaction("charge", fn)

    trace = await engine.harness([flaky])(flaky, {})
    assert trace.state == "done"
    assert ran == [1, 2]
    assert trace.steps["charge"].executions == 2  # one failed, one completed
    if engine.on_postgres:
        assert await _count(engine) == 1  # the first attempt's write rolled back


async def test_an_unserialisable_transaction_output_rolls_back_and_is_terminal(
    engine: Engine,
) -> None:
    insert = await _effects_table(engine)

    @job(input=Key, idempotency_key=lambda i: i.key, retry=Retry(attempts=3, delay=0))
    async def unserialisable(input: Key, step: Any, ctx: Any) -> None:
        async def fn(conn: Any) -> object:
            if insert is not None:
                await conn.execute(insert, (ctx.job_id, ctx.attempt, "x"))
            return object()

        await step.transaction("charge", fn)

    trace = await engine.harness([unserialisable])(unserialisable, {})
    assert trace.state == "dead"
    assert trace.last_error is not None
    assert trace.last_error["code"] == "X_STEP_OUTPUT_UNSERIALIZABLE"
    if engine.on_postgres:
        assert await _count(engine) == 0


async def test_step_transaction_refuses_a_non_callable(engine: Engine) -> None:
    @job(input=Key, idempotency_key=lambda i: i.key, retry=Retry(attempts=1))
    async def bad(input: Key, step: Any, ctx: Any) -> None:
        await step.transaction("charge", 42)

    trace = await engine.harness([bad])(bad, {})
    assert trace.state == "dead"
    assert trace.last_error is not None
    assert trace.last_error["code"] == "X_INVARIANT"
    assert "not a callable" in trace.last_error["message"]


def test_step_transaction_is_documented_on_the_step() -> None:
    from ultimat3.jobs import Step

    assert Step.transaction.__doc__ and "together" in Step.transaction.__doc__
    assert Step.key.__doc__ and "<job id>:<name>" in Step.key.__doc__
    with pytest.raises(TypeError):
        Step.key()  # type: ignore[call-arg]
