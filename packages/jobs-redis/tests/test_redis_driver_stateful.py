"""The Redis driver against the memory driver (the reference semantics) under random sequences of
enqueues (deduped, republished, batched), claims, acks, nacks of every outcome, heartbeats, steps,
progress, stale claims, wakes, pauses, cancels, requeues, promotions and removals.

After every step both drivers must agree on every row (state, attempts, payload, result, last
error, progress, holder, steps), on ``stats()`` and on every answer each call gave. Redis time
cannot be frozen, so the machine never depends on it: a job is either due now or an hour away,
and every claim takes all that is due (the order among due jobs is the conformance suite's).
"""

from __future__ import annotations

import asyncio
import dataclasses
import os
import uuid
from collections.abc import Coroutine
from dataclasses import dataclass
from typing import Any, TypeVar

from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule

from ultimat3.core import XError
from ultimat3.jobs.adapter import EnqueueRequest, JobDetail, NackOutcome
from ultimat3.jobs.memory import MemoryJobDriver, memory_job_driver
from ultimat3.jobs.testing import enqueue_requests, idempotency_keys, json_values
from ultimat3.jobs_redis import RedisJobDriver, redis_job_driver

T = TypeVar("T")
VT = 600_000
HOUR = 3_600_000
FAR = 4_102_444_800_000  # 2100-01-01: a suspension nothing but a wake ends
QUEUES = ("q1", "q2")
WORKERS = ("w1", "w2")
REDIS_URL = os.environ.get("REDIS_URL", "redis://127.0.0.1:6379/0")

requests = enqueue_requests(
    names=st.sampled_from(["a", "b.c"]),
    queues=st.sampled_from(QUEUES),
    tenants=st.sampled_from([None, "", "t1"]),
    keys=st.sampled_from(["k1", "k2"]) | idempotency_keys(),
    payloads=json_values(max_leaves=4),
    max_attempts=st.integers(1, 3),
    delays=st.sampled_from([None, 0, HOUR]),
)


@dataclass(frozen=True)
class Claim:
    job_id: str
    worker: str
    memory: str
    redis: str


def view(row: JobDetail) -> dict[str, Any]:
    """What both drivers must agree on (their clocks differ, so no times)."""
    return {
        "id": row.id,
        "run_id": row.run_id,
        "name": row.name,
        "queue": row.queue,
        "state": row.state,
        "attempts": row.attempts,
        "max_attempts": row.max_attempts,
        "idempotency_key": row.idempotency_key,
        "payload": row.payload,
        "tenant_id": row.tenant_id,
        "concurrency_key": row.concurrency_key,
        "last_error": row.last_error,
        "progress": row.progress,
        "result": row.result,
        "worker_id": row.worker_id,
        "leased": row.lease_expires_at is not None,
        "finished": row.finished_at is not None,
        "steps": {
            name: (s.state, s.executions, s.output, s.error) for name, s in row.steps.items()
        },
    }


