"""The test harness: the spec's "retries only the failed step", the dead letter's replay, and
replay determinism as a property — on the memory driver and on Postgres (``engine``); what drives
the frozen clock is memory-only, with a real-time variant on Postgres."""

from __future__ import annotations

import asyncio
import random
from typing import Any
from uuid import UUID, uuid4

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from pydantic import BaseModel

from ultimat3.core import XError, adapter, current_clock
from ultimat3.jobs import Retry, job
from ultimat3.jobs.adapter import JOB_DRIVER
from ultimat3.jobs.testing import JobHarness, JobTrace, job_harness
from ultimat3_testkit.engine_drivers import Engine


class OnboardOrg(BaseModel):
    org_id: UUID


class MailFake:
    """Sends mail into a list; ``fail_once(kind)`` makes the next send of that kind raise."""

    def __init__(self) -> None:
        self.sent: list[tuple[str, str]] = []
        self._failing: set[str] = set()

    def fail_once(self, kind: str) -> None:
        self._failing.add(kind)

    async def send(self, kind: str, org: Any) -> None:
        if kind in self._failing:
            self._failing.discard(kind)
            raise ConnectionError(f"mail vendor down sending {kind}")
        self.sent.append((kind, org["id"]))


mail = MailFake()


@job(
    input=OnboardOrg,
    tenant=lambda i: str(i.org_id),
    idempotency_key=lambda i: f"onboard:{i.org_id}",
    retry=Retry(attempts=5, backoff="exponential"),
)
async def onboard_org(input: OnboardOrg, step: Any, ctx: Any) -> None:
    org = await step.run("provision", lambda signal: {"id": str(input.org_id)})
    await step.run("welcome-email", lambda signal: mail.send("welcome", org))
    await step.sleep("3d")
    await step.run("nudge", lambda signal: mail.send("nudge", org))


# memory only: the frozen clock drives the 3 d sleep (variant on Postgres below)
async def test_onboard_org_retries_only_the_failed_step() -> None:
    run_jobs = JobHarness(jobs=[onboard_org])
    mail.fail_once("nudge")
    await run_jobs(onboard_org, {"org_id": str(uuid4())})
    run_jobs.clock.advance("3d")
    trace = await run_jobs.drain()
    assert trace is not None
    assert trace.steps["provision"].executions == 1  # replayed from storage
    assert trace.steps["nudge"].executions == 2  # only this one retried
    assert trace.state == "done"


async def test_on_postgres_onboard_org_retries_only_the_failed_step(pg_engine: Engine) -> None:
    provisioned: list[str] = []

    @job(
        input=OnboardOrg,
        tenant=lambda i: str(i.org_id),
        idempotency_key=lambda i: f"onboard:{i.org_id}",
        retry=Retry(attempts=5, backoff="exponential", delay="50ms"),
        name="onboard-org-pg",
    )
    async def onboard(input: OnboardOrg, step: Any, ctx: Any) -> None:
        def provision(signal: Any) -> dict[str, str]:
            provisioned.append(str(input.org_id))
            return {"id": str(input.org_id)}

        org = await step.run("provision", provision)
        await step.run("welcome-email", lambda signal: mail.send("welcome", org))
        await step.sleep("300ms")
        await step.run("nudge", lambda signal: mail.send("nudge", org))

    h = pg_engine.real_time_harness([onboard])
    mail.fail_once("nudge")
    org_id = str(uuid4())
    trace = await h(onboard, {"org_id": org_id})
    assert trace.state == "suspended" and "nudge" not in trace.steps
    trace = await h.drain_until("done")
    assert trace.steps["provision"].executions == 1  # replayed from storage
    assert trace.steps["welcome-email"].executions == 1
    assert trace.steps["nudge"].executions == 2  # only this one retried
    assert trace.attempts == 2
    assert provisioned == [org_id]
    assert [sent for sent in mail.sent if sent[1] == org_id] == [
        ("welcome", org_id),
        ("nudge", org_id),
    ]


