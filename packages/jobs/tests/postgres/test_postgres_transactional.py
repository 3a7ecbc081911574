"""Transactional enqueue: a job enqueued on the caller's connection lives and dies with the
caller's transaction, and no worker ever sees it before the commit."""

from __future__ import annotations

import psycopg
import pytest
from psycopg_pool import AsyncConnectionPool

from ultimat3.core import XError, current_connection, new_id
from ultimat3.jobs.adapter import EnqueueRequest
from ultimat3.jobs.postgres import PostgresJobDriver, postgres_job_driver, transaction


def req(queue: str = "q", key: str | None = None) -> EnqueueRequest:
    return EnqueueRequest(
        id=new_id(),
        run_id=new_id(),
        name="tx.job",
        queue=queue,
        payload={"n": 1},
        idempotency_key=key or new_id(),
        max_attempts=3,
    )


async def claim_all(driver: PostgresJobDriver, queue: str = "q") -> list[str]:
    got = await driver.claim(queues=[queue], limit=100, worker_id="w", visibility_timeout_ms=60_000)
    return [j.id for j in got]


async def test_owns_connection_is_true_for_a_psycopg_async_connection(
    pg_driver: PostgresJobDriver, database_url: str
) -> None:
    async with await psycopg.AsyncConnection.connect(database_url) as conn:
        assert pg_driver.owns_connection(conn)
    with psycopg.Connection.connect(database_url) as sync_conn:
        assert not pg_driver.owns_connection(sync_conn)
    assert not pg_driver.owns_connection(object())
    assert not pg_driver.owns_connection(None)


async def test_a_rolled_back_enqueue_never_existed(
    pg_driver: PostgresJobDriver, database_url: str
) -> None:
    r = req()
    async with await psycopg.AsyncConnection.connect(database_url) as conn:
        res = await pg_driver.enqueue(r, connection=conn)
        assert (res.id, res.deduped) == (r.id, False)
        await conn.rollback()
    assert await claim_all(pg_driver) == []
    with pytest.raises(XError) as caught:
        await pg_driver.introspect.show(r.id)
    assert caught.value.code == "X_JOB_NOT_FOUND"


async def test_a_committed_enqueue_is_queued_and_invisible_before_the_commit(
    pg_driver: PostgresJobDriver, database_url: str
) -> None:
    one, many = req(), [req(), req()]
    async with await psycopg.AsyncConnection.connect(database_url) as conn:
        await pg_driver.enqueue(one, connection=conn)
        await pg_driver.enqueue_many(many, connection=conn)
        assert await claim_all(pg_driver) == [], "a worker saw an uncommitted row"
        assert await pg_driver.stats() == []
        await conn.commit()
    assert sorted(await claim_all(pg_driver)) == sorted([one.id, *(r.id for r in many)])


async def test_an_enqueue_many_rolled_back_leaves_no_row(
    pg_driver: PostgresJobDriver, database_url: str
) -> None:
    reqs = [req() for _ in range(1500)]
    async with await psycopg.AsyncConnection.connect(database_url) as conn:
        await pg_driver.enqueue_many(reqs, connection=conn)
        await conn.rollback()
    assert await pg_driver.stats() == []


async def test_transaction_binds_the_connection_and_commits_or_rolls_back(
    pg_driver: PostgresJobDriver, database_url: str
) -> None:
    kept, dropped = req(), req()
    async with AsyncConnectionPool(database_url, min_size=1, max_size=2, open=False) as pool:
        async with transaction(pool) as conn:
            assert current_connection() is conn
            conn_seen = current_connection()
            assert pg_driver.owns_connection(conn_seen)
            await pg_driver.enqueue(kept, connection=conn_seen)
        assert current_connection() is None

        async def fails_after_enqueueing() -> None:
            async with transaction(pool) as conn:
                await pg_driver.enqueue(dropped, connection=conn)
                raise RuntimeError("business write failed")

        with pytest.raises(RuntimeError, match="business write failed"):
            await fails_after_enqueueing()
        async with pool.connection() as plain, transaction(plain) as bound:
            assert bound is plain and current_connection() is plain
    assert await claim_all(pg_driver) == [kept.id]


async def test_transaction_refuses_what_is_not_a_psycopg_pool_or_connection() -> None:
    with pytest.raises(XError) as caught:
        async with transaction("postgresql://nowhere"):  # type: ignore[arg-type]
            pass
    assert caught.value.code == "X_CONFIG_INVALID" and "str" in caught.value.message


async def test_an_enqueue_on_a_foreign_connection_is_refused(
    pg_driver: PostgresJobDriver,
) -> None:
    with pytest.raises(XError) as caught:
        await pg_driver.enqueue(req(), connection=object())
    assert caught.value.code == "X_INVARIANT" and "object" in caught.value.message


async def test_a_caller_pool_stays_open_after_the_driver_closes(
    database_url: str, pg_schema: str
) -> None:
    async with AsyncConnectionPool(database_url, min_size=1, max_size=2, open=False) as pool:
        driver = postgres_job_driver(pool, schema=pg_schema)
        await driver.enqueue(req())
        await driver.close()
        assert not pool.closed
        again = postgres_job_driver(pool, schema=pg_schema)
        assert len(await claim_all(again)) == 1


async def test_an_enqueue_in_a_failed_transaction_names_the_failure(
    pg_driver: PostgresJobDriver, database_url: str
) -> None:
    async with await psycopg.AsyncConnection.connect(database_url) as conn:
        with pytest.raises(psycopg.errors.DivisionByZero):
            await conn.execute("SELECT 1 / 0")
        with pytest.raises(XError) as caught:
            await pg_driver.enqueue(req(), connection=conn)
        assert caught.value.code == "X_INVARIANT" and "already failed" in caught.value.message
        await conn.rollback()
        assert (await pg_driver.enqueue(req(), connection=conn)).deduped is False
        await conn.commit()
    assert len(await claim_all(pg_driver)) == 1