class RedisAgainstMemory(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        self.loop = asyncio.new_event_loop()
        self.memory: MemoryJobDriver = memory_job_driver()
        self.redis: RedisJobDriver = redis_job_driver(
            REDIS_URL, prefix=f"t-{uuid.uuid4().hex[:16]}"
        )
        self.queued: set[str] = set()
        self.claims: dict[str, Claim] = {}
        self.stale: list[Claim] = []

    def run(self, coro: Coroutine[Any, Any, T]) -> T:
        return self.loop.run_until_complete(coro)

    def both(self, call: str, *args: Any, **kwargs: Any) -> Any:
        """The same call on both drivers: the same answer, or the same refusal."""
        answers: list[tuple[str, Any]] = []
        for driver in (self.memory, self.redis):
            target: Any = driver
            for part in call.split("."):
                target = getattr(target, part)
            try:
                answers.append(("ok", self.run(target(*args, **kwargs))))
            except XError as exc:
                answers.append(("error", exc.code))
        (mem_kind, mem), (red_kind, red) = answers
        assert mem_kind == red_kind, f"{call}: memory {answers[0]}, redis {answers[1]}"
        if mem_kind == "error":
            assert mem == red, f"{call}: memory refused {mem}, redis {red}"
            return None
        if isinstance(mem, JobDetail):
            assert view(mem) == view(red), call
        return mem, red

    def teardown(self) -> None:
        async def drop() -> None:
            try:
                async for key in self.redis.client.scan_iter(match="{" + self.redis.prefix + "}:*"):
                    await self.redis.client.delete(key)
            finally:
                await self.redis.close()

        try:
            self.run(drop())
        finally:
            self.loop.close()

    # --- enqueue ------------------------------------------------------------------------------

    @rule(req=requests)
    def enqueue(self, req: EnqueueRequest) -> None:
        mem, red = self.both("enqueue", req)
        assert mem == red
        self.queued.add(mem.id)

    @rule(batch=st.lists(requests, min_size=1, max_size=5, unique_by=lambda r: r.id))
    def enqueue_many(self, batch: list[EnqueueRequest]) -> None:
        mem, red = self.both("enqueue_many", batch)
        assert mem == red
        self.queued |= {r.id for r in mem}

    @precondition(lambda self: bool(self.queued))
    @rule(data=st.data())
    def republish(self, data: st.DataObject) -> None:
        job_id = data.draw(st.sampled_from(sorted(self.queued)))
        mem, red = self.both("enqueue", dataclasses.replace(data.draw(requests), id=job_id))
        assert mem == red and mem.deduped

    # --- claims and settles -------------------------------------------------------------------

    @rule(worker=st.sampled_from(WORKERS), queues=st.sets(st.sampled_from(QUEUES), min_size=1))
    def claim(self, worker: str, queues: set[str]) -> None:
        kw = {"queues": sorted(queues), "limit": 1000, "worker_id": worker}
        mem, red = self.both("claim", visibility_timeout_ms=VT, **kw)
        mem_by, red_by = {j.id: j for j in mem}, {j.id: j for j in red}
        assert set(mem_by) == set(red_by)
        for job_id, m in mem_by.items():
            r = red_by[job_id]
            assert (m.attempt, m.payload, m.run_id, m.tenant_id) == (
                r.attempt, r.payload, r.run_id, r.tenant_id,
            )  # fmt: skip
            self.claims[job_id] = Claim(job_id, worker, m.claim, r.claim)

    def held(self) -> list[Claim]:
        return sorted(self.claims.values(), key=lambda c: c.job_id)

    def settled(self, c: Claim) -> None:
        del self.claims[c.job_id]
        self.stale.append(c)

    def fenced(self, call: str, c: Claim, **kwargs: Any) -> bool:
        answers = []
        for driver, token in ((self.memory, c.memory), (self.redis, c.redis)):
            target: Any = driver
            for part in call.split("."):
                target = getattr(target, part)
            answers.append(self.run(target(c.job_id, worker_id=c.worker, claim=token, **kwargs)))
        assert answers[0] == answers[1], f"{call}: memory {answers[0]}, redis {answers[1]}"
        return bool(answers[0])

    @precondition(lambda self: bool(self.claims))
    @rule(data=st.data(), result=json_values(max_leaves=3))
    def ack(self, data: st.DataObject, result: Any) -> None:
        c = data.draw(st.sampled_from(self.held()))
        assert self.fenced("ack", c, result=result, duration_ms=7)
        self.settled(c)

    @precondition(lambda self: bool(self.claims))
    @rule(
        data=st.data(),
        outcome=st.sampled_from(["retry", "dead", "failed", "suspend", "release"]),
        delay=st.sampled_from([0, HOUR]),
        waits=st.booleans(),
    )
    def nack(self, data: st.DataObject, outcome: NackOutcome, delay: int, waits: bool) -> None:
        c = data.draw(st.sampled_from(self.held()))
        extra: dict[str, Any] = {"delay_ms": delay}
        if outcome == "suspend" and waits:
            extra = {"run_at_ms": FAR, "wait_event": "evt"}
        error = {"code": "X_TEST", "message": outcome, "meta": {"n": delay}}
        assert self.fenced("nack", c, outcome=outcome, error=error, **extra)
        self.settled(c)

    @precondition(lambda self: bool(self.claims))
    @rule(data=st.data(), how=st.sampled_from(["heartbeat", "progress", "step"]))
    def while_running(self, data: st.DataObject, how: str) -> None:
        c = data.draw(st.sampled_from(self.held()))
        if how == "heartbeat":
            assert self.fenced("heartbeat", c, visibility_timeout_ms=VT)
        elif how == "progress":
            assert self.fenced("progress", c, progress={"done": 1, "total": 3})
        else:
            name = data.draw(st.sampled_from(["s1", "s2"]))
            state = data.draw(st.sampled_from(["started", "completed", "failed"]))
            self.fenced("steps.record", c, name=name, state=state, output={"o": name})

    @precondition(lambda self: bool(self.stale))
    @rule(data=st.data(), how=st.sampled_from(["ack", "nack", "heartbeat", "progress", "step"]))
    def stale_claim(self, data: st.DataObject, how: str) -> None:
        c = data.draw(st.sampled_from(self.stale))
        if how == "ack":
            landed = self.fenced("ack", c)
        elif how == "nack":
            landed = self.fenced("nack", c, outcome="retry")
        elif how == "heartbeat":
            landed = self.fenced("heartbeat", c, visibility_timeout_ms=VT)
        elif how == "progress":
            landed = self.fenced("progress", c, progress={"x": 1})
        else:
            landed = self.fenced("steps.record", c, name="s9", state="completed")
        assert not landed

    @rule()
    def wake(self) -> None:
        mem, red = self.both("wake_waiters", "evt")
        assert mem == red

    # --- the operator -------------------------------------------------------------------------

    def some_id(self, data: st.DataObject) -> str:
        known = sorted(self.queued)
        return data.draw(st.sampled_from(known) if known else st.just(str(uuid.uuid4())))

    @rule(data=st.data(), op=st.sampled_from(["cancel", "requeue", "promote", "remove"]))
    def operate(self, data: st.DataObject, op: str) -> None:
        job_id = self.some_id(data)
        self.both(f"introspect.{op}", job_id)
        if op in ("cancel", "requeue", "remove") and job_id in self.claims:
            state = self.run(self.memory.introspect.list(id_prefix=job_id))
            if not state or state[0].state != "running":
                self.settled(self.claims[job_id])
        if (
            op == "remove"
            and job_id in self.queued
            and not any(
                r.id == job_id for r in self.run(self.memory.introspect.list(id_prefix=job_id))
            )
        ):
            self.queued.discard(job_id)

    @rule(
        op=st.sampled_from(["remove_many", "requeue_many", "promote_many"]),
        state=st.sampled_from(["ready", "delayed", "done", "dead", "failed", "cancelled"]),
        queue=st.none() | st.sampled_from(QUEUES),
    )
    def bulk(self, op: str, state: str, queue: str | None) -> None:
        answered = self.both(f"introspect.{op}", state=state, queue=queue)
        if answered is not None:
            assert answered[0] == answered[1]
        if op == "requeue_many":
            for c in list(self.claims.values()):
                if self.run(self.memory.introspect.show(c.job_id)).state != "running":
                    self.settled(c)
        self.queued = {r.id for r in self.all_rows(self.memory)}

    @rule(queue=st.sampled_from(QUEUES), pause=st.booleans())
    def pause(self, queue: str, pause: bool) -> None:
        self.both("introspect.pause_queue" if pause else "introspect.resume_queue", queue)

    # --- invariants ---------------------------------------------------------------------------

    def all_rows(self, driver: MemoryJobDriver | RedisJobDriver) -> list[Any]:
        from ultimat3.jobs.adapter import job_cursor

        rows: list[Any] = []
        after = None
        while page := self.run(driver.introspect.list(limit=200, after=after)):
            rows.extend(page)
            after = job_cursor(page[-1])
        return rows

    @invariant()
    def every_row_agrees(self) -> None:
        ids = {r.id for r in self.all_rows(self.redis)}
        assert ids == {r.id for r in self.all_rows(self.memory)} == self.queued
        for job_id in sorted(ids):
            self.both("introspect.show", job_id)

    @invariant()
    def stats_agree(self) -> None:
        mem, red = self.both("stats")
        assert mem == red

    @invariant()
    def pauses_agree(self) -> None:
        mem, red = self.both("introspect.paused_queues")
        assert mem == red


RedisAgainstMemory.TestCase.settings = settings(
    max_examples=25,
    stateful_step_count=30,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow],
)
TestRedisAgainstMemory = RedisAgainstMemory.TestCase
