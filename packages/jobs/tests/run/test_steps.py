"""Durable steps: step.run, once-steps, step.sleep, step.wait_for_event, and their refusals — on
the memory driver and on Postgres (``harness``); what drives the frozen clock or a memory
transaction is memory-only, with a real-time variant on Postgres."""

from __future__ import annotations

import asyncio
import contextlib
import threading
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any

import psycopg
import pytest
from psycopg_pool import AsyncConnectionPool
from pydantic import BaseModel

from ultimat3.core import Signal, XError, from_epoch_ms, to_epoch_ms, use_connection
from ultimat3.jobs import Retry, job, publish_event
from ultimat3.jobs.memory import MemoryTransaction
from ultimat3.jobs.postgres import transaction
from ultimat3.jobs.testing import JobHarness, JobTrace
from ultimat3_testkit.engine_drivers import Engine


class Key(BaseModel):
    key: str = "k"


def _key(i: Key) -> str:
    return i.key


def _h(*jobs: Any) -> JobHarness:
    """A harness on the memory driver alone (for the tests that drive its frozen clock)."""
    return JobHarness(jobs=list(jobs))


Harness = Callable[..., JobHarness]


@pytest.fixture
def harness(engine: Engine) -> Harness:
    """``harness(*jobs)``: a harness on the memory driver, then on Postgres (real time)."""
    return lambda *jobs, **options: engine.harness(list(jobs), **options)


# --- step.run -----------------------------------------------------------------------------------


async def test_a_step_answers_its_stored_json_form_on_the_first_run_too(harness: Harness) -> None:
    seen: list[Any] = []

    class View(BaseModel):
        at: datetime
        n: int

    @job(input=Key, idempotency_key=_key)
    async def forms(input: Key, step: Any, ctx: Any) -> None:
        when = datetime(2026, 5, 1, 12, 0, tzinfo=UTC)
        seen.append(await step.run("when", lambda s: when))
        seen.append(await step.run("view", lambda s: View(at=when, n=2)))
        seen.append(await step.run("missing", lambda s: None))

    trace = await harness(forms)(forms, {})
    assert trace.state == "done"
    assert seen == ["2026-05-01T12:00:00Z", {"at": "2026-05-01T12:00:00Z", "n": 2}, None]
    assert trace.steps["view"].output == {"at": "2026-05-01T12:00:00Z", "n": 2}


async def test_a_completed_step_is_replayed_without_calling_fn(harness: Harness) -> None:
    calls: list[str] = []
    answers: list[Any] = []

    @job(input=Key, idempotency_key=_key, retry=Retry(attempts=3, delay=0))
    async def replayed(input: Key, step: Any, ctx: Any) -> None:
        def first(signal: Signal) -> dict[str, int]:
            calls.append("first")
            return {"n": len(calls)}

        answers.append(await step.run("first", first))
        if ctx.attempt == 1:
            raise RuntimeError("after the step")

    trace = await harness(replayed)(replayed, {})
    assert trace.state == "done"
    assert calls == ["first"]
    assert answers == [{"n": 1}, {"n": 1}]
    assert trace.steps["first"].executions == 1


async def test_an_unserialisable_output_is_terminal(harness: Harness) -> None:
    @job(input=Key, idempotency_key=_key, retry=Retry(attempts=5))
    async def unserialisable(input: Key, step: Any, ctx: Any) -> None:
        await step.run("bytes", lambda s: b"\x00")

    trace = await harness(unserialisable)(unserialisable, {})
    assert trace.state == "dead"
    assert trace.attempts == 1  # terminal: not retried
    assert trace.last_error is not None
    assert trace.last_error["code"] == "X_STEP_OUTPUT_UNSERIALIZABLE"
    assert "not retried" in trace.last_error["message"]
    assert trace.steps["bytes"].state == "failed"


async def test_a_duplicate_step_name_in_one_run_is_refused(harness: Harness) -> None:
    @job(input=Key, idempotency_key=_key)
    async def twice(input: Key, step: Any, ctx: Any) -> None:
        await step.run("same", lambda s: 1)
        await step.run("same", lambda s: 2)

    trace = await harness(twice)(twice, {})
    assert trace.state == "dead"
    assert trace.last_error is not None
    assert trace.last_error["code"] == "X_STEP_DUPLICATE"
    assert "same" in trace.last_error["message"]


