"""Postgres against the memory driver, differentially: random sequences of enqueues, batches,
claims, acks, nacks, cancels, requeues and promotes go to both drivers, and every answer must
match — enqueue results, which jobs a claim hands out (and at which attempt), whether a settle
lands, and the rows (state, attempts) and per-queue stats after every step.

Time decides nothing but order here (the memory driver's clock moves 1 ms a step, the server's
as it will): due times are fixed instants in the past or years ahead, a row promoted or requeued
is due at its driver's "now" (so, on both, in the order it happened), and leases never lapse."""

from __future__ import annotations

import asyncio
import os
import uuid
from collections.abc import Coroutine
from typing import Any, TypeVar

from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule

from ultimat3.core import FrozenClock, XError, new_id
from ultimat3.jobs.adapter import (
    MAX_JOB_PAGE,
    EnqueueColumns,
    EnqueueRequest,
    JobDriver,
    NackOutcome,
)
from ultimat3.jobs.memory import memory_job_driver
from ultimat3.jobs.postgres import migrate, postgres_job_driver

T = TypeVar("T")
DSN = os.environ.get("DATABASE_URL") or "postgresql://postgres@127.0.0.1:5432/test"
PAST = 1_700_000_000_000
HOUR = 3_600_000
WORKERS = ("w1", "w2")


@st.composite
def requests(draw: st.DrawFn) -> EnqueueRequest:
    return EnqueueRequest(
        id=draw(st.sampled_from(IDS)),
        run_id=new_id(),
        name=draw(st.sampled_from(["a", "b"])),
        queue=draw(st.sampled_from(["q1", "q2"])),
        payload={"n": draw(st.integers(0, 3))},
        idempotency_key=draw(st.sampled_from(["k1", "k2", "k3"])),
        max_attempts=draw(st.integers(1, 3)),
        tenant_id=draw(st.sampled_from([None, "t1"])),
        run_at_ms=draw(st.sampled_from([PAST, PAST + 1, PAST + 2, PAST + 10 * HOUR * 24 * 365])),
    )


IDS = [str(uuid.UUID(int=(7 << 76) | (2 << 62) | i)) for i in range(1, 13)]
"""A small fixed pool of ids, so republished ids and id collisions happen."""


