"""Hostile names end to end — enqueue, a worker process (its LISTEN wake included), done: job
names, queue names, tenants, idempotency keys, step names and concurrency keys with quotes,
semicolons, SQL and format syntax, 64+ bytes or odd Unicode, in a schema whose own name is one
(and long enough that its notify channel is hashed), are stored and matched exactly, never spliced
into SQL. What Postgres cannot hold — a NUL, a lone surrogate, a queue name too long for a NOTIFY
payload, a schema name over 63 bytes — is refused before anything is written."""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator
from typing import Any

import pytest

from ultimat3.core import XError, swap_adapter
from ultimat3.jobs import EnqueueResult, Job, job
from ultimat3.jobs.adapter import JOB_DRIVER
from ultimat3.jobs.postgres import PostgresJobDriver, postgres_job_driver, wake_channel
from ultimat3_testkit.fault_app import HOSTILE_JOBS, KEYED_HOSTILE_JOB, Echo, echo_body
from ultimat3_testkit.faults import (
    Db,
    WorkerFactory,
    app_name,
    drop_schema,
    make_schema,
    until,
    with_app_name,
    worker_args,
)

JOBS: list[Job[Echo, dict[str, Any]]] = [*HOSTILE_JOBS, KEYED_HOSTILE_JOB]


@pytest.fixture
async def hostile_schema(db_url: str) -> AsyncIterator[str]:
    """A schema named with a quote, a double quote, a semicolon, SQL and emoji, 57 bytes."""
    name = f'x_faults "q"; DROP TABLE x_jobs; --\'é名🧨{uuid.uuid4().hex[:12]}'
    assert len(name.encode()) == 57 and wake_channel(name) != f"x_jobs.{name}"  # hashed
    await make_schema(db_url, name)
    try:
        yield name
    finally:
        await drop_schema(db_url, name)


async def enqueue_all(driver: PostgresJobDriver, tag: str) -> list[tuple[Job[Any, Any], str]]:
    """Every hostile job once, its key, text and tenant the job's own hostile name plus ``tag``;
    each enqueued twice (the second is deduped onto the first)."""
    out: list[tuple[Job[Any, Any], str]] = []
    with swap_adapter(JOB_DRIVER, driver):
        for j in JOBS:
            text = f"{j.name}{tag}"
            first: EnqueueResult = await j.enqueue(Echo(key=text, text=text), tenant_id=text)
            again = await j.enqueue(Echo(key=text, text="other payload"), tenant_id=text)
            assert not first.deduped and again.deduped and again.id == first.id
            out.append((j, first.id))
    return out


async def test_hostile_names_run_end_to_end_and_are_stored_exactly(
    db_url: str, hostile_schema: str, workers: WorkerFactory
) -> None:
    db = Db(db_url, hostile_schema)
    driver = postgres_job_driver(db_url, schema=hostile_schema, max_size=2)
    try:
        before = await enqueue_all(driver, "")  # queued before any worker listens
        worker = workers(
            *worker_args(
                with_app_name(db_url, app_name("hostile")),
                hostile_schema,
                queues="*",
                max_in_flight=None,
                wake=True,
            )
        )
        await worker.wait_event("jobs.wake.live")  # LISTEN on the hashed channel, probe back
        ids = [i for _, i in before]
        await until(lambda: db.all_settled(ids), timeout_s=30, what="the hostile jobs")
        mark = len(worker.events("faults.wake"))
        after = await enqueue_all(driver, " again")  # carried by the wake this time
        ids += [i for _, i in after]
        await until(lambda: db.all_settled(ids), timeout_s=30, what="the second round")
    finally:
        await driver.close()
    await db.assert_nothing_lost(ids)

    for (j, job_id), tag in [*((b, "") for b in before), *((a, " again") for a in after)]:
        text = f"{j.name}{tag}"
        result = (await db.job(job_id))["result"]
        assert result == {"name": j.name, "tenant": text, "key": text, "step": {"text": text}}
        stored = await db.rows(
            "SELECT name, queue, tenant_id, idempotency_key, payload FROM {x_jobs} WHERE id = %s",
            (job_id,),
        )
        assert stored == [(j.name, j.queue, text, text, {"key": text, "text": text})]
        assert {n: s["state"] for n, s in (await db.steps(job_id)).items()} == {j.name: "completed"}
    woken = {e["queue"] for e in worker.events("faults.wake")[mark:]}
    assert {j.queue for j in JOBS} <= woken, "a hostile queue's notification was lost or mangled"
    assert await worker.stop() == 0


async def test_what_postgres_cannot_hold_is_refused_before_anything_is_written(
    db: Db, db_url: str, schema: str
) -> None:
    long_queue = job(
        input=Echo,
        idempotency_key=lambda e: e.key,
        name="faults.long-queue",
        queue="€" * 2700,  # 8,100 bytes: past what a NOTIFY payload may carry
        run=echo_body,
    )
    nul_name = job(input=Echo, idempotency_key=lambda e: e.key, name="nul\x00name", run=echo_body)
    driver = postgres_job_driver(db_url, schema=schema, max_size=1)
    try:
        with swap_adapter(JOB_DRIVER, driver):
            for delay in (None, "1h"):  # a delayed row would poison every later notify of it
                with pytest.raises(XError) as caught:
                    await long_queue.enqueue(Echo(key="k", text="t"), delay=delay)
                assert caught.value.code == "X_INVARIANT"
                assert "queue" in caught.value.message and "8000" in caught.value.message
                with pytest.raises(XError) as caught:
                    await long_queue.enqueue_many([Echo(key="k", text="t")], delay=delay)
                assert caught.value.code == "X_INVARIANT"
            with pytest.raises(XError) as caught:
                await nul_name.enqueue(Echo(key="k", text="t"))
            assert caught.value.code == "X_INVARIANT" and "NUL" in caught.value.message
            with pytest.raises(XError) as caught:
                await HOSTILE_JOBS[0].enqueue(Echo(key="k", text="t"), tenant_id="bad\ud800")
            assert caught.value.code == "X_INVARIANT" and "Unicode" in caught.value.message
    finally:
        await driver.close()
    assert await db.value("SELECT count(*) FROM {x_jobs}") == 0
    with pytest.raises(XError) as caught:
        postgres_job_driver(db_url, schema="s" * 64)
    assert caught.value.code == "X_CONFIG_INVALID" and "63 bytes" in caught.value.message