@pytest.mark.parametrize("name", ["unwinding", "compensate:charge", ""])
async def test_reserved_and_empty_step_names_are_refused(name: str, harness: Harness) -> None:
    @job(input=Key, idempotency_key=_key, name=f"reserved-{name}")
    async def reserved(input: Key, step: Any, ctx: Any) -> None:
        await step.run(name, lambda s: 1)

    trace = await harness(reserved)(reserved, {})
    assert trace.state == "dead"
    assert trace.last_error is not None
    assert trace.last_error["code"] == "X_JOB_DECLARATION_INVALID"


async def test_a_reserved_wait_name_is_refused(harness: Harness) -> None:
    @job(input=Key, idempotency_key=_key)
    async def reserved_wait(input: Key, step: Any, ctx: Any) -> None:
        await step.wait_for_event("unwinding", "e", schema=dict)

    trace = await harness(reserved_wait)(reserved_wait, {})
    assert trace.last_error is not None
    assert trace.last_error["code"] == "X_JOB_DECLARATION_INVALID"


async def test_compensate_needs_a_job_declaring_compensates(harness: Harness) -> None:
    @job(input=Key, idempotency_key=_key)
    async def uncompensated(input: Key, step: Any, ctx: Any) -> None:
        await step.run("charge", lambda s: 1, compensate=lambda out: None)

    trace = await harness(uncompensated)(uncompensated, {})
    assert trace.state == "dead"
    assert trace.last_error is not None
    assert trace.last_error["code"] == "X_JOB_DECLARATION_INVALID"
    assert "compensates=True" in trace.last_error["message"]


async def test_sync_fns_run_in_a_thread_and_async_fns_on_the_loop(harness: Harness) -> None:
    threads: dict[str, int] = {}
    loop_thread = threading.get_ident()

    async def fetch(signal: Signal) -> str:
        threads["async"] = threading.get_ident()
        return "async"

    async def make() -> str:
        threads["returned-coroutine"] = threading.get_ident()
        return "coroutine"

    def compute(signal: Signal) -> str:
        threads["sync"] = threading.get_ident()
        return "sync"

    @job(input=Key, idempotency_key=_key)
    async def kinds(input: Key, step: Any, ctx: Any) -> list[Any]:
        return [
            await step.run("async", fetch),
            await step.run("sync", compute),
            await step.run("lambda", lambda signal: make()),
        ]

    trace = await harness(kinds)(kinds, {})
    assert trace.result == ["async", "sync", "coroutine"]
    assert threads["async"] == loop_thread
    assert threads["returned-coroutine"] == loop_thread
    assert threads["sync"] != loop_thread


async def test_fn_gets_a_signal_that_fires_at_the_step_ceiling(harness: Harness) -> None:
    reasons: list[str] = []

    async def slow(signal: Signal) -> str:
        reason = await signal.wait()
        reasons.append(reason.code)
        raise reason

    @job(input=Key, idempotency_key=_key, step_timeout=30, retry=Retry(attempts=2, delay=0))
    async def ceiling(input: Key, step: Any, ctx: Any) -> None:
        await step.run("slow", slow)

    trace = await harness(ceiling)(ceiling, {})
    assert reasons == ["X_JOB_TIMEOUT", "X_JOB_TIMEOUT"]
    assert trace.state == "dead"
    assert trace.steps["slow"].executions == 2
    assert trace.steps["slow"].state == "failed"
    assert trace.last_error is not None
    assert trace.last_error["code"] == "X_JOB_TIMEOUT"
    assert "slow" in trace.last_error["message"]


async def test_a_step_ignoring_its_ceiling_is_cancelled_at_it(harness: Harness) -> None:
    @job(input=Key, idempotency_key=_key, step_timeout=20, retry=Retry(attempts=1))
    async def ignoring(input: Key, step: Any, ctx: Any) -> None:
        await step.run("sleepy", lambda s: asyncio.sleep(30))

    trace = await asyncio.wait_for(harness(ignoring)(ignoring, {}), timeout=5)
    assert trace.state == "dead"
    assert trace.last_error is not None
    assert trace.last_error["code"] == "X_JOB_TIMEOUT"


