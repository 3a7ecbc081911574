"""Conformance: crash accounting (issue 23). A lapse whose worker is known dead — its registry
row (``WorkerRegistry``) expired — is a CRASH, not an attempt: the claim re-offers the row with
its attempt handed back, ``crash_streak`` one up and ``crashed_worker`` naming the dead worker;
``introspect.show`` counts ``crashes``. A lapse of a worker whose live registry row names the job
in flight waits; a lapse of a worker with no registry row is an attempt, as before. A settled
attempt (retry, dead, failed) ends the streak; a suspend or a release keeps it; a crash after a
step completed since the crash before (progress) starts a new streak of 1."""

from __future__ import annotations

from ultimat3.jobs.adapter import JobDriver, WorkerRegistry
from ultimat3.jobs.testing._conformance_base import LONG_VT, ConformanceBase, uniq


class CrashConformance(ConformanceBase):
    """Conformance: which lapse is a crash, and what the claim answers for it."""

    async def _dead_worker(self, driver: JobDriver) -> str | None:
        """A worker registered with the suite's short window (it never beats again), or
        ``None`` for a driver without a registry (then no lapse is a crash)."""
        if not self.supports_workers:
            return None
        assert isinstance(driver, WorkerRegistry)
        worker = uniq("w-dies")
        await driver.register_worker(
            worker, host="h", queues=[], slots=8, visibility_timeout_ms=self.visibility_timeout_ms
        )
        return worker

    async def test_a_lapse_of_a_dead_worker_is_a_crash_not_an_attempt(
        self, driver: JobDriver
    ) -> None:
        q = uniq("q")
        worker = await self._dead_worker(driver)
        if worker is None:
            return
        await driver.enqueue(self.req(q, max_attempts=1))  # a final attempt: never buried
        first = await self.claim_one(driver, q, worker=worker, vt=self.visibility_timeout_ms)
        assert (first.attempt, first.crash_streak, first.crashed_worker) == (1, 0, None)
        await self.lapse()  # the lease and the worker's registry row both expired
        again = await self.claim_one(driver, q, worker="worker-2", vt=LONG_VT)
        assert again.id == first.id and again.claim != first.claim
        assert (again.attempt, again.crash_streak, again.crashed_worker) == (1, 1, worker)
        assert not await driver.ack(first.id, worker_id=worker, claim=first.claim), "fenced"
        intro = self.introspect(driver)
        if intro is not None:
            row = await intro.show(first.id)
            assert (row.state, row.attempts, row.crashes) == ("running", 1, 1)

    async def test_a_settled_attempt_ends_the_streak_a_suspend_keeps_it(
        self, driver: JobDriver
    ) -> None:
        q = uniq("q")
        worker = await self._dead_worker(driver)
        if worker is None:
            return
        await driver.enqueue(self.req(q, max_attempts=5))
        await self.claim_one(driver, q, worker=worker, vt=self.visibility_timeout_ms)
        await self.lapse()
        crashed = await self.claim_one(driver, q, vt=LONG_VT)
        assert crashed.crash_streak == 1
        assert await driver.nack(
            crashed.id, worker_id=crashed.worker_id, claim=crashed.claim, outcome="suspend"
        )
        resumed = await self.claim_one(driver, q, vt=LONG_VT)
        assert (resumed.attempt, resumed.crash_streak) == (1, 1), "a suspend settles no attempt"
        assert resumed.crashed_worker is None, "this claim follows no crash"
        assert await driver.nack(
            resumed.id, worker_id=resumed.worker_id, claim=resumed.claim, outcome="retry"
        )
        retried = await self.claim_one(driver, q, vt=LONG_VT)
        assert (retried.attempt, retried.crash_streak) == (2, 0)
        intro = self.introspect(driver)
        if intro is not None:
            assert (await intro.show(retried.id)).crashes == 1

    async def test_a_live_worker_holding_the_job_defers_the_lapse(self, driver: JobDriver) -> None:
        if not self.supports_workers:
            return
        assert isinstance(driver, WorkerRegistry)
        q, worker = uniq("q"), uniq("w-live")
        await driver.register_worker(
            worker, host="h", queues=[q], slots=8, visibility_timeout_ms=LONG_VT
        )
        await driver.enqueue(self.req(q))
        first = await self.claim_one(driver, q, worker=worker, vt=self.visibility_timeout_ms)
        assert await driver.worker_heartbeat(worker, in_flight=[first.id])
        await self.lapse()
        assert await self.claim(driver, q, worker="worker-2") == [], (
            "its worker is alive and names it in flight: the lapse waits for the registry"
        )
        assert await driver.worker_heartbeat(worker, in_flight=[])  # it let go of the job
        again = await self.claim_one(driver, q, worker="worker-2")
        assert (again.attempt, again.crash_streak, again.crashed_worker) == (2, 0, None), (
            "a live worker's lapse is an attempt"
        )

    async def test_a_lapse_of_an_unregistered_worker_is_an_attempt(self, driver: JobDriver) -> None:
        q = uniq("q")
        await driver.enqueue(self.req(q))
        await self.claim_one(driver, q, worker=uniq("w-never"), vt=self.visibility_timeout_ms)
        await self.lapse()
        again = await self.claim_one(driver, q, worker="worker-2")
        assert (again.attempt, again.crash_streak) == (2, 0)

    async def test_a_crash_after_progress_starts_a_new_streak(self, driver: JobDriver) -> None:
        q = uniq("q")
        first, second, third = [await self._dead_worker(driver) for _ in range(3)]
        if first is None or second is None or third is None:
            return
        await driver.enqueue(self.req(q, max_attempts=5))
        await self.claim_one(driver, q, worker=first, vt=self.visibility_timeout_ms)
        await self.lapse()
        crashed = await self.claim_one(driver, q, worker=second, vt=self.visibility_timeout_ms)
        assert crashed.crash_streak == 1
        await self.elapse(5)
        assert await driver.steps.record(
            crashed.id, "page-1", state="completed", worker_id=second, claim=crashed.claim
        )
        await self.lapse()  # the second worker dies too, after checkpointing a step
        again = await self.claim_one(driver, q, worker=third, vt=self.visibility_timeout_ms)
        assert (again.attempt, again.crash_streak, again.crashed_worker) == (1, 1, second), (
            "a step completed since the crash before: progress, a new streak"
        )
        await self.lapse()  # and the third dies with no progress
        last = await self.claim_one(driver, q, vt=LONG_VT)
        assert (last.crash_streak, last.crashed_worker) == (2, third)
        intro = self.introspect(driver)
        if intro is not None:
            assert (await intro.show(last.id)).crashes == 3