class Differential(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        self.loop = asyncio.new_event_loop()
        self.schema = f"x_diff_{uuid.uuid4().hex[:12]}"
        self.run(migrate(DSN, schema=self.schema))
        self.pg = postgres_job_driver(DSN, schema=self.schema, max_size=2)
        self.clock = FrozenClock(PAST + HOUR)
        self.mem = memory_job_driver(clock=self.clock)
        self.claims: dict[str, dict[str, tuple[str, str]]] = {"pg": {}, "mem": {}}

    def run(self, coro: Coroutine[Any, Any, T]) -> T:
        return self.loop.run_until_complete(coro)

    def both(self, call: Any) -> tuple[Any, Any]:
        """``call(driver)`` on both; an XError must be the same code on both. The memory clock
        moves 1 ms first, as the server's moves between two statements: rows promoted or
        requeued (due "now") are due in the order it happened on both."""
        self.clock.advance(1)
        out: list[Any] = []
        for driver in (self.pg, self.mem):
            try:
                out.append(("ok", self.run(call(driver))))
            except XError as exc:
                out.append(("refused", exc.code))
        assert out[0][0] == out[1][0] and (out[0][0] == "ok" or out[0][1] == out[1][1]), out
        return out[0][1], out[1][1]

    def teardown(self) -> None:
        try:
            self.run(self.pg.close())
            self.run(self.mem.close())
            self.run(self._drop())
        finally:
            self.loop.close()

    async def _drop(self) -> None:
        import psycopg
        from psycopg import sql

        async with await psycopg.AsyncConnection.connect(DSN, autocommit=True) as conn:
            await conn.execute(
                sql.SQL("DROP SCHEMA IF EXISTS {} CASCADE").format(sql.Identifier(self.schema))
            )

    # --- rules --------------------------------------------------------------------------------

    @rule(r=requests())
    def enqueue(self, r: EnqueueRequest) -> None:
        a, b = self.both(lambda d: d.enqueue(r))
        assert a == b

    @rule(rs=st.lists(requests(), min_size=1, max_size=6, unique_by=lambda r: r.id))
    def enqueue_many(self, rs: list[EnqueueRequest]) -> None:
        """Ids are unique within a batch, as the facade allocates them (ids repeat across
        calls: a republish)."""
        a, b = self.both(lambda d: d.enqueue_many(rs))
        assert a == b

    @rule(
        rows=st.lists(
            st.tuples(
                st.sampled_from(IDS),
                st.sampled_from(["k1", "k2", "k3"]),
                st.sampled_from([None, "t1"]),
                st.integers(0, 3),
            ),
            min_size=1,
            max_size=6,
            unique_by=lambda row: row[0],
        ),
        name=st.sampled_from(["a", "b"]),
        queue=st.sampled_from(["q1", "q2"]),
        run_at_ms=st.sampled_from([PAST, PAST + 10 * HOUR * 24 * 365]),
    )
    def enqueue_columns(
        self,
        rows: list[tuple[str, str, str | None, int]],
        name: str,
        queue: str,
        run_at_ms: int,
    ) -> None:
        """A batch handed to Postgres as columns answers (and leaves) what the memory driver's
        enqueue_many of the same rows does: keys given twice, live keys and republished ids
        included."""
        columns = EnqueueColumns(
            name=name,
            queue=queue,
            max_attempts=2,
            ids=[row[0] for row in rows],
            run_ids=[new_id() for _ in rows],
            payloads=[{"n": row[3]} for row in rows],
            idempotency_keys=[row[1] for row in rows],
            tenant_ids=[row[2] for row in rows],
            run_at_ms=run_at_ms,
        )

        def call(d: JobDriver) -> Any:
            if d is self.pg:
                return self.pg.enqueue_columns(columns)
            return d.enqueue_many(columns.requests())

        a, b = self.both(call)
        assert a == b

    @rule(
        queues=st.lists(st.sampled_from(["q1", "q2"]), min_size=1, max_size=2),
        limit=st.integers(0, 4),
        worker=st.sampled_from(WORKERS),
    )
    def claim(self, queues: list[str], limit: int, worker: str) -> None:
        def call(d: JobDriver) -> Any:
            return d.claim(queues=queues, limit=limit, worker_id=worker, visibility_timeout_ms=HOUR)

        a, b = self.both(call)
        assert [(j.id, j.attempt, j.payload) for j in a] == [
            (j.id, j.attempt, j.payload) for j in b
        ]
        for key, jobs in (("pg", a), ("mem", b)):
            for j in jobs:
                self.claims[key][j.id] = (j.worker_id, j.claim)

    def held(self) -> list[str]:
        return sorted(self.claims["pg"])

    @precondition(lambda self: self.claims["pg"])
    @rule(data=st.data(), stale_worker=st.booleans())
    def ack(self, data: st.DataObject, stale_worker: bool) -> None:
        job_id = data.draw(st.sampled_from(self.held()))

        def call(d: JobDriver) -> Any:
            worker, token = self.claims["pg" if d is self.pg else "mem"][job_id]
            return d.ack(
                job_id, worker_id="w9" if stale_worker else worker, claim=token, duration_ms=3
            )

        a, b = self.both(call)
        assert a == b

    @precondition(lambda self: self.claims["pg"])
    @rule(
        data=st.data(),
        outcome=st.sampled_from(["retry", "dead", "failed", "suspend", "release"]),
        at=st.sampled_from([PAST + 5, PAST + HOUR * 24 * 365 * 10]),
    )
    def nack(self, data: st.DataObject, outcome: NackOutcome, at: int) -> None:
        job_id = data.draw(st.sampled_from(self.held()))
        error: dict[str, Any] = {
            "code": "X_BOOM",
            "message": "boom",
            "fix": None,
            "meta": {},
            "status": None,
        }

        def call(d: JobDriver) -> Any:
            worker, token = self.claims["pg" if d is self.pg else "mem"][job_id]
            return d.nack(
                job_id,
                worker_id=worker,
                claim=token,
                outcome=outcome,
                error=error,
                run_at_ms=at,
                wait_event="evt" if outcome == "suspend" else None,
            )

        a, b = self.both(call)
        assert a == b

    @precondition(lambda self: self.claims["pg"])
    @rule(
        data=st.data(),
        name=st.sampled_from(["s1", "s2"]),
        state=st.sampled_from(["started", "completed", "failed"]),
        output=st.integers(0, 3),
    )
    def record_step(self, data: st.DataObject, name: str, state: Any, output: int) -> None:
        job_id = data.draw(st.sampled_from(self.held()))

        def call(d: JobDriver) -> Any:
            worker, token = self.claims["pg" if d is self.pg else "mem"][job_id]
            return d.steps.record(
                job_id, name, state=state, worker_id=worker, claim=token, output=output
            )

        a, b = self.both(call)
        assert a == b
        la, lb = self.both(lambda d: d.steps.load(job_id))
        assert {k: (v.state, v.executions, v.output) for k, v in la.items()} == {
            k: (v.state, v.executions, v.output) for k, v in lb.items()
        }

    @precondition(lambda self: self.claims["pg"])
    @rule(data=st.data(), what=st.sampled_from(["heartbeat", "progress"]))
    def renew(self, data: st.DataObject, what: str) -> None:
        job_id = data.draw(st.sampled_from(self.held()))

        def call(d: JobDriver) -> Any:
            worker, token = self.claims["pg" if d is self.pg else "mem"][job_id]
            if what == "heartbeat":
                return d.heartbeat(
                    job_id, worker_id=worker, claim=token, visibility_timeout_ms=HOUR
                )
            return d.progress(job_id, worker_id=worker, claim=token, progress={"done": 1})

        a, b = self.both(call)
        assert a == b

    @rule(queue=st.sampled_from(["q1", "q2"]), pause=st.booleans())
    def pause(self, queue: str, pause: bool) -> None:
        def call(d: JobDriver) -> Any:
            intro = d.introspect  # type: ignore[attr-defined]
            return intro.pause_queue(queue) if pause else intro.resume_queue(queue)

        self.both(call)
        a, b = self.both(lambda d: d.introspect.paused_queues())
        assert a == b

    @rule(
        op=st.sampled_from(["remove_many", "promote_many"]),
        state=st.sampled_from(["ready", "delayed", "done", "dead", "failed", "cancelled"]),
        queue=st.sampled_from([None, "q1"]),
    )
    def bulk(self, op: str, state: Any, queue: str | None) -> None:
        def call(d: JobDriver) -> Any:
            intro = d.introspect  # type: ignore[attr-defined]
            return getattr(intro, op)(state=state, queue=queue)

        a, b = self.both(call)
        assert a == b

    @rule(job_id=st.sampled_from(IDS))
    def remove(self, job_id: str) -> None:
        self.both(lambda d: d.introspect.remove(job_id))

    @rule()
    def wake(self) -> None:
        a, b = self.both(lambda d: d.wake_waiters("evt"))
        assert a == b

    @rule(job_id=st.sampled_from(IDS), op=st.sampled_from(["cancel", "requeue", "promote"]))
    def operate(self, job_id: str, op: str) -> None:
        def call(d: JobDriver) -> Any:
            intro = d.introspect  # type: ignore[attr-defined]
            return getattr(intro, op)(job_id)

        a, b = self.both(call)
        if not isinstance(a, str):
            assert (a.id, a.state, a.attempts) == (b.id, b.state, b.attempts)

    @rule(state=st.sampled_from(["dead", "failed", "cancelled", "done"]))
    def requeue_many(self, state: str) -> None:
        a, b = self.both(lambda d: d.introspect.requeue_many(state=state))
        assert a == b

    # --- invariants ---------------------------------------------------------------------------

    @invariant()
    def same_rows_and_stats(self) -> None:
        def rows(d: JobDriver) -> Any:
            return d.introspect.list(limit=MAX_JOB_PAGE)  # type: ignore[attr-defined]

        a, b = self.both(rows)
        assert sorted((r.id, r.state, r.attempts, r.name) for r in a) == sorted(
            (r.id, r.state, r.attempts, r.name) for r in b
        )
        sa, sb = self.both(lambda d: d.stats())
        assert sa == sb

    @invariant()
    def same_counter_totals(self) -> None:
        async def totals(d: JobDriver) -> Any:
            since = await d.now_ms() - 60_000
            return await d.introspect.counter_totals(since)  # type: ignore[attr-defined]

        a, b = self.both(totals)
        assert a == b


Differential.TestCase.settings = settings(
    max_examples=int(os.environ.get("X_DIFF_EXAMPLES", "30")),
    stateful_step_count=25,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much],
)
TestPostgresMatchesMemory = Differential.TestCase