async def test_a_step_failure_names_the_step_on_the_row(harness: Harness) -> None:
    @job(input=Key, idempotency_key=_key, retry=Retry(attempts=1))
    async def failing(input: Key, step: Any, ctx: Any) -> None:
        await step.run("charge", lambda s: 1 / 0)

    trace = await harness(failing)(failing, {})
    assert trace.last_error is not None
    assert trace.last_error["meta"]["step"] == "charge"
    assert trace.last_error["meta"]["type"] == "ZeroDivisionError"
    assert trace.steps["charge"].error is not None


async def test_a_step_not_awaited_before_the_body_returned_is_refused(harness: Harness) -> None:
    late: list[BaseException] = []

    @job(input=Key, idempotency_key=_key)
    async def leaky(input: Key, step: Any, ctx: Any) -> None:
        async def later() -> None:
            await asyncio.sleep(0.01)
            try:
                await step.run("late", lambda s: 1)
            except XError as exc:
                late.append(exc)

        asyncio.ensure_future(later())  # noqa: RUF006 - the point of the test

    h = harness(leaky)
    trace = await h(leaky, {})
    await asyncio.sleep(0.05)
    assert trace.state == "done"
    assert len(late) == 1
    assert isinstance(late[0], XError)
    assert late[0].code == "X_ABORTED"
    assert "had already ended" in late[0].message
    assert "late" not in (await h.trace()).steps


async def test_a_step_left_running_is_refused_even_while_the_ack_is_still_travelling() -> None:
    """The body returned: from then on its steps are over, not from when the ack came back (a
    slow ack once let a late step write behind it)."""
    late: list[BaseException] = []
    ack_sent = asyncio.Event()

    @job(input=Key, idempotency_key=_key)
    async def leaky_slow(input: Key, step: Any, ctx: Any) -> None:
        async def later() -> None:
            await ack_sent.wait()  # the ack is on its way and has not come back
            try:
                await step.run("late", lambda s: 1)
            except XError as exc:
                late.append(exc)

        asyncio.ensure_future(later())  # noqa: RUF006 - the point of the test

    h = JobHarness(jobs=[leaky_slow])
    driver: Any = h.driver
    for name in ("ack", "ack_many"):
        original = getattr(driver, name)

        async def slow(*args: Any, _original: Any = original, **kwargs: Any) -> Any:
            ack_sent.set()
            await asyncio.sleep(0.05)
            return await _original(*args, **kwargs)

        setattr(driver, name, slow)
    trace = await h(leaky_slow, {})
    await asyncio.sleep(0.01)
    assert trace.state == "done"
    assert len(late) == 1
    assert isinstance(late[0], XError) and late[0].code == "X_ABORTED"
    assert "late" not in (await h.trace()).steps


# --- once ---------------------------------------------------------------------------------------


async def test_a_once_step_persists_started_before_fn(harness: Harness) -> None:
    seen: list[str] = []

    @job(input=Key, idempotency_key=_key)
    async def once(input: Key, step: Any, ctx: Any) -> None:
        async def charge(signal: Signal) -> str:
            shown = await h.driver.steps.load(ctx.job_id)
            seen.append(shown["charge"].state)
            return "ch_1"

        await step.run("charge", charge, once=True)

    h = harness(once)
    trace = await h(once, {})
    assert seen == ["started"]
    assert trace.steps["charge"].state == "completed"
    assert trace.steps["charge"].output == "ch_1"
    assert trace.steps["charge"].executions == 1


async def test_a_once_step_found_started_without_completed_is_an_unknown_outcome(
    harness: Harness,
) -> None:
    calls: list[int] = []

    @job(input=Key, idempotency_key=_key, retry=Retry(attempts=5, delay="50ms"))
    async def once_fails(input: Key, step: Any, ctx: Any) -> None:
        def charge(signal: Signal) -> None:
            calls.append(1)
            raise ConnectionError("did the charge land?")

        await step.run("charge", charge, once=True)

    trace = await harness(once_fails)(once_fails, {})
    assert calls == [1]  # never called again
    assert trace.state == "dead"
    assert trace.attempts == 2
    assert trace.last_error is not None
    assert trace.last_error["code"] == "X_STEP_OUTCOME_UNKNOWN"
    assert "resolve-step" in (trace.last_error["fix"] or "")


