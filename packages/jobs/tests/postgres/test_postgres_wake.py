"""The wake: one LISTEN session per worker process, proven by a probe through the pool, woken
by committed enqueues only, re-dialled (with a catch-up pass) when lost or half-open."""

from __future__ import annotations

import asyncio
import time
from typing import Any

import psycopg
import pytest
from psycopg.conninfo import make_conninfo

from ultimat3.core import XError, capture_log_events, new_id
from ultimat3.jobs.adapter import EnqueueRequest
from ultimat3.jobs.postgres import (
    PostgresJobDriver,
    QueueWake,
    postgres_event_bus,
    start_queue_wake,
)
from ultimat3.jobs.postgres._wake import EVENT_RESWEEP_S


def req(queue: str) -> EnqueueRequest:
    return EnqueueRequest(
        id=new_id(),
        run_id=new_id(),
        name="wake.job",
        queue=queue,
        payload=None,
        idempotency_key=new_id(),
        max_attempts=1,
    )


class Woken:
    """Collects the queues a wake announced, with an event per arrival."""

    def __init__(self) -> None:
        self.queues: list[str] = []
        self.arrived = asyncio.Event()

    def __call__(self, queue: str) -> None:
        self.queues.append(queue)
        self.arrived.set()

    async def next(self, timeout_s: float = 3.0) -> str:
        await asyncio.wait_for(self.arrived.wait(), timeout=timeout_s)
        self.arrived.clear()
        return self.queues[-1]


