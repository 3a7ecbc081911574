"""Conformance: enqueue and dedupe, claim, fencing (batch settles too), and what each nack
outcome does to a row."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from ultimat3.core import new_id
from ultimat3.jobs.adapter import (
    AckRequest,
    BatchSettler,
    ColumnEnqueuer,
    EnqueueColumns,
    JobDriver,
    NackOutcome,
    QueueSampler,
)
from ultimat3.jobs.testing._conformance_base import LONG_VT, ConformanceBase, held_by, refused, uniq


class QueueConformance(ConformanceBase):
    """Conformance: enqueue and dedupe, claim, fencing, and what each nack outcome does to a row."""

    # --- enqueue ------------------------------------------------------------------------------

    async def test_enqueue_queues_a_ready_job_under_the_callers_ids(
        self, driver: JobDriver
    ) -> None:
        q = uniq("q")
        r = self.req(
            q, payload={"org": "o1", "n": [1, 2]}, tenant_id="t1", concurrency_key="acct-1"
        )
        before = await driver.now_ms()
        res = await driver.enqueue(r)
        assert (res.id, res.run_id, res.deduped) == (r.id, r.run_id, False)
        assert await self.counts(driver, q) == {"ready": 1}
        job = await self.claim_one(driver, q)
        assert job.id == r.id and job.run_id == r.run_id
        assert (job.name, job.queue, job.payload) == (r.name, q, {"org": "o1", "n": [1, 2]})
        assert (job.attempt, job.max_attempts) == (1, r.max_attempts)
        assert (job.idempotency_key, job.tenant_id, job.concurrency_key) == (
            r.idempotency_key,
            "t1",
            "acct-1",
        )
        assert job.created_at_ms >= before - 1000

    async def test_a_live_key_dedupes_and_the_first_payload_wins(self, driver: JobDriver) -> None:
        q = uniq("q")
        first = self.req(q, key="same", payload={"v": 1})
        second = self.req(q, key="same", payload={"v": 2})
        await driver.enqueue(first)
        res = await driver.enqueue(second)
        assert (res.id, res.run_id, res.deduped) == (first.id, first.run_id, True)
        assert await self.counts(driver, q) == {"ready": 1}
        assert (await self.claim_one(driver, q)).payload == {"v": 1}

    async def test_the_live_key_is_scoped_by_name_and_tenant(self, driver: JobDriver) -> None:
        q = uniq("q")
        base = await driver.enqueue(self.req(q, name="a", key="k"))
        other_name = await driver.enqueue(self.req(q, name="b", key="k"))
        t1 = await driver.enqueue(self.req(q, name="a", key="k", tenant_id="t1"))
        t2 = await driver.enqueue(self.req(q, name="a", key="k", tenant_id="t2"))
        again_t1 = await driver.enqueue(self.req(q, name="a", key="k", tenant_id="t1"))
        again_none = await driver.enqueue(self.req(q, name="a", key="k"))
        assert not any(r.deduped for r in (base, other_name, t1, t2))
        assert len({base.id, other_name.id, t1.id, t2.id}) == 4
        assert (again_t1.id, again_t1.deduped) == (t1.id, True)
        assert (again_none.id, again_none.deduped) == (base.id, True)
        assert await self.counts(driver, q) == {"ready": 4}

    async def test_a_running_job_holds_its_key(self, driver: JobDriver) -> None:
        q = uniq("q")
        first = self.req(q, key="k")
        await driver.enqueue(first)
        await self.claim_one(driver, q)
        res = await driver.enqueue(self.req(q, key="k", payload={"v": "later"}))
        assert (res.id, res.deduped) == (first.id, True)
        assert await self.counts(driver, q) == {"running": 1}

    async def test_a_terminal_job_frees_its_key_at_once(self, driver: JobDriver) -> None:
        q = uniq("q")
        ids: list[str] = []
        endings: tuple[NackOutcome | None, ...] = (None, "dead", "failed")
        for ending in endings:
            res = await driver.enqueue(self.req(q, key="k"))
            assert res.deduped is False, f"the key stayed held after {ids and ids[-1]}"
            assert res.id not in ids
            ids.append(res.id)
            job = await self.claim_one(driver, q)
            assert job.id == res.id
            if ending is None:
                assert await driver.ack(job.id, worker_id=job.worker_id, claim=job.claim)
            else:
                assert await driver.nack(
                    job.id, worker_id=job.worker_id, claim=job.claim, outcome=ending
                )
        last = await driver.enqueue(self.req(q, key="k"))
        assert last.deduped is False and last.id not in ids
        assert await self.counts(driver, q) == {"done": 1, "dead": 1, "failed": 1, "ready": 1}

    async def test_a_republished_id_adds_no_row(self, driver: JobDriver) -> None:
        q = uniq("q")
        r = self.req(q, key="k1")
        await driver.enqueue(r)
        again = self.req(q, key="k2", job_id=r.id)
        res = await driver.enqueue(again)
        assert (res.id, res.run_id, res.deduped) == (r.id, r.run_id, True)
        assert await self.counts(driver, q) == {"ready": 1}
        job = await self.claim_one(driver, q)
        assert await driver.ack(job.id, worker_id=job.worker_id, claim=job.claim)
        res = await driver.enqueue(self.req(q, key="k1", job_id=r.id))
        assert (res.id, res.deduped) == (r.id, True)
        [batch] = await driver.enqueue_many([self.req(q, key="k3", job_id=r.id)])
        assert (batch.id, batch.deduped) == (r.id, True)
        assert await self.counts(driver, q) == {"done": 1}

    async def test_run_at_and_delay_decide_when_a_job_is_due(self, driver: JobDriver) -> None:
        q = uniq("q")
        now = await driver.now_ms()
        delayed = self.req(q, delay_ms=3_600_000)
        future = self.req(q, run_at_ms=now + 3_600_000)
        past = self.req(q, run_at_ms=now - 5_000)
        both = self.req(q, run_at_ms=now - 5_000, delay_ms=3_600_000)
        for r in (delayed, future, past, both):
            await driver.enqueue(r)
        assert await self.counts(driver, q) == {"delayed": 2, "ready": 2}
        got = await self.claim(driver, q)
        assert {j.id for j in got} == {past.id, both.id}

    async def test_enqueue_many_answers_in_input_order_and_dedupes_within_the_batch(
        self, driver: JobDriver
    ) -> None:
        q = uniq("q")
        existing = self.req(q, key="k0")
        await driver.enqueue(existing)
        a = self.req(q, key="k1", payload={"v": "a"})
        b = self.req(q, key="k2")
        c = self.req(q, key="k1", payload={"v": "c"})
        d = self.req(q, key="k0")
        e = self.req(q, key="k3")
        res = await driver.enqueue_many([a, b, c, d, e])
        assert [(x.id, x.run_id, x.deduped) for x in res] == [
            (a.id, a.run_id, False),
            (b.id, b.run_id, False),
            (a.id, a.run_id, True),
            (existing.id, existing.run_id, True),
            (e.id, e.run_id, False),
        ]
        assert await self.counts(driver, q) == {"ready": 4}
        payloads = [j.payload for j in await self.claim(driver, q)]
        assert {"v": "c"} not in payloads and {"v": "a"} in payloads
        assert await driver.enqueue_many([]) == []

    async def test_enqueue_many_takes_2500_inputs(self, driver: JobDriver) -> None:
        q = uniq("q")
        reqs = [self.req(q, key=f"k{i}", payload={"i": i}) for i in range(2500)]
        reqs.append(self.req(q, key="k7"))
        res = await driver.enqueue_many(reqs)
        assert len(res) == 2501
        assert [x.id for x in res[:2500]] == [r.id for r in reqs[:2500]]
        assert not any(x.deduped for x in res[:2500])
        assert (res[2500].id, res[2500].deduped) == (reqs[7].id, True)
        assert await self.counts(driver, q) == {"ready": 2500}

    async def test_the_trace_context_rides_from_enqueue_to_every_claim(
        self, driver: JobDriver
    ) -> None:
        q = uniq("q")
        ctx_one = {"traceparent": "00-" + "a1" * 16 + "-" + "b2" * 8 + "-01", "tracestate": "x=1"}
        ctx_many = {"traceparent": "00-" + "c3" * 16 + "-" + "d4" * 8 + "-01"}
        one = replace(self.req(q), trace_context=ctx_one)
        bare = self.req(q)
        many = [replace(self.req(q), trace_context=ctx_many) for _ in range(2)] + [self.req(q)]
        await driver.enqueue(one)
        await driver.enqueue(bare)
        await driver.enqueue_many(many)
        got = {j.id: j for j in await self.claim(driver, q)}
        want = {one.id: ctx_one, bare.id: None, many[0].id: ctx_many, many[1].id: ctx_many}
        want[many[2].id] = None
        stored = {i: j.trace_context for i, j in got.items()}
        assert {i: None if c is None else dict(c) for i, c in stored.items()} == want
        # a retried run is still linked to the request that enqueued it
        held = got[one.id]
        assert await driver.nack(
            one.id, worker_id=held.worker_id, claim=held.claim, outcome="release", delay_ms=0
        )
        again = await self.claim_one(driver, q)
        assert again.id == one.id and dict(again.trace_context or {}) == ctx_one

    async def test_sample_queues_counts_the_due_backlog_and_the_runs_in_flight(
        self, driver: JobDriver
    ) -> None:
        if not self.supports_queue_samples:
            assert not isinstance(driver, QueueSampler), "supports_queue_samples = False, yet"
            return
        assert isinstance(driver, QueueSampler)
        q, other, empty = uniq("q"), uniq("other"), uniq("empty")
        now = await driver.now_ms()
        await driver.enqueue_many(
            [self.req(q) for _ in range(3)]
            + [self.req(q, delay_ms=3_600_000), self.req(q, run_at_ms=now - 1000)]
            + [self.req(other)]
        )
        held = await self.claim_one(driver, q)
        got = await driver.sample_queues([q, other, q, empty])
        assert [(s.queue, s.depth, s.running, s.paused) for s in got] == [
            (q, 3, 1, False),  # 2 ready + 1 due by run_at; the delayed one is not due
            (other, 1, 0, False),
            (empty, 0, 0, False),
        ]
        assert [s.demand for s in got] == [4, 1, 0]
        # a run handed back with a delay is neither due nor running
        assert await driver.nack(held.id, **held_by(held), outcome="release", delay_ms=3_600_000)
        [after] = await driver.sample_queues([q])
        assert (after.depth, after.running, after.demand) == (3, 0, 3)
        intro = self.introspect(driver)
        if intro is not None:
            await intro.pause_queue(q)
            await self.claim_one(driver, other)
            paused, busy = await driver.sample_queues([q, other])
            assert (paused.paused, paused.depth, paused.demand) == (True, 3, 0)
            assert (busy.depth, busy.running, busy.demand) == (0, 1, 1)
        assert await driver.sample_queues([]) == []
        async with refused("X_INVARIANT", "list of queue names"):
            await driver.sample_queues(q)
        async with refused("X_INVARIANT", "''"):
            await driver.sample_queues([q, ""])

    # --- claim --------------------------------------------------------------------------------

    async def test_claim_never_hands_out_more_than_its_limit(self, driver: JobDriver) -> None:
        q = uniq("q")
        await driver.enqueue_many([self.req(q) for _ in range(5)])
        first = await self.claim(driver, q, limit=2, vt=LONG_VT)
        second = await self.claim(driver, q, limit=2, worker="worker-2")
        third = await self.claim(driver, q, limit=10)
        assert [len(first), len(second), len(third)] == [2, 2, 1]
        assert await self.claim(driver, q, limit=10) == []
        every = first + second + third
        assert len({j.id for j in every}) == 5 and len({j.claim for j in every}) == 5
        assert all(j.attempt == 1 for j in every)
        assert {j.worker_id for j in second} == {"worker-2"}
        now = await driver.now_ms()
        for j in first:
            assert j.lease_expires_at_ms == j.claimed_at_ms + LONG_VT
            assert abs(j.claimed_at_ms - now) < 5_000
        assert await self.counts(driver, q) == {"running": 5}

    async def test_claim_serves_only_the_queues_named(self, driver: JobDriver) -> None:
        qa, qb = uniq("qa"), uniq("qb")
        ra, rb = self.req(qa), self.req(qb)
        await driver.enqueue_many([ra, rb])
        assert [j.id for j in await self.claim(driver, qa)] == [ra.id]
        assert [j.id for j in await self.claim(driver, qa, qb)] == [rb.id]

    async def test_claim_skips_a_paused_queue(self, driver: JobDriver) -> None:
        intro = self.introspect(driver)
        if intro is None:
            return
        qa, qb = uniq("qa"), uniq("qb")
        await intro.pause_queue(qa)
        ra, rb = self.req(qa), self.req(qb)
        await driver.enqueue_many([ra, rb])
        assert await self.counts(driver, qa) == {"ready": 1}, "an enqueue lands in a paused queue"
        assert qa in await intro.paused_queues()
        assert [j.id for j in await self.claim(driver, qa, qb)] == [rb.id]
        await intro.resume_queue(qa)
        assert qa not in await intro.paused_queues()
        assert [j.id for j in await self.claim(driver, qa, qb)] == [ra.id]

    async def test_claim_honours_run_at(self, driver: JobDriver) -> None:
        q = uniq("q")
        soon = self.soon_ms
        r = self.req(q, run_at_ms=await driver.now_ms() + soon)
        await driver.enqueue(r)
        assert await self.claim(driver, q) == []
        await self.elapse(soon + self.settle_margin_ms)
        assert [j.id for j in await self.claim(driver, q)] == [r.id]

    async def test_claim_hands_out_the_oldest_run_at_first_then_the_lowest_id(
        self, driver: JobDriver
    ) -> None:
        q = uniq("q")
        now = await driver.now_ms()
        low_id, high_id = new_id(), new_id()
        assert low_id < high_id
        order = [
            self.req(q, run_at_ms=now - 1_000),
            self.req(q, run_at_ms=now - 3_000),
            self.req(q, run_at_ms=now - 2_000, job_id=high_id),
            self.req(q, run_at_ms=now - 2_000, job_id=low_id),
        ]
        for r in order:
            await driver.enqueue(r)
        got = [(await self.claim_one(driver, q)).id for _ in order]
        assert got == [order[1].id, low_id, high_id, order[0].id]

    # --- fencing ------------------------------------------------------------------------------

    async def test_settles_are_fenced_on_worker_and_claim(self, driver: JobDriver) -> None:
        q = uniq("q")
        await driver.enqueue(self.req(q))
        job = await self.claim_one(driver, q)
        for worker, claim in (("worker-2", job.claim), (job.worker_id, new_id())):
            assert not await driver.ack(job.id, worker_id=worker, claim=claim, result=1)
            for outcome in ("retry", "dead", "failed", "suspend", "release"):
                assert not await driver.nack(
                    job.id, worker_id=worker, claim=claim, outcome=outcome, run_at_ms=0
                )
            assert not await driver.heartbeat(
                job.id, worker_id=worker, claim=claim, visibility_timeout_ms=LONG_VT
            )
            assert not await driver.progress(
                job.id, worker_id=worker, claim=claim, progress={"done": 1}
            )
            assert not await driver.steps.record(
                job.id, "s", state="completed", worker_id=worker, claim=claim, output=1
            )
        assert await self.counts(driver, q) == {"running": 1}
        assert await driver.steps.load(job.id) == {}
        intro = self.introspect(driver)
        if intro is not None:
            row = await intro.show(job.id)
            assert (row.state, row.attempts, row.progress, row.worker_id) == (
                "running",
                1,
                None,
                job.worker_id,
            )
        assert await driver.ack(job.id, worker_id=job.worker_id, claim=job.claim)
        assert await self.counts(driver, q) == {"done": 1}

    async def test_a_settled_claim_settles_nothing_more(self, driver: JobDriver) -> None:
        q = uniq("q")
        await driver.enqueue(self.req(q))
        job = await self.claim_one(driver, q)
        assert await driver.ack(job.id, worker_id=job.worker_id, claim=job.claim)
        assert not await driver.ack(job.id, worker_id=job.worker_id, claim=job.claim)
        assert not await driver.nack(
            job.id, worker_id=job.worker_id, claim=job.claim, outcome="retry"
        )
        assert not await driver.heartbeat(
            job.id, worker_id=job.worker_id, claim=job.claim, visibility_timeout_ms=LONG_VT
        )
        assert await self.counts(driver, q) == {"done": 1}

    async def test_settling_an_unknown_job_answers_false(self, driver: JobDriver) -> None:
        ghost = new_id()
        assert not await driver.ack(ghost, worker_id="w", claim=new_id())
        assert not await driver.nack(ghost, worker_id="w", claim=new_id(), outcome="dead")
        assert not await driver.heartbeat(
            ghost, worker_id="w", claim=new_id(), visibility_timeout_ms=LONG_VT
        )

    # --- nack outcomes ------------------------------------------------------------------------

    async def test_nack_retry_puts_the_job_back_after_its_delay(self, driver: JobDriver) -> None:
        q = uniq("q")
        r = self.req(q)
        await driver.enqueue(r)
        job = await self.claim_one(driver, q)
        error: dict[str, Any] = {
            "code": "X_BOOM",
            "message": "boom",
            "fix": None,
            "meta": {},
            "status": None,
        }
        backoff = self.soon_ms
        assert await driver.nack(
            job.id,
            worker_id=job.worker_id,
            claim=job.claim,
            outcome="retry",
            error=error,
            delay_ms=backoff,
        )
        assert await self.counts(driver, q) == {"ready": 1}
        intro = self.introspect(driver)
        if intro is not None:
            row = await intro.show(r.id)
            assert row.last_error is not None and row.last_error["code"] == "X_BOOM"
            assert (row.attempts, row.worker_id, row.lease_expires_at) == (1, None, None)
        assert await self.claim(driver, q) == [], "a retry is due only after its delay"
        await self.elapse(backoff + self.settle_margin_ms)
        again = await self.claim_one(driver, q)
        assert (again.id, again.attempt) == (r.id, 2)
        assert again.claim != job.claim

    async def test_nack_retry_honours_run_at_ms(self, driver: JobDriver) -> None:
        q = uniq("q")
        await driver.enqueue(self.req(q))
        job = await self.claim_one(driver, q)
        now = await driver.now_ms()
        assert await driver.nack(
            job.id, worker_id=job.worker_id, claim=job.claim, outcome="retry", run_at_ms=now - 1
        )
        assert (await self.claim_one(driver, q)).attempt == 2

    async def test_nack_dead_and_failed_settle_for_good(self, driver: JobDriver) -> None:
        intro = self.introspect(driver)
        for outcome in ("dead", "failed"):
            q = uniq("q")
            r = self.req(q)
            await driver.enqueue(r)
            job = await self.claim_one(driver, q)
            error: dict[str, Any] = {
                "code": "X_FINAL",
                "message": "no",
                "fix": None,
                "meta": {},
                "status": None,
            }
            assert await driver.nack(
                job.id, worker_id=job.worker_id, claim=job.claim, outcome=outcome, error=error
            )
            assert await self.counts(driver, q) == {outcome: 1}
            await self.elapse(10)
            assert await self.claim(driver, q) == []
            if intro is not None:
                row = await intro.show(r.id)
                assert row.state == outcome and row.finished_at is not None
                assert row.last_error is not None and row.last_error["code"] == "X_FINAL"
                assert row.lease_expires_at is None

    async def test_nack_suspend_hands_the_attempt_back(self, driver: JobDriver) -> None:
        q = uniq("q")
        await driver.enqueue(self.req(q))
        job = await self.claim_one(driver, q)
        now = await driver.now_ms()
        assert await driver.nack(
            job.id,
            worker_id=job.worker_id,
            claim=job.claim,
            outcome="suspend",
            run_at_ms=now + 3_600_000,
        )
        assert await self.counts(driver, q) == {"suspended": 1}
        assert await self.claim(driver, q) == [], "a sleep is due only at its run_at"
        intro = self.introspect(driver)
        if intro is not None:
            assert (await intro.show(job.id)).attempts == 0
        q2 = uniq("q")
        await driver.enqueue(self.req(q2))
        job2 = await self.claim_one(driver, q2)
        assert await driver.nack(
            job2.id,
            worker_id=job2.worker_id,
            claim=job2.claim,
            outcome="suspend",
            run_at_ms=now - 1,
        )
        resumed = await self.claim_one(driver, q2)
        assert (resumed.id, resumed.attempt) == (job2.id, 1), "a suspension is uncounted"

    async def test_nack_release_hands_the_attempt_back_after_its_delay(
        self, driver: JobDriver
    ) -> None:
        q = uniq("q")
        await driver.enqueue(self.req(q))
        job = await self.claim_one(driver, q)
        wait = self.soon_ms
        assert await driver.nack(
            job.id, worker_id=job.worker_id, claim=job.claim, outcome="release", delay_ms=wait
        )
        assert await self.counts(driver, q) == {"ready": 1}
        assert await self.claim(driver, q) == []
        await self.elapse(wait + self.settle_margin_ms)
        again = await self.claim_one(driver, q)
        assert (again.id, again.attempt) == (job.id, 1)

    # --- enqueue as columns (ColumnEnqueuer, optional: tested when the driver has it) ---------

    async def test_enqueue_columns_answers_as_enqueue_many_of_its_rows(
        self, driver: JobDriver
    ) -> None:
        if not isinstance(driver, ColumnEnqueuer):
            return
        q = uniq("q")
        held = self.req(q, name="cols", key="held")
        await driver.enqueue(held)
        ids = [new_id() for _ in range(5)]
        columns = EnqueueColumns(
            name="cols",
            queue=q,
            max_attempts=2,
            ids=ids,
            run_ids=[new_id() for _ in ids],
            payloads=[{"i": i} for i in range(5)],
            idempotency_keys=["a", "held", "b", "a", "a"],
            tenant_ids=[None, None, None, None, "t1"],
        )
        res = await driver.enqueue_columns(columns)
        assert [(r.id, r.deduped) for r in res] == [
            (ids[0], False),
            (held.id, True),
            (ids[2], False),
            (ids[0], True),
            (ids[4], False),
        ]
        assert res[0].run_id == columns.run_ids[0] and res[1].run_id == held.run_id
        assert await self.counts(driver, q) == {"ready": 4}
        assert (
            await driver.enqueue_columns(
                replace(
                    columns, ids=[], run_ids=[], payloads=[], idempotency_keys=[], tenant_ids=[]
                )
            )
            == []
        )
        claimed = {j.id: j for j in await self.claim(driver, q, limit=10)}
        assert (claimed[ids[4]].payload, claimed[ids[4]].tenant_id) == ({"i": 4}, "t1")
        assert claimed[ids[2]].max_attempts == 2

    # --- batch settles (BatchSettler, optional: tested when the driver has it) ------------------

    async def test_ack_many_lands_each_ack_its_fence_allows(self, driver: JobDriver) -> None:
        if not isinstance(driver, BatchSettler):
            return
        q = uniq("q")
        since = await driver.now_ms() - 60_000
        await driver.enqueue_many([self.req(q, name="batched") for _ in range(3)])
        a, b = await self.claim(driver, q, limit=2, worker="w1")
        c = await self.claim_one(driver, q, worker="w2")
        landed = await driver.ack_many(
            [
                AckRequest(a.id, a.claim, result={"a": 1}, duration_ms=5),
                AckRequest(b.id, new_id(), result={"b": 1}),
                AckRequest(c.id, c.claim, result={"c": 1}),
            ],
            worker_id="w1",
        )
        assert landed == [True, False, False]
        assert await driver.ack_many([AckRequest(a.id, a.claim)], worker_id="w1") == [False]
        assert await self.counts(driver, q) == {"done": 1, "running": 2}
        assert await driver.ack_many([], worker_id="w1") == []
        intro = self.introspect(driver)
        if intro is not None:
            assert (await intro.show(a.id)).result == {"a": 1}
            rows = await intro.counters(job="batched", since_ms=since)
            assert (sum(r.done for r in rows), sum(r.duration_ms for r in rows)) == (1, 5)

    async def test_heartbeat_many_renews_each_lease_its_fence_allows(
        self, driver: JobDriver
    ) -> None:
        if not isinstance(driver, BatchSettler):
            return
        q = uniq("q")
        vt = self.soon_ms
        await driver.enqueue_many([self.req(q), self.req(q)])
        a, b = await self.claim(driver, q, limit=2, worker="w1", vt=vt)
        await self.elapse(vt * 6 // 10)
        landed = await driver.heartbeat_many(
            [(a.id, a.claim), (b.id, new_id())], worker_id="w1", visibility_timeout_ms=4 * vt
        )
        assert landed == [True, False]
        await self.elapse(vt * 6 // 10)
        again = await self.claim(driver, q, worker="w2")
        assert [j.id for j in again] == [b.id], "only the renewed lease held"
        assert await driver.heartbeat_many([], worker_id="w1", visibility_timeout_ms=vt) == []
