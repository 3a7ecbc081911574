"""A job enqueued inside ``db.transaction()`` joins it: committed with the business rows, or
gone with them on a rollback — ultimat3.entity and ultimat3.jobs over one real Postgres."""

from __future__ import annotations

import os
import uuid
from collections.abc import AsyncIterator
from typing import Any

import psycopg
import pytest
from psycopg import sql
from pydantic import BaseModel

from ultimat3.core import new_id, swap_adapter
from ultimat3.entity import Database, database, entity, text
from ultimat3.entity import uuid as uuid_col
from ultimat3.jobs import job
from ultimat3.jobs.adapter import JOB_DRIVER
from ultimat3.jobs.postgres import PostgresJobDriver, migrate, postgres_job_driver

URL = os.environ.get("DATABASE_URL") or "postgresql://postgres@127.0.0.1:5432/test"

posts = entity("posts", columns={"id": uuid_col().primary_key(), "title": text()})


class Notify(BaseModel):
    post_id: str


async def _notify(input: Notify, step: Any, ctx: Any) -> None:
    return None


notify = job(
    input=Notify, name="entity_tx.notify", idempotency_key=lambda i: i.post_id, run=_notify
)


async def _drop(schema: str) -> None:
    async with await psycopg.AsyncConnection.connect(URL, autocommit=True) as conn:
        await conn.execute(
            sql.SQL("DROP SCHEMA IF EXISTS {} CASCADE").format(sql.Identifier(schema))
        )


@pytest.fixture
async def both() -> AsyncIterator[tuple[Database, PostgresJobDriver]]:
    tag = uuid.uuid4().hex[:12]
    app_schema, jobs_schema = f"x_ent_app_{tag}", f"x_ent_jobs_{tag}"
    await migrate(URL, schema=jobs_schema)
    driver = postgres_job_driver(URL, schema=jobs_schema)
    db = database(URL, [posts], schema=app_schema)
    await db.migrate()
    try:
        with swap_adapter(JOB_DRIVER, driver):
            yield db, driver
    finally:
        await db.close()
        await driver.close()
        await _drop(app_schema)
        await _drop(jobs_schema)


async def _queued(driver: PostgresJobDriver) -> list[str]:
    claimed = await driver.claim(
        queues=["default"], limit=100, worker_id="w", visibility_timeout_ms=60_000
    )
    return [str(c.payload["post_id"]) for c in claimed]


async def test_a_rolled_back_transaction_takes_its_enqueued_job_with_it(
    both: tuple[Database, PostgresJobDriver],
) -> None:
    db, driver = both
    pid = new_id()

    async def publish_then_fail() -> None:
        async with db.transaction():
            await db.posts.insert({"id": pid, "title": "draft"})
            await notify.enqueue(Notify(post_id=pid))
            raise RuntimeError("a business rule failed after the enqueue")

    with pytest.raises(RuntimeError, match="after the enqueue"):
        await publish_then_fail()
    assert await db.posts.count() == 0
    assert await _queued(driver) == []


async def test_a_committed_transaction_queues_the_job_with_the_row(
    both: tuple[Database, PostgresJobDriver],
) -> None:
    db, driver = both
    pid = new_id()
    async with db.transaction():
        await db.posts.insert({"id": pid, "title": "published"})
        await notify.enqueue(Notify(post_id=pid))
        assert await _queued(driver) == [], "a worker saw the job before the commit"
    assert [r["id"] for r in await db.posts.all()] == [pid]
    assert await _queued(driver) == [pid]


async def test_an_enqueue_in_a_rolled_back_savepoint_is_gone_and_the_outer_commits(
    both: tuple[Database, PostgresJobDriver],
) -> None:
    db, driver = both
    kept, dropped = new_id(), new_id()
    async with db.transaction():
        await notify.enqueue(Notify(post_id=kept))

        async def inner_fails() -> None:
            async with db.transaction():
                await db.posts.insert({"id": dropped, "title": "inner"})
                await notify.enqueue(Notify(post_id=dropped))
                raise RuntimeError("inner block fails")

        with pytest.raises(RuntimeError, match="inner block fails"):
            await inner_fails()
    assert await db.posts.count() == 0
    assert await _queued(driver) == [kept]


async def test_handles_join_the_jobs_packages_own_transaction_helper(
    both: tuple[Database, PostgresJobDriver],
) -> None:
    from psycopg_pool import AsyncConnectionPool

    from ultimat3.jobs.postgres import transaction

    db, driver = both
    pid = new_id()
    async with AsyncConnectionPool(URL, min_size=1, max_size=1, open=False) as pool:

        async def fails() -> None:
            async with transaction(pool):
                await db.posts.insert({"id": pid, "title": "via jobs.postgres.transaction"})
                await notify.enqueue(Notify(post_id=pid))
                raise RuntimeError("rolled back")

        with pytest.raises(RuntimeError, match="rolled back"):
            await fails()
    assert await db.posts.count() == 0
    assert await _queued(driver) == []
