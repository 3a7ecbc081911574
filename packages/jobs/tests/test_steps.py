"""Durable steps: step.run, once-steps, step.sleep, step.wait_for_event, and their refusals."""

from __future__ import annotations

import asyncio
import contextlib
import threading
from datetime import UTC, datetime
from typing import Any

import pytest
from pydantic import BaseModel

from ultimat3.core import Signal, XError, from_epoch_ms, use_connection
from ultimat3.jobs import Retry, job, publish_event
from ultimat3.jobs.drivers.memory_outbox import MemoryTransaction
from ultimat3.jobs.testing import JobHarness


class Key(BaseModel):
    key: str = "k"


def _key(i: Key) -> str:
    return i.key


def _h(*jobs: Any) -> JobHarness:
    return JobHarness(jobs=list(jobs))


# --- step.run -----------------------------------------------------------------------------------


async def test_a_step_answers_its_stored_json_form_on_the_first_run_too() -> None:
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

    trace = await _h(forms)(forms, {})
    assert trace.state == "done"
    assert seen == ["2026-05-01T12:00:00Z", {"at": "2026-05-01T12:00:00Z", "n": 2}, None]
    assert trace.steps["view"].output == {"at": "2026-05-01T12:00:00Z", "n": 2}


async def test_a_completed_step_is_replayed_without_calling_fn() -> None:
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

    trace = await _h(replayed)(replayed, {})
    assert trace.state == "done"
    assert calls == ["first"]
    assert answers == [{"n": 1}, {"n": 1}]
    assert trace.steps["first"].executions == 1


async def test_an_unserialisable_output_is_terminal() -> None:
    @job(input=Key, idempotency_key=_key, retry=Retry(attempts=5))
    async def unserialisable(input: Key, step: Any, ctx: Any) -> None:
        await step.run("bytes", lambda s: b"\x00")

    trace = await _h(unserialisable)(unserialisable, {})
    assert trace.state == "dead"
    assert trace.attempts == 1  # terminal: not retried
    assert trace.last_error is not None
    assert trace.last_error["code"] == "X_STEP_OUTPUT_UNSERIALIZABLE"
    assert "not retried" in trace.last_error["message"]
    assert trace.steps["bytes"].state == "failed"


async def test_a_duplicate_step_name_in_one_run_is_refused() -> None:
    @job(input=Key, idempotency_key=_key)
    async def twice(input: Key, step: Any, ctx: Any) -> None:
        await step.run("same", lambda s: 1)
        await step.run("same", lambda s: 2)

    trace = await _h(twice)(twice, {})
    assert trace.state == "dead"
    assert trace.last_error is not None
    assert trace.last_error["code"] == "X_STEP_DUPLICATE"
    assert "same" in trace.last_error["message"]


@pytest.mark.parametrize("name", ["unwinding", "compensate:charge", ""])
async def test_reserved_and_empty_step_names_are_refused(name: str) -> None:
    @job(input=Key, idempotency_key=_key, name=f"reserved-{name}")
    async def reserved(input: Key, step: Any, ctx: Any) -> None:
        await step.run(name, lambda s: 1)

    trace = await _h(reserved)(reserved, {})
    assert trace.state == "dead"
    assert trace.last_error is not None
    assert trace.last_error["code"] == "X_JOB_DECLARATION_INVALID"


async def test_a_reserved_wait_name_is_refused() -> None:
    @job(input=Key, idempotency_key=_key)
    async def reserved_wait(input: Key, step: Any, ctx: Any) -> None:
        await step.wait_for_event("unwinding", "e", schema=dict)

    trace = await _h(reserved_wait)(reserved_wait, {})
    assert trace.last_error is not None
    assert trace.last_error["code"] == "X_JOB_DECLARATION_INVALID"


async def test_compensate_needs_a_job_declaring_compensates() -> None:
    @job(input=Key, idempotency_key=_key)
    async def uncompensated(input: Key, step: Any, ctx: Any) -> None:
        await step.run("charge", lambda s: 1, compensate=lambda out: None)

    trace = await _h(uncompensated)(uncompensated, {})
    assert trace.state == "dead"
    assert trace.last_error is not None
    assert trace.last_error["code"] == "X_JOB_DECLARATION_INVALID"
    assert "compensates=True" in trace.last_error["message"]


async def test_sync_fns_run_in_a_thread_and_async_fns_on_the_loop() -> None:
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

    trace = await _h(kinds)(kinds, {})
    assert trace.result == ["async", "sync", "coroutine"]
    assert threads["async"] == loop_thread
    assert threads["returned-coroutine"] == loop_thread
    assert threads["sync"] != loop_thread