@pytest.mark.parametrize("ran", [True, False], ids=["ran", "not-ran"])
async def test_a_once_step_an_operator_resolved_is_replayed_or_run_again(
    harness: Harness, ran: bool
) -> None:
    calls: list[int] = []

    def print_label(signal: Signal) -> dict[str, str]:
        calls.append(1)
        if len(calls) == 1:
            raise ConnectionError("the printer timed out: did it print?")
        return {"label": "lb_2"}

    @job(input=Key, idempotency_key=_key, retry=Retry(attempts=3, delay=0))
    async def ship(input: Key, step: Any, ctx: Any) -> Any:
        return await step.run("label", print_label, once=True)

    h = harness(ship)
    trace = await h(ship, {})
    assert trace.state == "dead" and calls == [1]
    assert trace.last_error is not None
    assert trace.last_error["code"] == "X_STEP_OUTCOME_UNKNOWN"
    with h.bound():
        await h.driver.introspect.resolve_step(  # type: ignore[attr-defined]
            trace.id, "label", ran=ran, output={"label": "lb_1"} if ran else None
        )
    await h.requeue(trace.id)
    trace = await h.drain()  # type: ignore[assignment]
    assert trace.state == "done"
    if ran:  # it did print: the stored output, fn never called again
        assert (trace.result, calls) == ({"label": "lb_1"}, [1])
    else:  # it did not: forgotten, so this attempt ran it
        assert (trace.result, calls) == ({"label": "lb_2"}, [1, 1])
        assert trace.steps["label"].state == "completed"


# --- step.sleep ---------------------------------------------------------------------------------


# memory only: the frozen clock pins the wake times exactly (variant on Postgres below)
async def test_sleep_persists_a_wake_time_and_hands_the_attempt_back() -> None:
    @job(input=Key, idempotency_key=_key)
    async def sleeper(input: Key, step: Any, ctx: Any) -> str:
        await step.sleep("1h")
        await step.sleep("30m")
        return "awake"

    h = _h(sleeper)
    start = h.clock.now_ms()
    trace: JobTrace | None  # drain() below may answer None
    trace = await h(sleeper, {})
    assert trace.state == "suspended"
    assert trace.attempts == 0  # uncounted
    assert trace.steps["sleep:1"].output == {"wake_at_ms": start + 3_600_000}
    assert trace.run_at == from_epoch_ms(start + 3_600_000)
    h.clock.advance("59m")
    trace = await h.drain()
    assert trace is not None and trace.state == "suspended"
    h.clock.advance("1m")
    trace = await h.drain()
    assert trace is not None and trace.state == "suspended"
    assert trace.steps["sleep:2"].output == {"wake_at_ms": start + 5_400_000}
    h.clock.advance("30m")
    trace = await h.drain()
    assert trace is not None
    assert trace.state == "done"
    assert trace.result == "awake"
    assert trace.attempts == 1
    assert trace.steps["sleep:1"].executions == 1


async def test_on_postgres_a_sleep_suspends_until_its_wake_time_then_replays(
    pg_engine: Engine,
) -> None:
    calls: list[str] = []

    @job(input=Key, idempotency_key=_key)
    async def sleeper(input: Key, step: Any, ctx: Any) -> str:
        await step.run("before", lambda s: calls.append("before"))
        await step.sleep("300ms")
        await step.sleep("200ms")
        return "awake"

    h = pg_engine.real_time_harness([sleeper])
    start = await pg_engine.now_ms()
    trace = await h(sleeper, {})
    end = await pg_engine.now_ms()
    assert trace.state == "suspended"  # the drain found nothing due: not claimed early
    assert trace.attempts == 0  # uncounted
    wake_1 = trace.steps["sleep:1"].output["wake_at_ms"]
    assert start + 300 <= wake_1 <= end + 300
    assert trace.run_at == from_epoch_ms(wake_1)
    trace = await h.drain_until("done")
    assert trace.result == "awake" and trace.attempts == 1
    wake_2 = trace.steps["sleep:2"].output["wake_at_ms"]
    assert wake_2 >= wake_1 + 200
    assert trace.finished_at is not None and trace.finished_at >= from_epoch_ms(wake_2)
    assert calls == ["before"]  # replayed from storage on each resume
    assert trace.steps["before"].executions == 1
    assert trace.steps["sleep:1"].executions == 1


async def test_a_sleep_inside_a_swallowing_body_still_suspends(harness: Harness) -> None:
    @job(input=Key, idempotency_key=_key)
    async def swallow(input: Key, step: Any, ctx: Any) -> None:
        with contextlib.suppress(Exception):  # a suspension is not an Exception
            await step.sleep("1d")

    trace = await harness(swallow)(swallow, {})
    assert trace.state == "suspended"


