"""``sample_queues`` on Postgres: one statement for every queue, counted off the claim and lapse
indexes (index-only, never a scan of x_jobs), capped at ``DEPTH_SAMPLE_CAP``."""

from __future__ import annotations

import json
from typing import Any

import psycopg
import pytest

from ultimat3.core import new_id
from ultimat3.jobs.adapter import DEPTH_SAMPLE_CAP, EnqueueRequest
from ultimat3.jobs.postgres import PostgresJobDriver
from ultimat3.jobs.postgres._sql import compile_queries


def _req(queue: str, i: int, **kw: Any) -> EnqueueRequest:
    return EnqueueRequest(
        id=new_id(),
        run_id=new_id(),
        name="sample.job",
        queue=queue,
        payload={"i": i},
        idempotency_key=f"{queue}:{i}",
        max_attempts=3,
        **kw,
    )


async def test_the_sample_is_one_index_only_statement(
    pg_driver: PostgresJobDriver, database_url: str, pg_schema: str
) -> None:
    await pg_driver.enqueue_many([_req("busy", i) for i in range(300)])
    await pg_driver.enqueue_many([_req("other", i) for i in range(50)])
    await pg_driver.claim(queues=["busy"], limit=40, worker_id="w", visibility_timeout_ms=60_000)
    sql = compile_queries(pg_schema)["sample_queues"]
    jobs = psycopg.sql.Identifier(pg_schema, "x_jobs")
    async with await psycopg.AsyncConnection.connect(database_url, autocommit=True) as conn:
        # as in production, most rows are settled ones kept for their retention: the sample
        # must not read them
        await conn.execute(
            psycopg.sql.SQL(
                "INSERT INTO {} (id, run_id, name, queue, state, idempotency_key, max_attempts,"
                " run_at, created_at, updated_at, finished_at)"
                " SELECT gen_random_uuid(), gen_random_uuid(), 'sample.job', q, 'done',"
                " 'done:' || n, 3, now(), now(), now(), now()"
                " FROM generate_series(1, 20000) n,"
                " unnest(ARRAY['busy', 'other']) q"
            ).format(jobs)
        )
        await conn.execute(psycopg.sql.SQL("VACUUM ANALYZE {}").format(jobs))
        cur = await conn.execute(
            "EXPLAIN (FORMAT JSON) " + sql,
            {"queues": ["busy", "other", "idle"], "cap": DEPTH_SAMPLE_CAP},
        )
        row = await cur.fetchone()
    assert row is not None
    plan = json.dumps(row[0])
    assert '"Seq Scan"' not in plan, plan
    assert "x_jobs_claim_idx" in plan and "x_jobs_lapsed_idx" in plan
    samples = await pg_driver.sample_queues(["busy", "other", "idle"])
    assert [(s.queue, s.depth, s.running) for s in samples] == [
        ("busy", 260, 40),
        ("other", 50, 0),
        ("idle", 0, 0),
    ]


async def test_the_counts_stop_at_the_cap(
    pg_driver: PostgresJobDriver, monkeypatch: pytest.MonkeyPatch
) -> None:
    from ultimat3.jobs.postgres import _driver

    monkeypatch.setattr(_driver, "DEPTH_SAMPLE_CAP", 25)
    await pg_driver.enqueue_many([_req("deep", i) for i in range(60)])
    [sample] = await pg_driver.sample_queues(["deep"])
    assert (sample.depth, sample.running, sample.demand) == (25, 0, 25)
