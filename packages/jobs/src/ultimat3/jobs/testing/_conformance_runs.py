"""Conformance: lapsed leases, progress, steps, waiters, stats and the lease store."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from ultimat3.core import capture_log_events
from ultimat3.jobs.adapter import (
    ExhaustionReporter,
    JobDriver,
    NackOutcome,
    QueueStats,
)
from ultimat3.jobs.testing._conformance_base import LONG_VT, ConformanceBase, held_by, uniq


class RunConformance(ConformanceBase):
    """Conformance: lapsed leases, progress, steps, waiters, stats and the lease store."""

    # --- leases lapse -------------------------------------------------------------------------

    async def test_a_lapsed_lease_is_reoffered_under_a_new_claim(self, driver: JobDriver) -> None:
        q = uniq("q")
        await driver.enqueue(self.req(q, max_attempts=3))
        old = await self.claim_one(driver, q, vt=self.visibility_timeout_ms)
        await self.lapse()
        new = await self.claim_one(driver, q, worker="worker-2", vt=LONG_VT)
        assert (new.id, new.attempt, new.worker_id) == (old.id, 2, "worker-2")
        assert new.claim != old.claim
        fenced = held_by(old)
        assert not await driver.ack(old.id, **fenced)
        assert not await driver.nack(old.id, **fenced, outcome="dead")
        assert not await driver.heartbeat(old.id, **fenced, visibility_timeout_ms=LONG_VT)
        assert not await driver.progress(old.id, **fenced, progress={"done": 9})
        assert not await driver.steps.record(old.id, "s", state="completed", **fenced)
        assert await driver.ack(new.id, worker_id=new.worker_id, claim=new.claim)
        assert await self.counts(driver, q) == {"done": 1}

    async def test_the_same_worker_reclaiming_a_lapsed_job_fences_its_old_claim(
        self, driver: JobDriver
    ) -> None:
        q = uniq("q")
        await driver.enqueue(self.req(q, max_attempts=3))
        old = await self.claim_one(driver, q, vt=self.visibility_timeout_ms)
        await self.lapse()
        new = await self.claim_one(driver, q, vt=LONG_VT)
        assert new.worker_id == old.worker_id and new.claim != old.claim
        assert not await driver.ack(old.id, worker_id=old.worker_id, claim=old.claim)
        assert await driver.ack(new.id, worker_id=new.worker_id, claim=new.claim)

    async def test_a_heartbeat_keeps_the_lease(self, driver: JobDriver) -> None:
        q = uniq("q")
        vt = 4 * self.visibility_timeout_ms
        await driver.enqueue(self.req(q))
        job = await self.claim_one(driver, q, vt=vt)
        await self.elapse(vt * 6 // 10)
        assert await driver.heartbeat(
            job.id, worker_id=job.worker_id, claim=job.claim, visibility_timeout_ms=vt
        )
        await self.elapse(vt * 6 // 10)
        assert await self.claim(driver, q, worker="worker-2") == [], "the renewed lease held"
        assert await driver.ack(job.id, worker_id=job.worker_id, claim=job.claim)

    async def test_a_lapse_on_the_final_attempt_is_buried_dead_by_the_claim(
        self, driver: JobDriver
    ) -> None:
        q, name = uniq("q"), uniq("job")
        since = await driver.now_ms() - 60_000
        await driver.enqueue(self.req(q, name=name, max_attempts=1))
        old = await self.claim_one(driver, q, vt=self.visibility_timeout_ms)
        await self.lapse()
        with capture_log_events() as events:
            assert await self.claim(driver, q, worker="worker-2") == []
        assert await self.counts(driver, q) == {"dead": 1}
        exhausted = [e for e in events if e["event"] == "jobs.claim.exhausted"]
        assert len(exhausted) == 1 and exhausted[0]["job_id"] == old.id
        self.check_reported_once(driver, q, old.id, name, "dead")
        assert not await driver.ack(old.id, worker_id=old.worker_id, claim=old.claim)
        intro = self.introspect(driver)
        if intro is not None:
            row = await intro.show(old.id)
            assert row.last_error is not None and row.last_error["code"] == "X_JOB_LEASE_LOST"
            assert row.finished_at is not None
            rows = await intro.counters(job=name, since_ms=since)
            assert sum(r.dead for r in rows) == 1

    async def test_a_final_lapse_of_a_no_dead_letter_job_is_buried_failed(
        self, driver: JobDriver
    ) -> None:
        q, name = uniq("q"), uniq("job")
        await driver.enqueue(self.req(q, name=name, max_attempts=2))
        first = await self.claim_one(driver, q, vt=self.visibility_timeout_ms)
        await self.lapse()
        second = await self.claim_one(
            driver, q, vt=self.visibility_timeout_ms, no_dead_letter=(name,)
        )
        assert (second.id, second.attempt) == (first.id, 2), "a non-final lapse is re-offered"
        await self.lapse()
        with capture_log_events() as events:
            assert await self.claim(driver, q, no_dead_letter=(name,)) == []
        assert await self.counts(driver, q) == {"failed": 1}
        assert [e["job_id"] for e in events if e["event"] == "jobs.claim.exhausted"] == [first.id]
        self.check_reported_once(driver, q, first.id, name, "failed")
        intro = self.introspect(driver)
        if intro is not None:
            last_error = (await intro.show(first.id)).last_error
            assert last_error is not None and last_error["code"] == "X_JOB_LEASE_LOST"

    def check_reported_once(
        self, driver: JobDriver, queue: str, job_id: str, name: str, outcome: str
    ) -> None:
        """A driver that is an ``ExhaustionReporter`` reports the row its claim buried, once."""
        if not isinstance(driver, ExhaustionReporter):
            return
        [row] = [e for e in driver.take_exhausted() if e.queue == queue]
        assert (row.id, row.name, row.outcome, row.payload) == (job_id, name, outcome, {"n": 1})
        assert row.last_error is not None and row.last_error["code"] == "X_JOB_LEASE_LOST"
        assert [e for e in driver.take_exhausted() if e.queue == queue] == [], "reported once"

    # --- progress and steps -------------------------------------------------------------------

    async def test_progress_is_stored_on_the_row(self, driver: JobDriver) -> None:
        q = uniq("q")
        await driver.enqueue(self.req(q))
        job = await self.claim_one(driver, q)
        assert await driver.progress(
            job.id,
            worker_id=job.worker_id,
            claim=job.claim,
            progress={"done": 3, "total": 10, "note": "rows"},
        )
        intro = self.introspect(driver)
        if intro is not None:
            assert (await intro.show(job.id)).progress == {"done": 3, "total": 10, "note": "rows"}

    async def test_steps_count_executions_and_never_overwrite_a_completed_step(
        self, driver: JobDriver
    ) -> None:
        q = uniq("q")
        await driver.enqueue(self.req(q))
        job = await self.claim_one(driver, q)
        held = held_by(job)
        store = driver.steps
        assert await store.load(job.id) == {}
        assert await store.record(job.id, "a", state="started", **held)
        a = (await store.load(job.id))["a"]
        assert (a.name, a.state, a.executions) == ("a", "started", 0)
        assert await store.record(job.id, "a", state="completed", output={"n": [1, "x"]}, **held)
        a = (await store.load(job.id))["a"]
        assert (a.state, a.executions, a.output) == ("completed", 1, {"n": [1, "x"]})
        assert not await store.record(job.id, "a", state="completed", output="other", **held)
        assert not await store.record(job.id, "a", state="failed", **held)
        assert (await store.load(job.id))["a"].output == {"n": [1, "x"]}
        err: dict[str, Any] = {
            "code": "X_STEP",
            "message": "no",
            "fix": None,
            "meta": {},
            "status": None,
        }
        assert await store.record(job.id, "b", state="failed", error=err, **held)
        assert await store.record(job.id, "b", state="failed", error=err, **held)
        b = (await store.load(job.id))["b"]
        assert (b.state, b.executions) == ("failed", 2)
        assert b.error is not None and b.error["code"] == "X_STEP"
        assert await store.record(job.id, "b", state="completed", output=None, **held)
        b = (await store.load(job.id))["b"]
        assert (b.state, b.executions, b.output) == ("completed", 3, None)
        assert set(await store.load(job.id)) == {"a", "b"}

    async def test_steps_outlive_the_attempt_that_wrote_them(self, driver: JobDriver) -> None:
        q = uniq("q")
        await driver.enqueue(self.req(q))
        job = await self.claim_one(driver, q)
        assert await driver.steps.record(
            job.id, "a", state="completed", worker_id=job.worker_id, claim=job.claim, output=7
        )
        assert await driver.nack(
            job.id, worker_id=job.worker_id, claim=job.claim, outcome="retry", run_at_ms=0
        )
        again = await self.claim_one(driver, q)
        assert (await driver.steps.load(job.id))["a"].output == 7
        assert not await driver.steps.record(
            job.id, "b", state="completed", worker_id=job.worker_id, claim=job.claim
        ), "the first attempt's claim writes no step on the second"
        assert await driver.steps.record(
            job.id, "b", state="completed", worker_id=again.worker_id, claim=again.claim
        )
        assert set(await driver.steps.load(job.id)) == {"a", "b"}

    # --- waiters, stats -----------------------------------------------------------------------

    async def test_wake_waiters_makes_the_rows_waiting_on_an_event_due(
        self, driver: JobDriver
    ) -> None:
        q = uniq("q")
        event, other = uniq("evt"), uniq("evt")
        later = await driver.now_ms() + 3_600_000
        ids = []
        for waits_on in (event, other):
            r = self.req(q)
            ids.append(r.id)
            await driver.enqueue(r)
            job = await self.claim_one(driver, q)
            assert await driver.nack(
                job.id,
                worker_id=job.worker_id,
                claim=job.claim,
                outcome="suspend",
                run_at_ms=later,
                wait_event=waits_on,
            )
        assert await self.claim(driver, q) == []
        assert await driver.wake_waiters(event) == 1
        assert await driver.wake_waiters(uniq("nobody")) == 0
        woken = await self.claim(driver, q)
        assert [(j.id, j.attempt) for j in woken] == [(ids[0], 1)]

    async def test_stats_count_every_state_per_queue(self, driver: JobDriver) -> None:
        q, q2 = uniq("q"), uniq("q")
        now = await driver.now_ms()
        await driver.enqueue_many(
            [self.req(q, run_at_ms=now - 10_000 + i) for i in range(6)]
            + [self.req(q, delay_ms=3_600_000), self.req(q), self.req(q2)]
        )
        jobs = await self.claim(driver, q, limit=6)
        outcomes: Iterator[NackOutcome] = iter(("dead", "failed", "suspend"))
        assert await driver.ack(jobs[0].id, worker_id=jobs[0].worker_id, claim=jobs[0].claim)
        for job in jobs[1:4]:
            assert await driver.nack(
                job.id,
                worker_id=job.worker_id,
                claim=job.claim,
                outcome=next(outcomes),
                run_at_ms=now + 3_600_000,
            )
        stats = {s.queue: s for s in await driver.stats()}
        assert stats[q] == QueueStats(
            queue=q, ready=1, delayed=1, running=2, suspended=1, done=1, failed=1, dead=1
        )
        assert stats[q2] == QueueStats(queue=q2, ready=1)

    # --- leases -------------------------------------------------------------------------------

    async def test_lease_slots_are_bounded_by_the_limit(self, driver: JobDriver) -> None:
        leases = self.leases(driver)
        if leases is None:
            return
        key = uniq("lease")
        g1 = await leases.acquire(key, limit=2, holder="h1", ttl_ms=LONG_VT)
        g2 = await leases.acquire(key, limit=2, holder="h2", ttl_ms=LONG_VT)
        assert g1 is not None and g2 is not None
        assert {g1.slot, g2.slot} == {0, 1}
        assert (g1.key, g1.holder, g2.holder) == (key, "h1", "h2")
        assert await leases.acquire(key, limit=2, holder="h3", ttl_ms=LONG_VT) is None
        held = await leases.holders(key)
        assert sorted((g.slot, g.holder) for g in held) == sorted(
            [(g1.slot, "h1"), (g2.slot, "h2")]
        )
        assert await leases.acquire(uniq("lease"), limit=1, holder="h3", ttl_ms=LONG_VT)

    async def test_lease_tokens_only_grow(self, driver: JobDriver) -> None:
        leases = self.leases(driver)
        if leases is None:
            return
        k1, k2 = uniq("lease"), uniq("lease")
        tokens = []
        for key, holder in ((k1, "a"), (k2, "b"), (k1, "c"), (k2, "a"), (k1, "a")):
            grant = await leases.acquire(key, limit=3, holder=holder, ttl_ms=LONG_VT)
            assert grant is not None
            tokens.append(grant.token)
        assert tokens == sorted(tokens) and len(set(tokens)) == len(tokens), tokens

    async def test_a_holder_reacquiring_gets_its_own_slot_back(self, driver: JobDriver) -> None:
        leases = self.leases(driver)
        if leases is None:
            return
        key = uniq("lease")
        first = await leases.acquire(key, limit=3, holder="h1", ttl_ms=LONG_VT)
        other = await leases.acquire(key, limit=3, holder="h2", ttl_ms=LONG_VT)
        again = await leases.acquire(key, limit=3, holder="h1", ttl_ms=LONG_VT)
        assert first is not None and other is not None and again is not None
        assert again.slot == first.slot and again.token > other.token > first.token
        assert len(await leases.holders(key)) == 2

    async def test_lease_renew_and_release_are_fenced_on_the_holder(
        self, driver: JobDriver
    ) -> None:
        leases = self.leases(driver)
        if leases is None:
            return
        key = uniq("lease")
        grant = await leases.acquire(key, limit=1, holder="h1", ttl_ms=LONG_VT)
        assert grant is not None
        assert not await leases.renew(key, grant.slot, holder="h2", ttl_ms=LONG_VT)
        assert not await leases.release(key, grant.slot, holder="h2")
        assert await leases.renew(key, grant.slot, holder="h1", ttl_ms=LONG_VT)
        assert await leases.acquire(key, limit=1, holder="h2", ttl_ms=LONG_VT) is None
        assert await leases.release(key, grant.slot, holder="h1")
        assert await leases.holders(key) == []
        taken = await leases.acquire(key, limit=1, holder="h2", ttl_ms=LONG_VT)
        assert taken is not None and taken.token > grant.token

    async def test_an_expired_lease_frees_its_slot(self, driver: JobDriver) -> None:
        leases = self.leases(driver)
        if leases is None:
            return
        key = uniq("lease")
        ttl = self.soon_ms
        grant = await leases.acquire(key, limit=1, holder="h1", ttl_ms=ttl)
        assert grant is not None
        assert await leases.acquire(key, limit=1, holder="h2", ttl_ms=LONG_VT) is None
        await self.elapse(ttl + self.settle_margin_ms)
        assert await leases.holders(key) == []
        taken = await leases.acquire(key, limit=1, holder="h2", ttl_ms=LONG_VT)
        assert taken is not None and taken.slot == 0 and taken.token > grant.token
        assert not await leases.renew(key, 0, holder="h1", ttl_ms=LONG_VT)
        assert [g.holder for g in await leases.holders(key)] == ["h2"]