# memory only: the frozen clock drives the sleeps (variant on Postgres below)
async def test_ctx_final_attempt_is_exact() -> None:
    flags: list[tuple[int, bool]] = []

    @job(input=Key, idempotency_key=_key, retry=Retry(attempts=3, delay=0))
    async def counted(input: Key, step: Any, ctx: Any) -> None:
        flags.append((ctx.attempt, ctx.final_attempt))
        await step.sleep("1s")  # handed back uncounted: presented again under the same number
        raise RuntimeError("again")

    h = _h(counted)
    await h(counted, {})
    for _ in range(3):
        h.clock.advance("1s")
        await h.drain()
    assert flags == [(1, False), (1, False), (2, False), (3, True)]
    assert (await h.trace()).state == "dead"


async def test_on_postgres_ctx_final_attempt_is_exact(pg_engine: Engine) -> None:
    flags: list[tuple[int, bool]] = []

    @job(input=Key, idempotency_key=_key, retry=Retry(attempts=3, delay=0))
    async def counted(input: Key, step: Any, ctx: Any) -> None:
        flags.append((ctx.attempt, ctx.final_attempt))
        await step.sleep("100ms")  # handed back uncounted: presented again under the same number
        raise RuntimeError("again")

    h = pg_engine.real_time_harness([counted])
    await h.enqueue(counted, {})
    trace = await h.drain_until("dead")
    assert flags == [(1, False), (1, False), (2, False), (3, True)]
    assert trace.attempts == 3


# --- step.wait_for_event ------------------------------------------------------------------------


class Approved(BaseModel):
    order_id: str
    by: str


@job(input=Key, idempotency_key=_key, retry=Retry(attempts=2))
async def approval(input: Key, step: Any, ctx: Any) -> Any:
    got = await step.wait_for_event(
        "approval",
        "order.approved",
        schema=Approved,
        match={"order_id": input.key},
        timeout="7d",
    )
    return None if got is None else got.by


async def test_a_wait_suspends_until_the_event_and_answers_it_parsed(harness: Harness) -> None:
    h = harness(approval)
    trace: JobTrace | None  # drain() below may answer None
    trace = await h(approval, {"key": "o1"})
    assert trace.state == "suspended"
    await h.publish("order.approved", {"order_id": "o2", "by": "someone else"})
    await h.publish("order.approved", {"order_id": "o1", "by": "ana"})
    trace = await h.drain()
    assert trace is not None
    assert trace.state == "done"
    assert trace.result == "ana"
    assert trace.steps["approval"].output == {"order_id": "o1", "by": "ana"}


async def test_an_event_published_before_the_wait_began_is_not_its(harness: Harness) -> None:
    h = harness(approval)
    await h.publish("order.approved", {"order_id": "o1", "by": "early"})
    trace = await h(approval, {"key": "o1"})
    assert trace.state == "suspended"


# memory only: the frozen clock moves through the 7 days (variant on Postgres below)
async def test_a_wait_answers_none_at_its_timeout() -> None:
    h = _h(approval)
    await h(approval, {"key": "o1"})
    h.clock.advance("7d")
    trace = await h.drain()
    assert trace is not None
    assert trace.state == "done"
    assert trace.result is None


async def test_on_postgres_a_wait_answers_none_at_its_timeout(pg_engine: Engine) -> None:
    @job(input=Key, idempotency_key=_key)
    async def brief(input: Key, step: Any, ctx: Any) -> Any:
        return await step.wait_for_event("w", "order.approved", schema=Approved, timeout="300ms")

    h = pg_engine.real_time_harness([brief])
    trace = await h(brief, {})
    assert trace.state == "suspended"
    timeout_at = trace.steps["w"].output["timeout_at_ms"]
    assert trace.run_at == from_epoch_ms(timeout_at)  # the timeout comes before the 15 min poll
    trace = await h.drain_until("done")
    assert trace.result is None and trace.steps["w"].output is None
    assert trace.finished_at is not None and trace.finished_at >= from_epoch_ms(timeout_at)


