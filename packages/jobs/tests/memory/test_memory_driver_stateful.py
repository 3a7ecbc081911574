"""The memory driver under random sequences of enqueues, claims, settles, heartbeats, clock jumps
past the visibility timeout and worker restarts, on a FrozenClock, checking after every step:

- at most one live row per ``(name, tenant, key)``;
- a job is held by at most one claim: only its latest, unsettled claim lands; every other one
  (superseded after a lapse, or already settled) answers False and changes nothing;
- a terminal job never comes back to a live state unless it is requeued;
- no job is lost: every job ever queued is still there, in some state;
- attempts never exceed max_attempts on a running row.

Every driver call also proves the memory driver's atomicity: it must finish without suspending.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Coroutine
from dataclasses import dataclass
from typing import Any, TypeVar

from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import (
    RuleBasedStateMachine,
    initialize,
    invariant,
    precondition,
    rule,
)

from ultimat3.core import FrozenClock, capture_log_events
from ultimat3.jobs.adapter import (
    LIVE_STATES,
    MAX_JOB_PAGE,
    TERMINAL_STATES,
    EnqueueRequest,
    JobRow,
    NackOutcome,
    job_cursor,
)
from ultimat3.jobs.memory import MemoryJobDriver, memory_job_driver
from ultimat3.jobs.testing import enqueue_requests

T = TypeVar("T")
VT = 1_000
WORKERS = ("w1", "w2", "w3")

requests = enqueue_requests(
    names=st.sampled_from(["a", "b"]),
    queues=st.just("q"),
    tenants=st.sampled_from([None, "t1"]),
    keys=st.sampled_from(["k1", "k2", "k3"]),
    payloads=st.integers(0, 9).map(lambda n: {"n": n}),
    ids=st.uuids().map(str),
    max_attempts=st.integers(1, 3),
    delays=st.none() | st.sampled_from([0, 500, 2_500]),
)


def run(coro: Coroutine[Any, Any, T]) -> T:
    """Drive one driver call to its end; it must never suspend (that is its atomicity)."""
    try:
        coro.send(None)
    except StopIteration as done:
        return done.value  # type: ignore[no-any-return]
    coro.close()
    raise AssertionError("a memory driver call suspended in the middle")


@dataclass(frozen=True)
class Claim:
    job_id: str
    worker: str
    token: str
    final: bool
    """The claim's attempt is the row's last: a worker then settles dead, never retry."""


class MemoryDriverMachine(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        self.clock = FrozenClock()
        self.driver: MemoryJobDriver = memory_job_driver(clock=self.clock)
        self.queued: set[str] = set()
        self.latest: dict[str, Claim] = {}
        self.lease_until: dict[str, int] = {}
        self.settled: set[Claim] = set()
        self.forgotten: set[Claim] = set()
        self.superseded: list[Claim] = []
        self.terminal: set[str] = set()

    # --- helpers ------------------------------------------------------------------------------

    def rows(self) -> list[JobRow]:
        out: list[JobRow] = []
        after: str | None = None
        while True:
            page = run(self.driver.introspect.list(limit=MAX_JOB_PAGE, after=after))
            out.extend(page)
            if len(page) < MAX_JOB_PAGE:
                return out
            after = job_cursor(page[-1])

    def usable(self) -> list[Claim]:
        """Claims a worker still holds and means to settle: latest, unsettled, remembered."""
        return sorted(
            (c for c in self.latest.values() if c not in self.settled and c not in self.forgotten),
            key=lambda c: c.token,
        )

    def stale(self) -> list[Claim]:
        return sorted(
            set(self.superseded) | {c for c in self.settled if self.latest.get(c.job_id) == c},
            key=lambda c: c.token,
        )

    def note_enqueue(self, req: EnqueueRequest, res_id: str, deduped: bool) -> None:
        if deduped:
            assert res_id in self.queued or res_id == req.id
        else:
            assert res_id == req.id and req.id not in self.queued
        self.queued.add(res_id)

    # --- rules --------------------------------------------------------------------------------

    @initialize()
    def start(self) -> None:
        assert run(self.driver.stats()) == []

    @rule(req=requests)
    def enqueue(self, req: EnqueueRequest) -> None:
        res = run(self.driver.enqueue(req))
        self.note_enqueue(req, res.id, res.deduped)

    @rule(batch=st.lists(requests, min_size=1, max_size=6, unique_by=lambda r: r.id))
    def enqueue_many(self, batch: list[EnqueueRequest]) -> None:
        results = run(self.driver.enqueue_many(batch))
        assert len(results) == len(batch)
        for req, res in zip(batch, results, strict=True):
            self.note_enqueue(req, res.id, res.deduped)

    @precondition(lambda self: bool(self.queued))
    @rule(data=st.data())
    def republish(self, data: st.DataObject) -> None:
        job_id = data.draw(st.sampled_from(sorted(self.queued)))
        again = data.draw(requests)
        res = run(self.driver.enqueue(dataclasses.replace(again, id=job_id)))
        assert res.deduped, "a republished id adds no row"

    @rule(worker=st.sampled_from(WORKERS), limit=st.integers(1, 3))
    def claim(self, worker: str, limit: int) -> None:
        now = self.clock.now_ms()
        with capture_log_events() as events:
            jobs = run(
                self.driver.claim(
                    queues=["q"], limit=limit, worker_id=worker, visibility_timeout_ms=VT
                )
            )
        assert len(jobs) <= limit
        for event in events:
            if event["event"] == "jobs.claim.exhausted":
                job_id = event["job_id"]
                assert self.lease_until[job_id] <= now, "only a lapsed lease is exhausted"
                self.settled.add(self.latest[job_id])
                self.terminal.add(job_id)
        for job in jobs:
            assert job.id in self.queued
            assert 1 <= job.attempt <= job.max_attempts
            previous = self.latest.get(job.id)
            if previous is not None and previous not in self.settled:
                assert self.lease_until[job.id] <= now, "a held lease was handed out again"
                self.superseded.append(previous)
            elif previous is not None:
                self.superseded.append(previous)
            claim = Claim(job.id, worker, job.claim, final=job.attempt >= job.max_attempts)
            assert claim not in self.settled
            self.latest[job.id] = claim
            self.lease_until[job.id] = job.lease_expires_at_ms
            assert job.lease_expires_at_ms == now + VT

    @precondition(lambda self: bool(self.usable()))
    @rule(data=st.data(), duration=st.integers(0, 50))
    def ack(self, data: st.DataObject, duration: int) -> None:
        c = data.draw(st.sampled_from(self.usable()))
        landed = run(
            self.driver.ack(c.job_id, worker_id=c.worker, claim=c.token, duration_ms=duration)
        )
        assert landed, "the latest, unsettled claim lands even past its lease"
        self.settled.add(c)
        self.terminal.add(c.job_id)

    @precondition(lambda self: bool(self.usable()))
    @rule(
        data=st.data(),
        outcome=st.sampled_from(["retry", "dead", "failed", "suspend", "release"]),
        delay=st.sampled_from([0, 300, 5_000]),
    )
    def nack(self, data: st.DataObject, outcome: NackOutcome, delay: int) -> None:
        c = data.draw(st.sampled_from(self.usable()))
        if outcome == "retry" and c.final:
            outcome = "dead"  # what the worker does on the final attempt
        before = run(self.driver.introspect.show(c.job_id))
        landed = run(
            self.driver.nack(
                c.job_id,
                worker_id=c.worker,
                claim=c.token,
                outcome=outcome,
                delay_ms=delay,
                error={"code": "X_TEST", "message": outcome},
            )
        )
        assert landed
        self.settled.add(c)
        after = run(self.driver.introspect.show(c.job_id))
        expected_state = {
            "retry": "ready",
            "dead": "dead",
            "failed": "failed",
            "suspend": "suspended",
            "release": "ready",
        }[outcome]
        assert after.state == expected_state
        handed_back = outcome in ("suspend", "release")
        assert after.attempts == before.attempts - (1 if handed_back else 0)
        assert after.worker_id is None and after.lease_expires_at is None
        if outcome in ("dead", "failed"):
            self.terminal.add(c.job_id)

    @precondition(lambda self: bool(self.usable()))
    @rule(data=st.data())
    def heartbeat(self, data: st.DataObject) -> None:
        c = data.draw(st.sampled_from(self.usable()))
        assert run(
            self.driver.heartbeat(
                c.job_id, worker_id=c.worker, claim=c.token, visibility_timeout_ms=VT
            )
        )
        self.lease_until[c.job_id] = self.clock.now_ms() + VT

    @precondition(lambda self: bool(self.stale()))
    @rule(data=st.data(), how=st.sampled_from(["ack", "nack", "heartbeat", "step", "progress"]))
    def stale_claim_settles_nothing(self, data: st.DataObject, how: str) -> None:
        c = data.draw(st.sampled_from(self.stale()))
        before = run(self.driver.introspect.show(c.job_id))
        d, job, w, tok = self.driver, c.job_id, c.worker, c.token
        if how == "ack":
            landed = run(d.ack(job, worker_id=w, claim=tok))
        elif how == "nack":
            landed = run(d.nack(job, worker_id=w, claim=tok, outcome="retry"))
        elif how == "heartbeat":
            landed = run(d.heartbeat(job, worker_id=w, claim=tok, visibility_timeout_ms=VT))
        elif how == "step":
            landed = run(d.steps.record(job, "s", state="completed", worker_id=w, claim=tok))
        else:
            landed = run(d.progress(job, worker_id=w, claim=tok, progress={"done": 1}))
        assert not landed, f"a stale claim's {how} landed"
        assert run(self.driver.introspect.show(c.job_id)) == before

    @rule(ms=st.sampled_from([1, 400, VT, VT + 1, 3 * VT]))
    def advance_clock(self, ms: int) -> None:
        self.clock.advance(ms)

    @rule(worker=st.sampled_from(WORKERS))
    def restart(self, worker: str) -> None:
        """The worker dies: it forgets every claim it held (they lapse; nobody settles them)."""
        self.forgotten |= {c for c in self.latest.values() if c.worker == worker}

    @precondition(lambda self: bool(self.terminal))
    @rule(data=st.data())
    def requeue(self, data: st.DataObject) -> None:
        job_id = data.draw(st.sampled_from(sorted(self.terminal)))
        row = run(self.driver.introspect.show(job_id))
        holder = [
            r
            for r in self.rows()
            if r.state in LIVE_STATES
            and (r.name, r.tenant_id, r.idempotency_key)
            == (row.name, row.tenant_id, row.idempotency_key)
        ]
        if holder:
            return
        back = run(self.driver.introspect.requeue(job_id))
        assert (back.state, back.attempts) == ("ready", 0)
        self.terminal.discard(job_id)

    # --- invariants ---------------------------------------------------------------------------

    @invariant()
    def one_live_row_per_key(self) -> None:
        live = [
            (r.name, r.tenant_id, r.idempotency_key) for r in self.rows() if r.state in LIVE_STATES
        ]
        assert len(live) == len(set(live)), live

    @invariant()
    def no_job_is_lost(self) -> None:
        assert {r.id for r in self.rows()} == self.queued

    @invariant()
    def a_settled_job_stays_settled_until_requeued(self) -> None:
        states = {r.id: r.state for r in self.rows()}
        for job_id in self.terminal:
            assert states[job_id] in TERMINAL_STATES, (job_id, states[job_id])

    @invariant()
    def running_rows_belong_to_their_latest_claim(self) -> None:
        for r in self.rows():
            if r.state == "running":
                assert r.attempts <= r.max_attempts
                latest = self.latest[r.id]
                assert latest not in self.settled
                assert r.worker_id == latest.worker
                assert r.lease_expires_at is not None

    @invariant()
    def stats_agree_with_the_rows(self) -> None:
        total = sum(
            s.ready + s.delayed + s.running + s.suspended + s.done + s.failed + s.dead + s.cancelled
            for s in run(self.driver.stats())
        )
        assert total == len(self.queued)


MemoryDriverMachine.TestCase.settings = settings(
    max_examples=100,
    stateful_step_count=40,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow],
)
TestMemoryDriverStateful = MemoryDriverMachine.TestCase