async def test_fn_gets_a_signal_that_fires_at_the_step_ceiling() -> None:
    reasons: list[str] = []

    async def slow(signal: Signal) -> str:
        reason = await signal.wait()
        reasons.append(reason.code)
        raise reason

    @job(input=Key, idempotency_key=_key, step_timeout=30, retry=Retry(attempts=2, delay=0))
    async def ceiling(input: Key, step: Any, ctx: Any) -> None:
        await step.run("slow", slow)

    trace = await _h(ceiling)(ceiling, {})
    assert reasons == ["X_JOB_TIMEOUT", "X_JOB_TIMEOUT"]
    assert trace.state == "dead"
    assert trace.steps["slow"].executions == 2
    assert trace.steps["slow"].state == "failed"
    assert trace.last_error is not None
    assert trace.last_error["code"] == "X_JOB_TIMEOUT"
    assert "slow" in trace.last_error["message"]


async def test_a_step_ignoring_its_ceiling_is_cancelled_at_it() -> None:
    @job(input=Key, idempotency_key=_key, step_timeout=20, retry=Retry(attempts=1))
    async def ignoring(input: Key, step: Any, ctx: Any) -> None:
        await step.run("sleepy", lambda s: asyncio.sleep(30))

    trace = await asyncio.wait_for(_h(ignoring)(ignoring, {}), timeout=5)
    assert trace.state == "dead"
    assert trace.last_error is not None
    assert trace.last_error["code"] == "X_JOB_TIMEOUT"


async def test_a_step_failure_names_the_step_on_the_row() -> None:
    @job(input=Key, idempotency_key=_key, retry=Retry(attempts=1))
    async def failing(input: Key, step: Any, ctx: Any) -> None:
        await step.run("charge", lambda s: 1 / 0)

    trace = await _h(failing)(failing, {})
    assert trace.last_error is not None
    assert trace.last_error["meta"]["step"] == "charge"
    assert trace.last_error["meta"]["type"] == "ZeroDivisionError"
    assert trace.steps["charge"].error is not None


async def test_a_step_not_awaited_before_the_body_returned_is_refused() -> None:
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

    h = _h(leaky)
    trace = await h(leaky, {})
    await asyncio.sleep(0.05)
    assert trace.state == "done"
    assert len(late) == 1
    assert isinstance(late[0], XError)
    assert late[0].code == "X_ABORTED"
    assert "had already ended" in late[0].message
    assert "late" not in (await h.trace()).steps


# --- once ---------------------------------------------------------------------------------------


async def test_a_once_step_persists_started_before_fn() -> None:
    seen: list[str] = []

    @job(input=Key, idempotency_key=_key)
    async def once(input: Key, step: Any, ctx: Any) -> None:
        async def charge(signal: Signal) -> str:
            shown = await h.driver.steps.load(ctx.job_id)
            seen.append(shown["charge"].state)
            return "ch_1"

        await step.run("charge", charge, once=True)

    h = _h(once)
    trace = await h(once, {})
    assert seen == ["started"]
    assert trace.steps["charge"].state == "completed"
    assert trace.steps["charge"].output == "ch_1"
    assert trace.steps["charge"].executions == 1


async def test_a_once_step_found_started_without_completed_is_an_unknown_outcome() -> None:
    calls: list[int] = []

    @job(input=Key, idempotency_key=_key, retry=Retry(attempts=5))
    async def once_fails(input: Key, step: Any, ctx: Any) -> None:
        def charge(signal: Signal) -> None:
            calls.append(1)
            raise ConnectionError("did the charge land?")

        await step.run("charge", charge, once=True)

    trace = await _h(once_fails)(once_fails, {})
    assert calls == [1]  # never called again
    assert trace.state == "dead"
    assert trace.attempts == 2
    assert trace.last_error is not None
    assert trace.last_error["code"] == "X_STEP_OUTCOME_UNKNOWN"
    assert "resolve-step" in (trace.last_error["fix"] or "")


# --- step.sleep ---------------------------------------------------------------------------------


async def test_sleep_persists_a_wake_time_and_hands_the_attempt_back() -> None:
    @job(input=Key, idempotency_key=_key)
    async def sleeper(input: Key, step: Any, ctx: Any) -> str:
        await step.sleep("1h")
        await step.sleep("30m")
        return "awake"

    h = _h(sleeper)
    start = h.clock.now_ms()
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