# memory only: the memory bus's 30 s poll, on the frozen clock (Postgres's 15 min: below)
async def test_a_waiting_run_polls_every_30s_on_the_memory_bus_unless_declared() -> None:
    @job(input=Key, idempotency_key=_key, event_poll="5m")
    async def declared(input: Key, step: Any, ctx: Any) -> None:
        await step.wait_for_event("w", "e", schema=dict)

    h = JobHarness(jobs=[approval, declared])
    start = h.clock.now_ms()
    first = await h(approval, {"key": "o1"})
    second = await h(declared, {"key": "d"})
    assert first.run_at == from_epoch_ms(start + 30_000)
    assert second.run_at == from_epoch_ms(start + 300_000)
    h.clock.advance("30s")
    assert (await h.trace(first.id)).state == "suspended"
    await h.drain()
    assert (await h.trace(first.id)).attempts == 0  # looked again, still waiting, uncounted


async def test_on_postgres_a_waiting_run_looks_again_after_15_min_unless_declared(
    pg_engine: Engine,
) -> None:
    @job(input=Key, idempotency_key=_key, event_poll="5m")
    async def declared(input: Key, step: Any, ctx: Any) -> None:
        await step.wait_for_event("w", "e", schema=dict)

    h = pg_engine.harness([approval, declared])
    start = await pg_engine.now_ms()
    first = await h(approval, {"key": "o1"})
    second = await h(declared, {"key": "d"})
    end = await pg_engine.now_ms()
    assert start + 7 * 86_400_000 > start + 15 * 60_000  # the 7 d timeout is not what wakes it
    assert start + 15 * 60_000 <= to_epoch_ms(first.run_at) <= end + 15 * 60_000
    assert start + 5 * 60_000 <= to_epoch_ms(second.run_at) <= end + 5 * 60_000


async def test_a_payload_the_schema_refuses_is_terminal(harness: Harness) -> None:
    h = harness(approval)
    await h(approval, {"key": "o1"})
    await h.publish("order.approved", {"order_id": "o1"})  # no "by"
    trace = await h.drain()
    assert trace is not None
    assert trace.state == "dead"
    assert trace.last_error is not None
    assert trace.last_error["code"] == "X_JOB_EVENT_INVALID"
    assert "by" in trace.last_error["message"]


async def test_a_callable_match_reads_the_parsed_payload(harness: Harness) -> None:
    @job(input=Key, idempotency_key=_key)
    async def picky(input: Key, step: Any, ctx: Any) -> Any:
        got = await step.wait_for_event(
            "w", "order.approved", schema=Approved, match=lambda a: a.by.startswith("b")
        )
        return got.by if got is not None else None

    h = harness(picky)
    await h(picky, {})
    await h.publish("order.approved", {"order_id": "1", "by": "ana"})
    await h.publish("order.approved", {"order_id": "2", "by": "bob"})
    trace = await h.drain()
    assert trace is not None and trace.result == "bob"


async def test_a_wait_needs_a_schema(harness: Harness) -> None:
    @job(input=Key, idempotency_key=_key)
    async def schemaless(input: Key, step: Any, ctx: Any) -> None:
        await step.wait_for_event("w", "e", schema=None)

    trace = await harness(schemaless)(schemaless, {})
    assert trace.last_error is not None
    assert trace.last_error["code"] == "X_JOB_DECLARATION_INVALID"
    assert "schema" in trace.last_error["message"]


# memory only: a MemoryTransaction (variant in a Postgres transaction below)
async def test_an_event_committed_after_the_wait_began_is_that_waits() -> None:
    h = _h(approval)
    with h.bound():
        tx = MemoryTransaction()
        with use_connection(tx):
            await publish_event("order.approved", {"order_id": "o1", "by": "in-tx"})
    trace: JobTrace | None  # drain() below may answer None
    trace = await h(approval, {"key": "o1"})
    assert trace.state == "suspended"  # not committed yet: invisible
    tx.commit()
    trace = await h.drain()
    assert trace is not None
    assert trace.result == "in-tx"


# memory only: a MemoryTransaction and the frozen clock (variant on Postgres below)
async def test_an_event_rolled_back_never_happened() -> None:
    h = _h(approval)
    await h(approval, {"key": "o1"})
    with h.bound(), MemoryTransaction() as tx, use_connection(tx):
        await publish_event("order.approved", {"order_id": "o1", "by": "x"})
        tx.rollback()
    h.clock.advance("30s")
    trace = await h.drain()
    assert trace is not None and trace.state == "suspended"


