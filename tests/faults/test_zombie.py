"""A zombie: a worker process paused (SIGSTOP) past its lease while another finishes its job, then
resumed (SIGCONT). Whatever it sends late — a settle, a step write, a heartbeat, a progress
report — is fenced on its claim and changes nothing, and it learns its lease was lost."""

from __future__ import annotations

import signal
from typing import Any

from ultimat3.jobs.adapter import AckRequest, StepState
from ultimat3.jobs.postgres import postgres_job_driver
from ultimat3_testkit.faults import (
    Db,
    WorkerFactory,
    app_name,
    until,
    with_app_name,
    work_request,
    worker_args,
)


async def snapshot(db: Db, job_id: str) -> tuple[Any, ...]:
    """The job's row, its steps and every counter, as the database holds them."""
    row = await db.value("SELECT to_jsonb(j) FROM {x_jobs} j WHERE id = %s", (job_id,))
    steps = await db.value(
        "SELECT jsonb_agg(to_jsonb(s) ORDER BY s.name) FROM {x_job_steps} s WHERE job_id = %s",
        (job_id,),
    )
    counters = await db.rows(
        "SELECT sum(done), sum(retried), sum(failed), sum(dead) FROM {x_job_counters}"
    )
    return row, steps, counters


async def test_a_zombie_worker_changes_nothing_and_learns_its_lease_was_lost(
    db: Db, db_url: str, schema: str, workers: WorkerFactory
) -> None:
    url = with_app_name(db_url, app_name("zombie"))
    req = work_request("zombie", hang="b")
    driver = postgres_job_driver(db_url, schema=schema, max_size=1)
    try:
        await driver.enqueue(req)
        zombie = workers(*worker_args(url, schema, visibility_ms=1000, worker_id="zombie"))
        await until(lambda: db.starts(req.id, "b"), timeout_s=20, what="step b to start")
        held = await db.job(req.id)
        assert (held["state"], held["worker_id"]) == ("running", "zombie")
        zombie.signal(signal.SIGSTOP)
        await until(
            lambda: db.value(
                "SELECT lease_expires_at < now() FROM {x_jobs} WHERE id = %s", (req.id,)
            ),
            timeout_s=10,
            what="the paused worker's lease to lapse",
        )

        rescuer = workers(*worker_args(url, schema, visibility_ms=1000, worker_id="rescuer"))
        await until(lambda: db.all_settled([req.id]), timeout_s=20, what="the rescue")
        before = await snapshot(db, req.id)
        done = await db.job(req.id)
        # paused past its registry row's expiry, the zombie was known dead: a crash, not an
        # attempt (it cannot be told apart from a dead process until it wakes)
        assert (done["state"], done["attempts"], done["crashes"]) == ("done", 1, 1)
        assert [r["step"] for r in done["result"]] == ["a", "b", "c"]

        zombie.signal(signal.SIGCONT)
        lost = await zombie.wait_event("jobs.lease.lost", timeout_s=10)
        assert lost["job_id"] == req.id and lost["worker_id"] == "zombie"
        aborted = await until(
            lambda: _aborts(db, req.id), timeout_s=10, what="the zombie's step to hear the abort"
        )
        assert aborted == ["aborted:X_JOB_LEASE_LOST"]  # its signal, as its step function saw it

        # the fence the zombie meets, asked directly with its own claim
        zid, zclaim = "zombie", held["claim"]
        assert not await driver.ack(req.id, worker_id=zid, claim=zclaim, result="late")
        assert await driver.ack_many([AckRequest(req.id, zclaim, "late")], worker_id=zid) == [False]
        for outcome in ("retry", "dead", "release"):
            assert not await driver.nack(req.id, worker_id=zid, claim=zclaim, outcome=outcome)
        assert not await driver.heartbeat(
            req.id, worker_id=zid, claim=zclaim, visibility_timeout_ms=60_000
        )
        assert await driver.heartbeat_many(
            [(req.id, zclaim)], worker_id=zid, visibility_timeout_ms=60_000
        ) == [False]
        assert not await driver.progress(req.id, worker_id=zid, claim=zclaim, progress={"n": 1})
        late: list[tuple[str, StepState]] = [("b", "completed"), ("c", "failed"), ("z", "started")]
        for name, state in late:
            assert not await driver.steps.record(
                req.id, name, state=state, worker_id=zid, claim=zclaim, output="late"
            )

        assert await zombie.stop() == 0
        [stopped] = zombie.events("faults.stopped")
        assert (stopped["leases_lost"], stopped["completed"], stopped["retried"]) == (1, 0, 0)
        assert await snapshot(db, req.id) == before, "the zombie changed the job"
        await db.assert_nothing_lost([req.id])
        assert await rescuer.stop() == 0
    finally:
        await driver.close()


async def _aborts(db: Db, job_id: str) -> list[str]:
    return [e.note for e in await db.effects(job_id) if e.note.startswith("aborted:")]
