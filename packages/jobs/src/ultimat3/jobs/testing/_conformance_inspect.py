"""Conformance: reading the queue (show, list, remove) and the backfill ledger."""

from __future__ import annotations

from typing import Any

from ultimat3.core import new_id
from ultimat3.jobs.adapter import (
    MAX_BULK_ROWS,
    MAX_JOB_PAGE,
    JobDriver,
    job_cursor,
)
from ultimat3.jobs.testing._conformance_base import ConformanceBase, held_by, refused, uniq


class InspectConformance(ConformanceBase):
    """Conformance: reading the queue (show, list, remove) and the backfill ledger."""

    # --- introspection: reading ---------------------------------------------------------------

    async def test_show_answers_the_whole_row_with_its_steps(self, driver: JobDriver) -> None:
        intro = self.introspect(driver)
        if intro is None:
            return
        q = uniq("q")
        r = self.req(
            q, name="shown", key="k-show", payload={"a": 1}, tenant_id="t1", concurrency_key="c"
        )
        await driver.enqueue(r)
        row = await intro.show(r.id)
        assert (row.id, row.run_id, row.name, row.queue, row.state) == (
            r.id,
            r.run_id,
            "shown",
            q,
            "ready",
        )
        assert (row.attempts, row.max_attempts, row.idempotency_key) == (0, 3, "k-show")
        assert (row.payload, row.tenant_id, row.concurrency_key) == ({"a": 1}, "t1", "c")
        assert row.created_at.tzinfo is not None and row.run_at.tzinfo is not None
        assert row.steps == {}
        job = await self.claim_one(driver, q)
        held = held_by(job)
        assert await driver.steps.record(job.id, "s1", state="completed", output=[1], **held)
        row = await intro.show(r.id)
        assert (row.state, row.attempts, row.worker_id) == ("running", 1, job.worker_id)
        assert row.lease_expires_at is not None
        assert row.steps["s1"].state == "completed" and row.steps["s1"].output == [1]
        assert row.steps["s1"].executions == 1
        assert await driver.ack(job.id, **held, result={"rows": 3}, duration_ms=12)
        row = await intro.show(r.id)
        assert (row.state, row.result, row.lease_expires_at) == ("done", {"rows": 3}, None)
        assert row.finished_at is not None

    async def test_show_refuses_an_id_nobody_queued(self, driver: JobDriver) -> None:
        intro = self.introspect(driver)
        if intro is None:
            return
        ghost = new_id()
        async with refused("X_JOB_NOT_FOUND", ghost):
            await intro.show(ghost)

    async def test_list_pages_newest_first_with_keyset_cursors(self, driver: JobDriver) -> None:
        intro = self.introspect(driver)
        if intro is None:
            return
        q = uniq("q")
        ids = []
        for i in range(7):
            r = self.req(q, payload={"i": i})
            ids.append(r.id)
            await driver.enqueue(r)
            await self.elapse(2)
        newest = list(reversed(ids))
        page1 = await intro.list(queue=q, limit=3)
        assert [r.id for r in page1] == newest[:3]
        page2 = await intro.list(queue=q, limit=3, after=job_cursor(page1[-1]))
        assert [r.id for r in page2] == newest[3:6]
        page3 = await intro.list(queue=q, limit=3, after=job_cursor(page2[-1]))
        assert [r.id for r in page3] == newest[6:]
        assert await intro.list(queue=q, limit=3, after=job_cursor(page3[-1])) == []
        back = await intro.list(queue=q, limit=3, before=job_cursor(page2[0]))
        assert [r.id for r in back] == newest[:3]
        back = await intro.list(queue=q, limit=3, before=job_cursor(page3[0]))
        assert [r.id for r in back] == newest[3:6], "before= is the page just above the cursor"
        assert await intro.list(queue=q, limit=3, before=job_cursor(page1[0])) == []
        assert [r.id for r in await intro.list(queue=q, limit=MAX_JOB_PAGE)] == newest

    async def test_list_filters(self, driver: JobDriver) -> None:
        intro = self.introspect(driver)
        if intro is None:
            return
        q, q_other = uniq("q"), uniq("q")
        a0 = self.req(q, name="alpha", tenant_id="t1")
        await driver.enqueue(a0)
        await self.elapse(20)
        a1 = self.req(q, name="alpha", tenant_id="t2")
        await driver.enqueue(a1)
        await self.elapse(20)
        b2 = self.req(q, name="beta", tenant_id="t1", delay_ms=3_600_000)
        await driver.enqueue(b2)
        await driver.enqueue(self.req(q_other, name="alpha"))

        async def ids(**kw: Any) -> list[str]:
            return [r.id for r in await intro.list(queue=q, **kw)]

        assert await ids() == [b2.id, a1.id, a0.id]
        assert await ids(name="alpha") == [a1.id, a0.id]
        assert await ids(state="delayed") == [b2.id]
        assert await ids(state="ready", tenant_id="t1") == [a0.id]
        assert await ids(id_prefix=a1.id[:34]) == [a1.id]
        created = [(await intro.show(x.id)).created_at for x in (a0, a1, b2)]
        assert created[0] < created[1] < created[2]
        assert await ids(created_from=created[1]) == [b2.id, a1.id]
        assert await ids(created_to=created[1]) == [a1.id, a0.id]
        assert await ids(created_from=created[1], created_to=created[1]) == [a1.id]
        assert {r.queue for r in await intro.list(name="alpha", limit=MAX_JOB_PAGE)} >= {
            q,
            q_other,
        }

    async def test_list_refuses_oversized_pages_and_cursors_no_page_produced(
        self, driver: JobDriver
    ) -> None:
        intro = self.introspect(driver)
        if intro is None:
            return
        q = uniq("q")
        await driver.enqueue(self.req(q))
        [row] = await intro.list(queue=q)
        async with refused("X_JOB_PAGE_INVALID", str(MAX_JOB_PAGE + 1)):
            await intro.list(limit=MAX_JOB_PAGE + 1)
        async with refused("X_JOB_PAGE_INVALID"):
            await intro.list(limit=0)
        async with refused("X_JOB_PAGE_INVALID", "not-a-cursor"):
            await intro.list(after="not-a-cursor")
        good = job_cursor(row)
        tampered = good[:-2] + ("AA" if good[-2:] != "AA" else "BB")
        async with refused("X_JOB_PAGE_INVALID"):
            await intro.list(before=tampered)
        async with refused("X_INVARIANT", "after", "before"):
            await intro.list(after=good, before=good)

    async def test_remove_deletes_a_job_that_is_not_running(self, driver: JobDriver) -> None:
        intro = self.introspect(driver)
        if intro is None:
            return
        q = uniq("q")
        ready = self.req(q, key="k")
        await driver.enqueue(ready)
        await intro.remove(ready.id)
        async with refused("X_JOB_NOT_FOUND", ready.id):
            await intro.show(ready.id)
        again = await driver.enqueue(self.req(q, key="k"))
        assert again.deduped is False, "a removed job frees its key"
        job = await self.claim_one(driver, q)
        async with refused("X_JOB_NOT_REMOVABLE", job.id, "running"):
            await intro.remove(job.id)
        assert await self.counts(driver, q) == {"running": 1}
        assert await driver.nack(job.id, worker_id=job.worker_id, claim=job.claim, outcome="dead")
        await intro.remove(job.id)
        assert await self.counts(driver, q) == {}
        ghost = new_id()
        async with refused("X_JOB_NOT_FOUND", ghost):
            await intro.remove(ghost)

    async def test_remove_many_is_bounded_and_filtered(self, driver: JobDriver) -> None:
        intro = self.introspect(driver)
        if intro is None:
            return
        q = uniq("q")
        await driver.enqueue_many([self.req(q) for _ in range(MAX_BULK_ROWS + 5)])
        first = await intro.remove_many(state="ready", queue=q)
        assert (first.affected, first.remaining) == (MAX_BULK_ROWS, 5)
        second = await intro.remove_many(state="ready", queue=q)
        assert (second.affected, second.remaining) == (5, 0)
        assert await self.counts(driver, q) == {}
        q2 = uniq("q")
        await driver.enqueue_many(
            [
                self.req(q2, name="a", tenant_id="t1"),
                self.req(q2, name="a", tenant_id="t2"),
                self.req(q2, name="b", tenant_id="t1"),
            ]
        )
        only = await intro.remove_many(state="ready", queue=q2, name="a", tenant_id="t1")
        assert (only.affected, only.remaining) == (1, 0)
        assert sorted((r.name, r.tenant_id) for r in await intro.list(queue=q2)) == [
            ("a", "t2"),
            ("b", "t1"),
        ]
        async with refused("X_JOB_NOT_REMOVABLE", "running"):
            await intro.remove_many(state="running", queue=q2)

    # --- backfill ledger ----------------------------------------------------------------------

    async def test_the_backfill_ledger_records_each_pass(self, driver: JobDriver) -> None:
        ledger = self.backfills(driver)
        if ledger is None:
            return
        name = uniq("backfill")
        job_id = new_id()
        first = await ledger.begin(name, job_id=job_id, cursor=None)
        assert (first.name, first.state, first.rows, first.cursor, first.job_id) == (
            name,
            "running",
            0,
            None,
            job_id,
        )
        await ledger.advance(first.id, rows=100, cursor={"after": 100})
        await ledger.advance(first.id, rows=50, cursor={"after": 150})
        [row] = [r for r in await ledger.list() if r.id == first.id]
        assert (row.rows, row.cursor, row.state) == (150, {"after": 150}, "running")
        await ledger.finish(first.id, state="done")
        await self.elapse(5)
        second = await ledger.begin(name, job_id=None, cursor={"after": 0})
        mine = [r for r in await ledger.list() if r.name == name]
        assert [r.id for r in mine] == [second.id, first.id], "newest first"
        assert mine[1].state == "done"
        assert len(await ledger.list(limit=1)) == 1