async def test_a_sleep_inside_a_swallowing_body_still_suspends() -> None:
    @job(input=Key, idempotency_key=_key)
    async def swallow(input: Key, step: Any, ctx: Any) -> None:
        with contextlib.suppress(Exception):  # a suspension is not an Exception
            await step.sleep("1d")

    trace = await _h(swallow)(swallow, {})
    assert trace.state == "suspended"


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


async def test_a_wait_suspends_until_the_event_and_answers_it_parsed() -> None:
    h = _h(approval)
    trace = await h(approval, {"key": "o1"})
    assert trace.state == "suspended"
    await h.publish("order.approved", {"order_id": "o2", "by": "someone else"})
    await h.publish("order.approved", {"order_id": "o1", "by": "ana"})
    trace = await h.drain()
    assert trace is not None
    assert trace.state == "done"
    assert trace.result == "ana"
    assert trace.steps["approval"].output == {"order_id": "o1", "by": "ana"}


async def test_an_event_published_before_the_wait_began_is_not_its() -> None:
    h = _h(approval)
    await h.publish("order.approved", {"order_id": "o1", "by": "early"})
    trace = await h(approval, {"key": "o1"})
    assert trace.state == "suspended"


async def test_a_wait_answers_none_at_its_timeout() -> None:
    h = _h(approval)
    await h(approval, {"key": "o1"})
    h.clock.advance("7d")
    trace = await h.drain()
    assert trace is not None
    assert trace.state == "done"
    assert trace.result is None


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


async def test_a_payload_the_schema_refuses_is_terminal() -> None:
    h = _h(approval)
    await h(approval, {"key": "o1"})
    await h.publish("order.approved", {"order_id": "o1"})  # no "by"
    trace = await h.drain()
    assert trace is not None
    assert trace.state == "dead"
    assert trace.last_error is not None
    assert trace.last_error["code"] == "X_JOB_EVENT_INVALID"
    assert "by" in trace.last_error["message"]


async def test_a_callable_match_reads_the_parsed_payload() -> None:
    @job(input=Key, idempotency_key=_key)
    async def picky(input: Key, step: Any, ctx: Any) -> Any:
        got = await step.wait_for_event(
            "w", "order.approved", schema=Approved, match=lambda a: a.by.startswith("b")
        )
        return got.by if got is not None else None

    h = _h(picky)
    await h(picky, {})
    await h.publish("order.approved", {"order_id": "1", "by": "ana"})
    await h.publish("order.approved", {"order_id": "2", "by": "bob"})
    trace = await h.drain()
    assert trace is not None and trace.result == "bob"


async def test_a_wait_needs_a_schema() -> None:
    @job(input=Key, idempotency_key=_key)
    async def schemaless(input: Key, step: Any, ctx: Any) -> None:
        await step.wait_for_event("w", "e", schema=None)

    trace = await _h(schemaless)(schemaless, {})
    assert trace.last_error is not None
    assert trace.last_error["code"] == "X_JOB_DECLARATION_INVALID"
    assert "schema" in trace.last_error["message"]


async def test_an_event_committed_after_the_wait_began_is_that_waits() -> None:
    h = _h(approval)
    with h.bound():
        tx = MemoryTransaction()
        with use_connection(tx):
            await publish_event("order.approved", {"order_id": "o1", "by": "in-tx"})
    trace = await h(approval, {"key": "o1"})
    assert trace.state == "suspended"  # not committed yet: invisible
    tx.commit()
    trace = await h.drain()
    assert trace is not None
    assert trace.result == "in-tx"


async def test_an_event_rolled_back_never_happened() -> None:
    h = _h(approval)
    await h(approval, {"key": "o1"})
    with h.bound(), MemoryTransaction() as tx, use_connection(tx):
        await publish_event("order.approved", {"order_id": "o1", "by": "x"})
        tx.rollback()
    h.clock.advance("30s")
    trace = await h.drain()
    assert trace is not None and trace.state == "suspended"


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
    call: Any, code: str, needle: str
) -> None:
    @job(input=Key, idempotency_key=_key, name=f"misuse-{code}-{needle}")
    async def misuse(input: Key, step: Any, ctx: Any) -> None:
        await call(step)

    trace = await _h(misuse)(misuse, {})
    assert trace.last_error is not None
    assert trace.last_error["code"] == code
    assert needle in trace.last_error["message"]
    assert trace.last_error["fix"]


async def test_a_wait_with_no_event_bus_names_the_fix() -> None:
    from ultimat3.core import FrozenClock, swap_adapter, use_clock
    from ultimat3.jobs import execute_job
    from ultimat3.jobs.adapter import JOB_DRIVER
    from ultimat3.jobs.drivers.memory import memory_job_driver

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