# memory only: the frozen clock moves in steps (the Postgres variant above waits its sleep out)
async def test_before_the_clock_moves_the_run_sleeps() -> None:
    run_jobs = JobHarness(jobs=[onboard_org])
    trace = await run_jobs(onboard_org, {"org_id": str(uuid4())})
    assert trace.state == "suspended"
    assert "nudge" not in trace.steps
    run_jobs.clock.advance("2d")
    assert (await run_jobs.drain()).state == "suspended"  # type: ignore[union-attr]
    run_jobs.clock.advance("1d")
    assert (await run_jobs.drain()).state == "done"  # type: ignore[union-attr]


flaky_calls: dict[str, int] = {}


class Plan(BaseModel):
    key: str
    fail_at: str | None = None


@job(input=Plan, idempotency_key=lambda p: p.key, retry=Retry(attempts=1))
async def three_steps(input: Plan, step: Any, ctx: Any) -> str:
    for name in ("a", "b", "c"):

        def work(signal: Any, name: str = name) -> str:
            flaky_calls[name] = flaky_calls.get(name, 0) + 1
            if input.fail_at == name and flaky_calls[name] == 1:
                raise RuntimeError(f"{name} broke")
            return f"{name}-out"

        await step.run(name, work)
    return "finished"


async def test_a_dead_job_requeued_resumes_from_the_failed_step(engine: Engine) -> None:
    flaky_calls.clear()
    async with engine.harness([three_steps]) as h:
        trace: JobTrace | None  # drain() below may answer None
        trace = await h(three_steps, {"key": "k1", "fail_at": "b"})
        assert trace.state == "dead"
        assert trace.last_error is not None
        assert "b broke" in trace.last_error["message"]
        assert trace.steps["a"].state == "completed"
        assert trace.steps["b"].state == "failed"
        await h.requeue(trace.id)
        trace = await h.drain()
        assert trace is not None
    assert trace.state == "done"
    assert trace.result == "finished"
    assert flaky_calls == {"a": 1, "b": 2, "c": 1}  # a replayed from storage
    assert trace.steps["a"].executions == 1
    assert trace.steps["b"].executions == 2


async def test_a_requeue_from_a_step_runs_it_and_every_step_after_it_again(
    engine: Engine,
) -> None:
    flaky_calls.clear()
    h = engine.harness([three_steps])
    trace = await h(three_steps, {"key": "k2"})
    assert trace.state == "done" and flaky_calls == {"a": 1, "b": 1, "c": 1}
    await h.requeue(trace.id, from_step="b")  # x jobs retry <id> --from-step b
    trace = await h.drain()  # type: ignore[assignment]
    assert trace.state == "done" and trace.result == "finished"
    assert flaky_calls == {"a": 1, "b": 2, "c": 2}  # a replayed from storage, b and c re-run
    assert [trace.steps[n].executions for n in "abc"] == [1, 1, 1]


async def test_job_harness_is_the_async_with_form_binding_its_clock_and_driver() -> None:
    async with job_harness(jobs=[three_steps]) as h:
        assert isinstance(h, JobHarness)
        assert current_clock() is h.clock
        assert adapter(JOB_DRIVER) is h.driver
    assert current_clock() is not h.clock


async def test_drain_without_work_answers_none(engine: Engine) -> None:
    h = engine.harness([three_steps])
    assert await h.drain() is None


async def test_the_harness_binds_its_driver_for_enqueues_inside_bodies(engine: Engine) -> None:
    class Fan(BaseModel):
        n: int

    @job(input=Fan, idempotency_key=lambda f: f"fan:{f.n}")
    async def fan(input: Fan, step: Any, ctx: Any) -> None:
        if input.n < 3:
            await fan.enqueue({"n": input.n + 1})

    h = engine.harness([fan])
    await h(fan, {"n": 0})
    rows = await h.rows(name="fan")
    assert sorted(r.payload["n"] for r in rows) == [0, 1, 2, 3]
    assert {r.state for r in rows} == {"done"}


# --- replay determinism -------------------------------------------------------------------------


class Scenario(BaseModel):
    key: str
    steps: list[str]
    failures: dict[str, int]


