"""A worker SIGKILLed between a step's effect and its checkpoint (#23): under
``step.transaction`` the effect rolled back with the missing checkpoint, so it happens exactly
once; under ``step.run`` it happened twice (the at-least-once contract ``step.key`` exists for).
Real worker processes on Postgres; the kill comes from inside the step, so it lands exactly
between the two."""

from __future__ import annotations

import uuid
from collections.abc import Awaitable, Callable

from ultimat3.core import new_id
from ultimat3.jobs.adapter import EnqueueRequest
from ultimat3.jobs.postgres import postgres_job_driver
from ultimat3_testkit.faults import Db, WorkerFactory, app_name, until, with_app_name, worker_args


def _effect_request(mode: str) -> EnqueueRequest:
    key = f"effect-{mode}-{uuid.uuid4().hex[:8]}"
    return EnqueueRequest(
        id=new_id(),
        run_id=new_id(),
        name="faults.effect",
        queue="faults",
        payload={"key": key, "mode": mode, "kill": True},
        idempotency_key=key,
        max_attempts=5,
    )


def _settled(db: Db, job_id: str) -> Callable[[], Awaitable[bool]]:
    return lambda: db.all_settled([job_id])


async def _notes(db: Db, job_id: str) -> list[str]:
    return [e.note for e in await db.effects(job_id)]


async def test_an_effect_killed_before_its_checkpoint_is_once_in_a_transaction_twice_in_run(
    db: Db, db_url: str, schema: str, workers: WorkerFactory
) -> None:
    url = with_app_name(db_url, app_name("effect-killed"))
    for mode, effects in (("tx", 1), ("run", 2)):
        request = _effect_request(mode)
        driver = postgres_job_driver(db_url, schema=schema, max_size=1)
        try:
            await driver.enqueue(request)
        finally:
            await driver.close()
        first = workers(*worker_args(url, schema, visibility_ms=1000, max_in_flight=1))
        first.proc.wait(timeout=30)  # it kills itself between the effect and the checkpoint
        assert first.proc.returncode == -9, first.output
        assert "kill" in await _notes(db, request.id)
        second = workers(*worker_args(url, schema, visibility_ms=1000, max_in_flight=1))
        await until(_settled(db, request.id), timeout_s=30, what=f"{mode} to end")
        assert await second.stop() == 0
        row = await db.job(request.id)
        assert row["state"] == "done", row
        notes = await _notes(db, request.id)
        assert notes.count("effect") == effects, (mode, notes)
        steps = await db.steps(request.id)
        assert steps["effect"]["state"] == "completed"
        assert steps["effect"]["executions"] == 1