@job(input=Key, idempotency_key=_key, event_poll="150ms", name="approval-polled")
async def polled_approval(input: Key, step: Any, ctx: Any) -> Any:
    """``approval`` looking again every 150 ms (the Postgres bus's own poll is 15 min)."""
    got = await step.wait_for_event(
        "approval", "order.approved", schema=Approved, match={"order_id": input.key}
    )
    return None if got is None else got.by


async def test_on_postgres_an_event_committed_after_the_wait_began_is_that_waits(
    pg_engine: Engine,
) -> None:
    assert pg_engine.database_url is not None
    h = pg_engine.real_time_harness([polled_approval])
    async with await psycopg.AsyncConnection.connect(pg_engine.database_url) as conn:
        with h.bound(), use_connection(conn):  # published first, in a transaction ...
            await publish_event("order.approved", {"order_id": "o1", "by": "in-tx"})
        trace = await h(polled_approval, {"key": "o1"})  # ... the wait begins ...
        assert trace.state == "suspended"  # not committed yet: invisible
        await conn.commit()  # ... and the commit comes after it
    trace = await h.drain_until("done")
    assert trace.result == "in-tx"


async def test_on_postgres_an_event_rolled_back_never_happened(pg_engine: Engine) -> None:
    url = pg_engine.database_url
    assert url is not None
    h = pg_engine.real_time_harness([polled_approval])
    trace = await h(polled_approval, {"key": "o1"})
    assert trace.state == "suspended"

    async def publish_then_fail() -> None:
        async with (
            AsyncConnectionPool(url, min_size=1, open=False) as pool,
            transaction(pool),
        ):
            with h.bound():
                await publish_event("order.approved", {"order_id": "o1", "by": "x"})
            raise RuntimeError("the business write failed")

    with pytest.raises(RuntimeError):
        await publish_then_fail()
    looked, first_look = trace.steps["approval"].output, trace.run_at
    await asyncio.sleep(0.4)  # more than two polls
    trace = await h.drain_until("suspended")
    assert trace.run_at > first_look  # it looked again, and went on waiting
    assert trace.attempts == 0
    assert trace.steps["approval"].state == "started"
    assert trace.steps["approval"].output == looked  # the same wait, still waiting
    assert await pg_engine.bus.find_after("order.approved", looked["marker"]) == []


@pytest.mark.parametrize(
    ("call", "code", "needle"),
    [
        (lambda step: step.run("x", "not callable"), "X_INVARIANT", "fn"),
        (
            lambda step: step.wait_for_event("w", "", schema=dict),
            "X_JOB_DECLARATION_INVALID",
            "event",
        ),
        (
            lambda step: step.wait_for_event("w", "e", schema=dict, match=42),
            "X_JOB_DECLARATION_INVALID",
            "match",
        ),
        (lambda step: step.sleep(-1), "X_DURATION_INVALID", "step.sleep"),
    ],
)
async def test_a_misused_step_is_refused_naming_the_problem(
    call: Any, code: str, needle: str, harness: Harness
) -> None:
    @job(input=Key, idempotency_key=_key, name=f"misuse-{code}-{needle}")
    async def misuse(input: Key, step: Any, ctx: Any) -> None:
        await call(step)

    trace = await harness(misuse)(misuse, {})
    assert trace.last_error is not None
    assert trace.last_error["code"] == code
    assert needle in trace.last_error["message"]
    assert trace.last_error["fix"]


async def test_a_wait_with_no_event_bus_names_the_fix() -> None:
    from ultimat3.core import FrozenClock, swap_adapter, use_clock
    from ultimat3.jobs import execute_job
    from ultimat3.jobs.adapter import JOB_DRIVER
    from ultimat3.jobs.memory import memory_job_driver

    @job(input=Key, idempotency_key=_key, retry=Retry(attempts=1))
    async def busless(input: Key, step: Any, ctx: Any) -> None:
        await step.wait_for_event("w", "e", schema=dict)

    driver = memory_job_driver()
    with use_clock(FrozenClock()), swap_adapter(JOB_DRIVER, driver):
        await busless.enqueue({})
        [claimed] = await driver.claim(
            queues=["default"], limit=1, worker_id="w", visibility_timeout_ms=1000
        )
        outcome = await execute_job(claimed, busless, driver=driver)
    assert outcome.error is not None
    assert outcome.error["code"] == "X_ADAPTER_MISSING"
    assert "EVENT_BUS" in (outcome.error["fix"] or "")