async def until(check: Any, timeout_s: float = 5.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not check():
        assert time.monotonic() < deadline, "timed out waiting"
        await asyncio.sleep(0.02)


async def test_a_proven_wake_passes_on_each_committed_enqueue(
    pg_driver: PostgresJobDriver, database_url: str
) -> None:
    woken = Woken()
    with capture_log_events() as events:
        wake = await start_queue_wake(pg_driver, woken, queues=["served"])
        try:
            assert await wake.wait_proven(5)
            started = time.monotonic()
            await pg_driver.enqueue(req("served"))
            assert await woken.next() == "served"
            assert time.monotonic() - started < 1.0
            await pg_driver.enqueue(req("elsewhere"))
            async with await psycopg.AsyncConnection.connect(database_url) as conn:
                await pg_driver.enqueue(req("served"), connection=conn)
                await conn.rollback()
            await asyncio.sleep(0.4)
            assert woken.queues == ["served"], "a rollback or another queue woke the worker"
        finally:
            await wake.stop()
    assert [e["event"] for e in events if e["event"].startswith("jobs.wake")] == ["jobs.wake.live"]


async def test_a_killed_session_is_redialled_with_one_catch_up_pass(
    pg_driver: PostgresJobDriver, database_url: str
) -> None:
    woken = Woken()
    async with QueueWake(pg_driver._db, woken, queues=["a", "b"]) as wake:
        assert await wake.wait_proven(5)
        pid = wake.backend_pid
        async with await psycopg.AsyncConnection.connect(database_url, autocommit=True) as admin:
            await admin.execute("SELECT pg_terminate_backend(%s)", (pid,))
        await until(lambda: wake.sessions == 2)
        await until(lambda: sorted(woken.queues) == ["a", "b"])
        assert await wake.wait_proven(5)
        assert wake.backend_pid != pid
        await pg_driver.enqueue(req("b"))
        await until(lambda: woken.queues[-1:] == ["b"] and len(woken.queues) == 3)


async def test_a_session_that_stops_answering_probes_is_redialled(
    pg_driver: PostgresJobDriver, monkeypatch: pytest.MonkeyPatch
) -> None:
    woken = Woken()
    wake = QueueWake(pg_driver._db, woken, probe_timeout_s=0.3, probe_every_s=0.2)
    await wake.start()
    try:
        assert await wake.wait_proven(5)
        real_probe = wake._probe

        async def lost_probe() -> str:
            await real_probe()
            return "never-delivered"  # the session never sees it: as if half-open

        monkeypatch.setattr(wake, "_probe", lost_probe)
        await until(lambda: wake.sessions >= 2)
        monkeypatch.setattr(wake, "_probe", real_probe)
        assert await wake.wait_proven(5)
        assert "*" in woken.queues, "serving every queue, the catch-up wakes '*'"
    finally:
        await wake.stop()


async def test_a_wake_whose_probe_never_returns_is_unverified(
    pg_driver: PostgresJobDriver, database_url: str
) -> None:
    elsewhere = make_conninfo(database_url, dbname="postgres")  # probes go to another database
    with capture_log_events() as events:
        wake = await start_queue_wake(
            pg_driver, Woken(), dsn=elsewhere, probe_timeout_s=0.3, probe_every_s=0.2
        )
        try:
            assert not await wake.wait_proven(1.0)
            await asyncio.sleep(0.6)
        finally:
            await wake.stop()
    unverified = [e for e in events if e["event"] == "jobs.wake.unverified"]
    assert len(unverified) == 1 and "PgBouncer" in unverified[0]["fix"]
    assert not any(e["event"] == "jobs.wake.live" for e in events)


async def test_a_wake_with_nonpositive_timings_is_refused(pg_driver: PostgresJobDriver) -> None:
    with pytest.raises(XError) as caught:
        QueueWake(pg_driver._db, Woken(), probe_timeout_s=0)
    assert caught.value.code == "X_CONFIG_INVALID" and "probe_timeout_s" in caught.value.message


async def test_the_driver_starts_its_own_wake(pg_driver: PostgresJobDriver) -> None:
    woken = Woken()
    wake = await pg_driver.start_wake(woken, queues=["mine"])
    try:
        assert await wake.wait_proven(5)
        await pg_driver.enqueue(req("mine"))
        assert await woken.next() == "mine"
    finally:
        await wake.stop()


async def test_a_publish_commit_wakes_the_runs_that_suspended_after_its_statement(
    pg_driver: PostgresJobDriver, database_url: str
) -> None:
    woken = Woken()
    bus = postgres_event_bus(pg_driver)
    wake = await start_queue_wake(pg_driver, woken, queues=["waits"])
    try:
        assert await wake.wait_proven(5)
        async with (
            await psycopg.AsyncConnection.connect(database_url) as kept,
            await psycopg.AsyncConnection.connect(database_url) as dropped,
        ):
            await bus.publish("late", {"n": 1}, connection=kept)
            await bus.publish("late", {"n": 2}, connection=dropped)
            job = req("waits")
            await pg_driver.enqueue(job)
            [c] = await pg_driver.claim(
                queues=["waits"], limit=1, worker_id="w", visibility_timeout_ms=30_000
            )
            far = await pg_driver.now_ms() + 3_600_000
            await pg_driver.nack(
                c.id,
                worker_id="w",
                claim=c.claim,
                outcome="suspend",
                run_at_ms=far,
                wait_event="late",
            )  # suspended after both publish statements: neither woke it
            await asyncio.sleep(0.2)
            woken.queues.clear()
            woken.arrived.clear()
            await dropped.rollback()
            await asyncio.sleep(0.4)
            assert woken.queues == [], "a rolled-back publish woke a waiter"
            assert (await pg_driver.introspect.show(job.id)).state == "suspended"
            await kept.commit()
            assert await woken.next() == "waits"
        claimed = await pg_driver.claim(
            queues=["waits"], limit=1, worker_id="w", visibility_timeout_ms=30_000
        )
        assert [x.id for x in claimed] == [job.id]  # due now, not in an hour
    finally:
        await wake.stop()


async def test_a_run_whose_suspend_lands_just_after_the_commit_is_woken_by_the_resweep(
    pg_driver: PostgresJobDriver,
) -> None:
    """The run read the bus before the event committed, and its suspend commits after the first
    sweep: the sweep EVENT_RESWEEP_S later makes it due."""
    woken = Woken()
    wake = await start_queue_wake(pg_driver, woken, queues=["resweep"])
    try:
        assert await wake.wait_proven(5)
        job = req("resweep")
        await pg_driver.enqueue(job)
        [c] = await pg_driver.claim(
            queues=["resweep"], limit=1, worker_id="w", visibility_timeout_ms=30_000
        )
        await asyncio.sleep(0.1)
        woken.queues.clear()
        woken.arrived.clear()
        await postgres_event_bus(pg_driver).publish("raced", {})  # committed; nobody suspended
        await asyncio.sleep(0.3)  # the first sweep has run
        far = await pg_driver.now_ms() + 3_600_000
        await pg_driver.nack(
            c.id,
            worker_id="w",
            claim=c.claim,
            outcome="suspend",
            run_at_ms=far,
            wait_event="raced",
        )
        assert woken.queues == []
        started = time.monotonic()
        assert await woken.next() == "resweep"
        assert time.monotonic() - started < EVENT_RESWEEP_S + 0.5
    finally:
        await wake.stop()
    claimed = await pg_driver.claim(
        queues=["resweep"], limit=1, worker_id="w", visibility_timeout_ms=30_000
    )
    assert [x.id for x in claimed] == [job.id]
