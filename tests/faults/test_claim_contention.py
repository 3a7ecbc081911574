"""Sixteen claimers, each on a connection of its own, over 10,000 jobs, half of them dropping a
quarter of their first attempts (a short lease that lapses, as a crashed worker's does): every
job is claimed exactly once per attempt, an attempt is re-offered only after the lease before it
lapsed, no claim returns more rows than it asked for, and every job is acked exactly once."""

from __future__ import annotations

import asyncio
import time
from collections import Counter, defaultdict
from dataclasses import dataclass
from itertools import pairwise

from ultimat3.core import new_id
from ultimat3.jobs.adapter import AckRequest, EnqueueRequest
from ultimat3.jobs.postgres import postgres_job_driver
from ultimat3_testkit.faults import Db, app_name, with_app_name

CLAIMERS = 16
JOBS = 10_000
LIMITS = (1, 7, 32, 100, 250)
SHORT_LEASE_MS = 1500


@dataclass(frozen=True, slots=True)
class Claimed:
    job_id: str
    attempt: int
    claim: str
    claimed_at_ms: int
    lease_expires_at_ms: int


def dropped(claimer: int, job: Claimed) -> bool:
    """Whether this claimer abandons this claim (odd claimers, a quarter of first attempts)."""
    return claimer % 2 == 1 and job.attempt == 1 and int(job.job_id[-1], 16) % 4 == 0


async def test_sixteen_claimers_claim_each_job_once_per_attempt(
    db: Db, db_url: str, schema: str
) -> None:
    producer = postgres_job_driver(db_url, schema=schema, max_size=1)
    try:
        await producer.enqueue_many(
            [
                EnqueueRequest(
                    id=new_id(),
                    run_id=new_id(),
                    name="faults.claim",
                    queue="contended",
                    payload={"i": i},
                    idempotency_key=f"c-{i}",
                    max_attempts=10,
                )
                for i in range(JOBS)
            ]
        )
    finally:
        await producer.close()

    claims: list[tuple[int, list[Claimed]]] = []  # (limit, what one claim answered)
    acked: Counter[str] = Counter()
    name = app_name("claimers")
    deadline = time.monotonic() + 90

    async def claimer(k: int) -> None:
        driver = postgres_job_driver(with_app_name(db_url, name), schema=schema, max_size=1)
        limit = LIMITS[k % len(LIMITS)]
        lease_ms = SHORT_LEASE_MS if k % 2 else 60_000
        try:
            while sum(acked.values()) < JOBS:
                assert time.monotonic() < deadline, "the claimers did not drain the queue"
                got = [
                    Claimed(j.id, j.attempt, j.claim, j.claimed_at_ms, j.lease_expires_at_ms)
                    for j in await driver.claim(
                        queues=["contended"],
                        limit=limit,
                        worker_id=f"c{k}",
                        visibility_timeout_ms=lease_ms,
                    )
                ]
                claims.append((limit, got))
                kept = [j for j in got if not dropped(k, j)]
                if kept:
                    landed = await driver.ack_many(
                        [AckRequest(j.job_id, j.claim) for j in kept], worker_id=f"c{k}"
                    )
                    acked.update(j.job_id for j, ok in zip(kept, landed, strict=True) if ok)
                if not got:
                    await asyncio.sleep(0.05)
        finally:
            await driver.close()

    await asyncio.wait_for(asyncio.gather(*(claimer(k) for k in range(CLAIMERS))), timeout=100)

    assert all(len(got) <= limit for limit, got in claims), "a claim overshot its limit"
    every = [c for _, got in claims for c in got]
    per_attempt = Counter((c.job_id, c.attempt) for c in every)
    assert max(per_attempt.values()) == 1, "one attempt of a job was handed out twice"
    assert len({c.claim for c in every}) == len(every), "a claim token was handed out twice"
    attempts: dict[str, list[Claimed]] = defaultdict(list)
    for c in sorted(every, key=lambda c: c.attempt):
        attempts[c.job_id].append(c)
    assert len(attempts) == JOBS
    for runs in attempts.values():
        assert [c.attempt for c in runs] == list(range(1, len(runs) + 1))
        for before, after in pairwise(runs):
            assert after.claimed_at_ms >= before.lease_expires_at_ms, "a live lease was taken"
    assert sum(1 for runs in attempts.values() if len(runs) > 1) > 100  # leases did lapse
    assert len(acked) == JOBS and max(acked.values()) == 1, "a job was acked twice, or never"

    rows = await db.rows("SELECT id::text, state, attempts FROM {x_jobs}")
    assert len(rows) == JOBS
    assert all(state == "done" for _, state, _ in rows)
    assert {i: n for i, _, n in rows} == {i: len(runs) for i, runs in attempts.items()}
    assert await db.value("SELECT sum(done) FROM {x_job_counters} WHERE bucket_ms = 60000") == JOBS
