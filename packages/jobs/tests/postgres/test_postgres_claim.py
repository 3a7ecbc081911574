"""Claiming under contention: concurrent claimers never share a job and never get more than
they asked for; the statement honours pauses, run_at and lapsed leases."""

from __future__ import annotations

import asyncio
from collections import Counter
from dataclasses import replace

from ultimat3.core import new_id
from ultimat3.jobs.adapter import EnqueueRequest
from ultimat3.jobs.postgres import PostgresJobDriver, postgres_job_driver


def reqs(n: int, queue: str = "q") -> list[EnqueueRequest]:
    return [
        EnqueueRequest(
            id=new_id(),
            run_id=new_id(),
            name="claim.job",
            queue=queue,
            payload={"i": i},
            idempotency_key=f"{queue}-{i}",
            max_attempts=3,
        )
        for i in range(n)
    ]


async def drain_concurrently(
    database_url: str, schema: str, *, claimers: int, limits: list[int], queue: str = "q"
) -> tuple[Counter[str], list[tuple[int, int]]]:
    """Each claimer (its own driver and pool) claims until a claim comes back empty."""
    seen: Counter[str] = Counter()
    sizes: list[tuple[int, int]] = []

    async def claimer(k: int) -> None:
        driver = postgres_job_driver(database_url, schema=schema, max_size=1)
        limit = limits[k % len(limits)]
        try:
            while True:
                got = await driver.claim(
                    queues=[queue], limit=limit, worker_id=f"w{k}", visibility_timeout_ms=60_000
                )
                sizes.append((limit, len(got)))
                seen.update(j.id for j in got)
                if not got:
                    return
        finally:
            await driver.close()

    await asyncio.gather(*(claimer(k) for k in range(claimers)))
    return seen, sizes


async def test_eight_concurrent_claimers_take_2000_jobs_each_exactly_once(
    pg_driver: PostgresJobDriver, database_url: str, pg_schema: str
) -> None:
    batch = reqs(2000)
    await pg_driver.enqueue_many(batch)
    seen, sizes = await drain_concurrently(
        database_url, pg_schema, claimers=8, limits=[1, 7, 25, 50]
    )
    assert set(seen) == {r.id for r in batch}
    assert max(seen.values()) == 1, "a job was handed to two claims"
    assert all(got <= limit for limit, got in sizes), "a claim overshot its limit"
    [stats] = await pg_driver.stats()
    assert stats.running == 2000


async def test_sixteen_claimers_over_10000_jobs_never_overshoot(
    pg_driver: PostgresJobDriver, database_url: str, pg_schema: str
) -> None:
    batch = reqs(10_000)
    await pg_driver.enqueue_many(batch)
    seen, sizes = await drain_concurrently(
        database_url, pg_schema, claimers=16, limits=[3, 64, 100, 250]
    )
    assert len(seen) == 10_000 and max(seen.values()) == 1
    assert all(got <= limit for limit, got in sizes)


async def test_lapsed_leases_are_reoffered_once_each_under_contention(
    pg_driver: PostgresJobDriver, database_url: str, pg_schema: str
) -> None:
    batch = reqs(300)
    await pg_driver.enqueue_many(batch)
    first = await pg_driver.claim(
        queues=["q"], limit=300, worker_id="gone", visibility_timeout_ms=50
    )
    assert len(first) == 300
    await asyncio.sleep(0.2)
    seen, sizes = await drain_concurrently(database_url, pg_schema, claimers=6, limits=[10, 33])
    assert len(seen) == 300 and max(seen.values()) == 1
    assert all(got <= limit for limit, got in sizes)


async def test_one_claim_serves_several_queues_oldest_run_at_first(
    pg_driver: PostgresJobDriver,
) -> None:
    now = await pg_driver.now_ms()
    a, b = reqs(3, "qa"), reqs(3, "qb")
    ages = {a[0].id: 6, b[0].id: 5, a[1].id: 4, b[1].id: 3, a[2].id: 2, b[2].id: 1}
    batch = [replace(r, run_at_ms=now - 1000 * ages[r.id]) for r in a + b]
    await pg_driver.enqueue_many(batch)
    got = await pg_driver.claim(
        queues=["qa", "qb", "qa"], limit=4, worker_id="w", visibility_timeout_ms=60_000
    )
    assert [j.id for j in got] == [a[0].id, b[0].id, a[1].id, b[1].id]
    rest = await pg_driver.claim(
        queues=["qb", "qa"], limit=10, worker_id="w", visibility_timeout_ms=60_000
    )
    assert [j.id for j in rest] == [a[2].id, b[2].id]
    assert len({j.claimed_at_ms for j in got}) == 1


async def test_a_claim_of_nothing_asks_nothing(pg_driver: PostgresJobDriver) -> None:
    await pg_driver.enqueue_many(reqs(3))
    assert (
        await pg_driver.claim(queues=["q"], limit=0, worker_id="w", visibility_timeout_ms=1) == []
    )
    assert await pg_driver.claim(queues=[], limit=5, worker_id="w", visibility_timeout_ms=1) == []
    [stats] = await pg_driver.stats()
    assert stats.ready == 3