calls: dict[str, int] = {}


@job(input=Scenario, idempotency_key=lambda s: s.key, retry=Retry(attempts=50, delay=0))
async def scripted(input: Scenario, step: Any, ctx: Any) -> None:
    for name in input.steps:

        async def work(signal: Any, name: str = name) -> int:
            calls[name] = calls.get(name, 0) + 1
            if calls[name] <= input.failures.get(name, 0):
                raise RuntimeError(f"{name} fails (call {calls[name]})")
            return calls[name]

        await step.run(name, work)


# memory only: a fresh harness per example (the seeded Postgres variant below shares one schema)
@settings(max_examples=40, deadline=None)
@given(
    plan=st.lists(
        st.tuples(st.sampled_from("abcdefgh"), st.integers(0, 3)),
        min_size=1,
        max_size=6,
        unique_by=lambda t: t[0],
    )
)
def test_every_completed_step_ran_exactly_once_whatever_fails(
    plan: list[tuple[str, int]],
) -> None:
    steps = [name for name, _ in plan]
    failures = dict(plan)

    async def scenario() -> None:
        calls.clear()
        h = JobHarness(jobs=[scripted])
        trace = await h(scripted, {"key": "s", "steps": steps, "failures": failures})
        assert trace.state == "done"
        assert trace.attempts == 1 + sum(failures.values())
        for name in steps:
            # each failure is one more call; the success is exactly one, then it replays
            assert calls[name] == failures[name] + 1
            assert trace.steps[name].executions == failures[name] + 1
            assert trace.steps[name].output == failures[name] + 1

    asyncio.run(scenario())


async def test_on_postgres_every_completed_step_ran_exactly_once_whatever_fails(
    pg_engine: Engine,
) -> None:
    rng = random.Random(5)
    h = pg_engine.harness([scripted])
    for case in range(12):
        names = rng.sample("abcdefgh", rng.randint(1, 6))
        failures = {name: rng.randint(0, 3) for name in names}
        calls.clear()
        trace = await h(scripted, {"key": f"s{case}", "steps": names, "failures": failures})
        assert trace.state == "done"
        assert trace.attempts == 1 + sum(failures.values())
        for name in names:
            assert calls[name] == failures[name] + 1
            assert trace.steps[name].executions == failures[name] + 1
            assert trace.steps[name].output == failures[name] + 1


async def test_a_self_enqueue_from_the_body_dedupes_onto_the_running_row(engine: Engine) -> None:
    answers: list[Any] = []

    class Again(BaseModel):
        key: str

    @job(input=Again, idempotency_key=lambda a: a.key)
    async def rearm(input: Again, step: Any, ctx: Any) -> None:
        result = await rearm.enqueue(input)
        answers.append((result.deduped, result.id == ctx.job_id))

    h = engine.harness([rearm])
    trace = await h(rearm, {"key": "same"})
    assert trace.state == "done"
    assert answers == [(True, True)]  # it armed nothing ...
    assert len(await h.rows(name="rearm")) == 1  # ... and no later run exists


async def test_a_drain_that_never_settles_is_refused_not_looped_forever(engine: Engine) -> None:
    class Forever(BaseModel):
        key: str

    @job(input=Forever, idempotency_key=lambda f: f.key, retry=Retry(attempts=10_000, delay=0))
    async def forever(input: Forever, step: Any, ctx: Any) -> None:
        raise RuntimeError("again")

    h = engine.harness([forever], max_passes=5)
    with pytest.raises(XError) as exc:
        await h(forever, {"key": "f"})
    assert exc.value.code == "X_INVARIANT"
    assert "5 passes" in exc.value.message
    assert exc.value.fix


async def test_a_trace_needs_a_job() -> None:
    with pytest.raises(XError) as exc:
        await JobHarness(jobs=[forever_stub]).trace()
    assert exc.value.code == "X_INVARIANT"


@job(input=OnboardOrg, idempotency_key=lambda i: str(i.org_id), name="forever-stub")
async def forever_stub(input: OnboardOrg, step: Any, ctx: Any) -> None:
    return None
