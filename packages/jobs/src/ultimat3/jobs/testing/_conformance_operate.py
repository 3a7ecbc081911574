"""Conformance: operating the queue — requeue, cancel, promote, resolve a step, pause, task
fires, workers, counters."""

from __future__ import annotations

import contextlib
from datetime import datetime
from typing import Any

from ultimat3.core import XError, new_id
from ultimat3.jobs.adapter import (
    MAX_BULK_ROWS,
    BulkCanceller,
    JobDriver,
    TaskFirer,
    WorkerRegistry,
)
from ultimat3.jobs.testing._conformance_base import LONG_VT, ConformanceBase, held_by, refused, uniq


class OperateConformance(ConformanceBase):
    """Conformance: operating the queue."""

    # --- introspection: operating -------------------------------------------------------------
    async def test_requeue_replays_a_finished_job_from_its_failed_step(
        self, driver: JobDriver
    ) -> None:
        intro = self.introspect(driver)
        if intro is None:
            return
        q = uniq("q")
        r = self.req(q)
        await driver.enqueue(r)
        job = await self.claim_one(driver, q)
        held = held_by(job)
        assert await driver.steps.record(job.id, "a", state="completed", output=1, **held)
        assert await driver.steps.record(job.id, "b", state="failed", **held)
        assert await driver.nack(job.id, **held, outcome="dead")
        row = await intro.requeue(job.id)
        assert (row.id, row.run_id, row.state, row.attempts) == (r.id, r.run_id, "ready", 0)
        steps = await driver.steps.load(job.id)
        assert set(steps) == {"a", "b"} and steps["a"].state == "completed"
        again = await self.claim_one(driver, q)
        assert (again.id, again.attempt) == (job.id, 1)

    async def test_requeue_from_step_drops_that_step_and_every_later_one(
        self, driver: JobDriver
    ) -> None:
        intro = self.introspect(driver)
        if intro is None:
            return
        q = uniq("q")
        await driver.enqueue(self.req(q))
        job = await self.claim_one(driver, q)
        held = held_by(job)
        for step in ("first", "second", "third"):
            assert await driver.steps.record(job.id, step, state="completed", **held)
            await self.elapse(2)
        assert await driver.ack(job.id, **held)
        async with refused("X_INVARIANT", "fourth"):
            await intro.requeue(job.id, from_step="fourth")
        assert await self.counts(driver, q) == {"done": 1}, "a refused requeue moves nothing"
        row = await intro.requeue(job.id, from_step="second")
        assert row.state == "ready"
        assert set(await driver.steps.load(job.id)) == {"first"}

    async def test_requeue_refusals(self, driver: JobDriver) -> None:
        intro = self.introspect(driver)
        if intro is None:
            return
        q = uniq("q")
        ready = self.req(q, key="k-ready")
        await driver.enqueue(ready)
        async with refused("X_JOB_NOT_REQUEUEABLE", ready.id, "ready"):
            await intro.requeue(ready.id)
        job = await self.claim_one(driver, q)
        async with refused("X_JOB_NOT_REQUEUEABLE", job.id, "running"):
            await intro.requeue(job.id)
        assert await driver.nack(job.id, worker_id=job.worker_id, claim=job.claim, outcome="dead")
        holder = await driver.enqueue(self.req(q, key="k-ready"))
        async with refused("X_JOB_DUPLICATE", job.id, holder.id):
            await intro.requeue(job.id)
        ghost = new_id()
        async with refused("X_JOB_NOT_FOUND", ghost):
            await intro.requeue(ghost)

    async def test_requeue_many_moves_what_it_can_and_is_bounded(self, driver: JobDriver) -> None:
        intro = self.introspect(driver)
        if intro is None:
            return
        q = uniq("q")
        [blocked] = await self.dead_rows(driver, q, 1, key="k-held")
        await driver.enqueue(self.req(q, key="k-held", delay_ms=3_600_000))
        await self.dead_rows(driver, q, MAX_BULK_ROWS + 5)
        first = await intro.requeue_many(state="dead", queue=q)
        assert (first.affected, first.remaining) == (MAX_BULK_ROWS, 5)
        second = await intro.requeue_many(state="dead", queue=q)
        assert (second.affected, second.remaining) == (5, 0)
        third = await intro.requeue_many(state="dead", queue=q)
        assert (third.affected, third.remaining) == (0, 0)
        assert await self.state(intro, blocked) == "dead"
        assert await self.counts(driver, q) == {"ready": MAX_BULK_ROWS + 5, "delayed": 1, "dead": 1}
        async with refused("X_JOB_NOT_REQUEUEABLE", "ready"):
            await intro.requeue_many(state="ready", queue=q)

    async def test_requeue_many_moves_one_of_two_rows_sharing_a_key(
        self, driver: JobDriver
    ) -> None:
        intro = self.introspect(driver)
        if intro is None:
            return
        q = uniq("q")
        await self.dead_rows(driver, q, 1, key="shared")
        await self.dead_rows(driver, q, 1, key="shared")
        moved = await intro.requeue_many(state="failed", queue=q)
        assert (moved.affected, moved.remaining) == (0, 0)
        moved = await intro.requeue_many(state="dead", queue=q)
        assert (moved.affected, moved.remaining) == (1, 0)
        assert await self.counts(driver, q) == {"ready": 1, "dead": 1}

    async def test_cancel_stops_a_live_job_and_voids_its_claim(self, driver: JobDriver) -> None:
        intro = self.introspect(driver)
        if intro is None:
            return
        q, name = uniq("q"), uniq("job")
        since = await driver.now_ms() - 60_000
        await driver.enqueue(self.req(q, name=name, key="k"))
        job = await self.claim_one(driver, q, vt=self.visibility_timeout_ms)
        row = await intro.cancel(job.id, "operator said so")
        assert row.state == "cancelled" and row.finished_at is not None
        assert row.last_error is not None and row.last_error["code"] == "X_ABORTED"
        assert "operator said so" in row.last_error["message"]
        held = held_by(job)
        assert not await driver.ack(job.id, **held)
        assert not await driver.heartbeat(job.id, **held, visibility_timeout_ms=LONG_VT)
        assert not await driver.steps.record(job.id, "s", state="completed", **held)
        await self.lapse()
        assert await self.claim(driver, q) == []
        assert (await driver.enqueue(self.req(q, name=name, key="k"))).deduped is False
        waiting = self.req(q, delay_ms=3_600_000)
        await driver.enqueue(waiting)
        assert (await intro.cancel(waiting.id)).state == "cancelled"
        async with refused("X_JOB_NOT_CANCELLABLE", job.id, "cancelled"):
            await intro.cancel(job.id)
        ghost = new_id()
        async with refused("X_JOB_NOT_FOUND", ghost):
            await intro.cancel(ghost)
        totals = await intro.counters(job=name, since_ms=since)
        assert sum(r.done + r.dead + r.failed + r.retried for r in totals) == 0, "not a settle"

    async def test_cancel_many_cancels_the_matching_live_rows_and_is_bounded(
        self, driver: JobDriver
    ) -> None:
        found: object = self.introspect(driver)
        if not isinstance(found, BulkCanceller):
            return
        intro: Any = found  # a JobIntrospection that also cancels by filter
        q, other = uniq("q"), uniq("q")
        for i in range(MAX_BULK_ROWS + 3):
            await driver.enqueue(self.req(q, key=f"k{i}"))
        await driver.enqueue(self.req(other, key="kept"))
        held = await self.claim_one(driver, q, vt=self.visibility_timeout_ms)
        first = await intro.cancel_many(state="ready", queue=q, reason="queue retired")
        assert (first.affected, first.remaining) == (MAX_BULK_ROWS, 2)
        second = await intro.cancel_many(state="ready", queue=q)
        assert (second.affected, second.remaining) == (2, 0)
        assert await self.counts(driver, q) == {"running": 1, "cancelled": MAX_BULK_ROWS + 2}
        assert await self.counts(driver, other) == {"ready": 1}, "another queue is untouched"
        running = await intro.cancel_many(state="running", queue=q)
        assert (running.affected, running.remaining) == (1, 0)
        assert not await driver.ack(held.id, **held_by(held)), "its claim is void"
        row = await intro.show(held.id)
        assert row.last_error is not None and row.last_error["code"] == "X_ABORTED"
        async with refused("X_JOB_NOT_CANCELLABLE", "done"):
            await intro.cancel_many(state="done", queue=q)

    async def test_promote_runs_a_waiting_job_now(self, driver: JobDriver) -> None:
        intro = self.introspect(driver)
        if intro is None:
            return
        q = uniq("q")
        delayed = self.req(q, delay_ms=3_600_000)
        await driver.enqueue(delayed)
        row = await intro.promote(delayed.id)
        assert row.state == "ready"
        job = await self.claim_one(driver, q)
        assert job.id == delayed.id
        async with refused("X_INVARIANT", job.id, "running"):
            await intro.promote(job.id)
        assert await driver.nack(
            job.id, worker_id=job.worker_id, claim=job.claim, outcome="retry", delay_ms=3_600_000
        )
        assert await self.claim(driver, q) == []
        assert (await intro.promote(job.id)).state == "ready"
        again = await self.claim_one(driver, q)
        assert (again.id, again.attempt) == (job.id, 2)
        assert await driver.ack(job.id, worker_id=again.worker_id, claim=again.claim)
        async with refused("X_INVARIANT", job.id, "done"):
            await intro.promote(job.id)
        due = self.req(q)
        await driver.enqueue(due)
        async with refused("X_INVARIANT", due.id):
            await intro.promote(due.id)
        ghost = new_id()
        async with refused("X_JOB_NOT_FOUND", ghost):
            await intro.promote(ghost)

    async def test_promote_many_is_bounded(self, driver: JobDriver) -> None:
        intro = self.introspect(driver)
        if intro is None:
            return
        q = uniq("q")
        await driver.enqueue_many(
            [self.req(q, delay_ms=3_600_000) for _ in range(MAX_BULK_ROWS + 5)]
        )
        await driver.enqueue(self.req(q))
        first = await intro.promote_many(state="delayed", queue=q)
        assert (first.affected, first.remaining) == (MAX_BULK_ROWS, 5)
        second = await intro.promote_many(state="delayed", queue=q)
        assert (second.affected, second.remaining) == (5, 0)
        due = await intro.promote_many(state="ready", queue=q)
        assert (due.affected, due.remaining) == (0, 0), "a due ready job waits on nothing"
        assert await self.counts(driver, q) == {"ready": MAX_BULK_ROWS + 6}
        async with refused("X_INVARIANT", "running"):
            await intro.promote_many(state="running", queue=q)

    async def test_resolve_step_settles_an_unknown_outcome(self, driver: JobDriver) -> None:
        intro = self.introspect(driver)
        if intro is None:
            return
        q = uniq("q")
        await driver.enqueue_many([self.req(q), self.req(q)])
        ran, not_ran = await self.claim(driver, q)
        for job in (ran, not_ran):
            held = held_by(job)
            assert await driver.steps.record(job.id, "charge", state="started", **held)
            assert await driver.nack(job.id, **held, outcome="dead")
        rec = await intro.resolve_step(ran.id, "charge", ran=True, output={"id": "ch_1"})
        assert rec is not None
        assert (rec.state, rec.executions, rec.output) == ("completed", 1, {"id": "ch_1"})
        assert (await intro.show(ran.id)).steps["charge"].output == {"id": "ch_1"}
        assert await intro.resolve_step(not_ran.id, "charge", ran=False) is None
        assert "charge" not in (await intro.show(not_ran.id)).steps
        ghost = new_id()
        async with refused("X_JOB_NOT_FOUND", ghost):
            await intro.resolve_step(ghost, "charge", ran=False)
        async with refused("X_INVARIANT", "refund"):
            await intro.resolve_step(ran.id, "refund", ran=True)

    async def test_queues_and_tasks_pause_and_resume(self, driver: JobDriver) -> None:
        intro = self.introspect(driver)
        if intro is None:
            return
        q, task = uniq("q"), uniq("task")
        await intro.pause_queue(q)
        await intro.pause_queue(q)
        assert (await intro.paused_queues()).count(q) == 1
        await intro.resume_queue(q)
        assert q not in await intro.paused_queues()
        await intro.pause_task(task)
        assert task in await intro.paused_tasks()
        assert task not in await intro.paused_queues()
        await intro.resume_task(task)
        assert task not in await intro.paused_tasks()

    async def test_fire_task_moves_the_watermark_and_the_jobs_together(
        self, driver: JobDriver
    ) -> None:
        intro = self.introspect(driver)
        if not self.supports_task_fires:
            assert not isinstance(driver, TaskFirer)
            return
        assert isinstance(driver, TaskFirer), "supports_task_fires needs fire_task"
        assert intro is not None
        task, q = uniq("task"), uniq("q")
        held = self.req(q, key="held")
        await driver.enqueue(held)
        batch = [self.req(q, key="a"), self.req(q, key="b"), self.req(q, key="a"), held]
        assert await driver.fire_task(task, 60_000, batch)
        assert await self.counts(driver, q) == {"ready": 3}, "a, b and the held key: deduped"
        again = [self.req(q, key="c")]
        assert not await driver.fire_task(task, 60_000, again), "one occurrence fires once"
        assert not await driver.fire_task(task, 1_000, again), "an earlier one never fires"
        assert await self.counts(driver, q) == {"ready": 3}, "a refused fire queues nothing"
        fires = {f.task: f for f in await intro.task_fires()}
        assert fires[task].occurrence_ms == 60_000
        assert fires[task].fired_at.tzinfo is not None
        bad = self.req(q, key="d", max_attempts=0)
        with contextlib.suppress(XError):
            await driver.fire_task(task, 120_000, [self.req(q, key="e"), bad])
            raise AssertionError("a request with max_attempts 0 was fired")
        assert await self.counts(driver, q) == {"ready": 3}, "checked before anything moved"
        assert {f.task: f for f in await intro.task_fires()}[task].occurrence_ms == 60_000
        await intro.pause_task(task)
        assert not await driver.fire_task(task, 120_000, again), "a paused task never fires"
        assert await self.counts(driver, q) == {"ready": 3}
        await intro.resume_task(task)
        assert await driver.fire_task(task, 120_000, again)
        assert await self.counts(driver, q) == {"ready": 4}

    async def test_workers_register_heartbeat_and_expire(self, driver: JobDriver) -> None:
        intro = self.introspect(driver)
        if not self.supports_workers:
            assert not isinstance(driver, WorkerRegistry)
            return
        assert isinstance(driver, WorkerRegistry), "supports_workers needs WorkerRegistry members"
        assert intro is not None
        w1, w2 = uniq("w"), uniq("w")
        vt = self.soon_ms
        await driver.register_worker(
            w1, host="h1", queues=["a", "b"], slots=4, visibility_timeout_ms=vt
        )
        await driver.register_worker(
            w2, host="h2", queues=["a"], slots=None, visibility_timeout_ms=LONG_VT
        )
        assert await driver.worker_heartbeat(w1, in_flight=["j1", "j2"])
        rows = {w.id: w for w in await intro.workers()}
        assert (rows[w1].host, rows[w1].queues, rows[w1].slots) == ("h1", ("a", "b"), 4)
        assert rows[w1].in_flight == ("j1", "j2")
        assert rows[w1].last_heartbeat_at.tzinfo is not None
        await self.elapse(vt + self.settle_margin_ms)
        ids = {w.id for w in await intro.workers()}
        assert w1 not in ids and w2 in ids, "a row expires one visibility timeout after its beat"
        assert await driver.deregister_worker(w2)
        assert w2 not in {w.id for w in await intro.workers()}
        assert not await driver.worker_heartbeat(uniq("w"), in_flight=[])

    async def test_counters_move_with_each_settle(self, driver: JobDriver) -> None:
        intro = self.introspect(driver)
        if intro is None:
            return
        q, name = uniq("q"), uniq("job")
        since = await driver.now_ms() - 60_000
        base = await intro.counter_totals(since)
        await driver.enqueue_many([self.req(q, name=name) for _ in range(6)])
        jobs = await self.claim(driver, q, limit=6)
        a, b, c, d, e, f = jobs

        assert await driver.ack(a.id, **held_by(a), duration_ms=40)
        assert await driver.nack(b.id, **held_by(b), outcome="retry", run_at_ms=0)
        assert await driver.nack(c.id, **held_by(c), outcome="dead")
        assert await driver.nack(d.id, **held_by(d), outcome="failed")
        assert await driver.nack(e.id, **held_by(e), outcome="suspend", run_at_ms=0)
        assert await driver.nack(f.id, **held_by(f), outcome="release")
        b2 = await self.claim(driver, q, limit=10)
        assert b.id in {j.id for j in b2}
        for j in b2:
            if j.id == b.id:
                assert await driver.ack(j.id, **held_by(j), duration_ms=10)
        rows = await intro.counters(job=name, since_ms=since)
        assert {r.job for r in rows} == {name}
        assert all(isinstance(r.bucket_start, datetime) and r.bucket_ms > 0 for r in rows)
        summed = [sum(getattr(r, k) for r in rows) for k in ("done", "retried", "failed", "dead")]
        assert summed == [2, 1, 1, 1]
        assert sum(r.duration_ms for r in rows) == 50
        totals = await intro.counter_totals(since)
        assert (
            totals.done - base.done,
            totals.retried - base.retried,
            totals.failed - base.failed,
            totals.dead - base.dead,
            totals.duration_ms - base.duration_ms,
        ) == (2, 1, 1, 1, 50)
        assert await intro.counters(job=uniq("job"), since_ms=since) == []
