"""A worker process killed with SIGKILL in the middle of a step: another worker finishes its jobs
once their leases lapse, and the steps they completed are not run again."""

from __future__ import annotations

import signal

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


async def test_a_worker_killed_mid_step_is_finished_by_another_after_its_lease(
    db: Db, db_url: str, schema: str, workers: WorkerFactory
) -> None:
    url = with_app_name(db_url, app_name("killed"))
    hanging = work_request("hang", hang="b")
    others = [work_request(f"other-{i}", pause_ms=100) for i in range(12)]
    ids = [hanging.id, *(r.id for r in others)]
    driver = postgres_job_driver(db_url, schema=schema, max_size=1)
    try:
        await driver.enqueue_many([hanging, *others])
    finally:
        await driver.close()

    first = workers(*worker_args(url, schema, visibility_ms=1000, max_in_flight=4))
    await until(lambda: db.starts(hanging.id, "b"), timeout_s=20, what="step b to start")
    first.signal(signal.SIGKILL)
    first.proc.wait(timeout=10)
    lapse = (await db.job(hanging.id))["lease_expires_at"]
    assert (await db.job(hanging.id))["state"] == "running"  # nobody settled it

    second = workers(*worker_args(url, schema, visibility_ms=1000, max_in_flight=4))
    await until(lambda: db.all_settled(ids), timeout_s=30, what="every job to end")
    await db.assert_nothing_lost(ids)

    row = await db.job(hanging.id)
    # its worker was known dead (its registry row expired): a crash, not an attempt
    assert (row["attempts"], row["crashes"]) == (1, 1)
    starts = {s: await db.starts(hanging.id, s) for s in ("a", "b", "c")}
    assert starts == {"a": 1, "b": 2, "c": 1}, "a completed step ran again, or c ran twice"
    steps = await db.steps(hanging.id)
    assert {n: (s["state"], s["executions"]) for n, s in steps.items()} == {
        "a": ("completed", 1),
        "b": ("completed", 1),
        "c": ("completed", 1),
    }
    assert steps["a"]["output"]["pid"] == first.pid  # replayed from storage, not re-run
    assert steps["b"]["output"] == {"step": "b", "attempt": 1, "pid": second.pid}
    [retry] = [e for e in await db.effects(hanging.id) if e.step == "b" and e.pid == second.pid]
    assert retry.at_ms >= lapse.timestamp() * 1000, "re-run before the lease lapsed"
    assert await second.stop() == 0
