"""The worker's hot statements run under ``plan_cache_mode = force_generic_plan`` (``-- plan:
generic`` beside their SQL): planned once per connection, not at every execution. Everything else
keeps the session's own default, and so does every connection the driver hands out (a
transaction, ``step.transaction``'s own SQL)."""

from __future__ import annotations

import re
from typing import Any

import psycopg

from ultimat3.core import new_id
from ultimat3.jobs.adapter import EnqueueRequest
from ultimat3.jobs.postgres import PostgresJobDriver, postgres_job_driver
from ultimat3.jobs.postgres._sql import blocks, compile_queries, generic_plans

HOT = {"claim", "ack", "ack_many", "nack", "heartbeat_many", "steps_load", "step_record_many"}


def test_the_marked_statements_are_the_hot_path_and_none_has_an_optional_filter() -> None:
    marked = generic_plans()
    assert marked >= HOT
    assert not marked & {"list_after", "list_before", "show", "stats", "counters", "enqueue"}
    text = blocks()
    for name in marked:  # a generic plan cannot fold `%(x)s IS NULL OR ...` away
        assert not re.search(r"IS\s+NULL\s+OR", text[name], re.IGNORECASE), name


def _reqs(n: int) -> list[EnqueueRequest]:
    return [
        EnqueueRequest(
            id=new_id(),
            run_id=new_id(),
            name="plans.job",
            queue="q",
            payload={"i": i},
            idempotency_key=f"plans-{i}",
            max_attempts=3,
        )
        for i in range(n)
    ]


async def _raw_mode(driver: PostgresJobDriver) -> str:
    """The plan_cache_mode of the pool's (only) connection, read without the driver's hand-out."""
    pool: Any = await driver._db.open()
    conn = await pool.getconn()
    try:
        cur = await conn.execute("SHOW plan_cache_mode")
        row = await cur.fetchone()
        assert row is not None
        return str(row[0])
    finally:
        await pool.putconn(conn)


async def _handed_out_mode(driver: PostgresJobDriver) -> str:
    async with driver._db.connection() as conn:
        cur = await conn.execute("SHOW plan_cache_mode")
        row = await cur.fetchone()
        assert row is not None
        return str(row[0])


async def test_a_hot_statement_runs_generic_and_anything_else_gets_the_session_default(
    database_url: str, pg_schema: str
) -> None:
    driver = postgres_job_driver(database_url, schema=pg_schema, max_size=1)
    try:
        await driver.enqueue_many(_reqs(3))
        assert await _raw_mode(driver) == "auto"  # an enqueue is not marked
        claimed = await driver.claim(
            queues=["q"], limit=1, worker_id="w", visibility_timeout_ms=60_000
        )
        assert len(claimed) == 1
        assert await _raw_mode(driver) == "force_generic_plan"
        await driver.stats()  # an operator read: back at the default first
        assert await _raw_mode(driver) == "auto"
        await driver.claim(queues=["q"], limit=1, worker_id="w", visibility_timeout_ms=60_000)
        assert await _handed_out_mode(driver) == "auto"  # a connection handed out for any SQL
        assert await _raw_mode(driver) == "auto"
    finally:
        await driver.close()


async def test_the_default_given_in_the_dsn_is_what_other_statements_get_back(
    database_url: str, pg_schema: str
) -> None:
    dsn = psycopg.conninfo.make_conninfo(
        database_url, options="-c plan_cache_mode=force_custom_plan"
    )
    driver = postgres_job_driver(dsn, schema=pg_schema, max_size=1)
    try:
        await driver.claim(queues=["q"], limit=1, worker_id="w", visibility_timeout_ms=60_000)
        assert await _raw_mode(driver) == "force_generic_plan"
        assert await _handed_out_mode(driver) == "force_custom_plan"  # RESET, not 'auto'
    finally:
        await driver.close()


async def test_the_claims_generic_plan_reads_its_indexes_on_a_large_queue(
    pg_driver: PostgresJobDriver, database_url: str, pg_schema: str
) -> None:
    """The plan the workers cache: on 20,000 due rows, an ordered range scan of the claim index
    (and of the lapsed index), never a scan of the whole table."""
    rows = _reqs(20_000)
    for start in range(0, len(rows), 1000):
        await pg_driver.enqueue_many(rows[start : start + 1000])
    names: list[str] = []

    def numbered(match: re.Match[str]) -> str:
        if match.group(1) not in names:
            names.append(match.group(1))
        return f"${names.index(match.group(1)) + 1}"

    claim = re.sub(r"%\((\w+)\)s", numbered, compile_queries(pg_schema)["claim"])
    values = {
        "queues": "ARRAY['q']::text[]",
        "limit": "20",
        "worker_id": "'w'",
        "visibility_timeout_ms": "60000",
        "no_dead_letter": "ARRAY[]::text[]",
    }
    async with await psycopg.AsyncConnection.connect(database_url, autocommit=True) as conn:
        await conn.execute(f'ANALYZE "{pg_schema}".x_jobs')
        await conn.execute("SET plan_cache_mode = force_generic_plan")
        await conn.execute(f"PREPARE claim_plan AS {claim}")
        args = ", ".join(values[n] for n in names)
        cur = await conn.execute(f"EXPLAIN EXECUTE claim_plan({args})")
        plan = "\n".join(str(r[0]) for r in await cur.fetchall())
    assert "Index Scan using x_jobs_claim_idx" in plan, plan
    assert "Index Scan using x_jobs_lapsed_idx" in plan, plan
    assert not re.search(r"Seq Scan on x_jobs\b", plan), plan
