import asyncio
import logging

import pytest

from ultimat3.core import (
    AbortController,
    Signal,
    XError,
    any_signal,
    current_signal,
    deadline_signal,
    never_signal,
    run_to_completion,
    throw_if_aborted,
    use_signal,
)


def test_a_fresh_signal_is_live() -> None:
    s = AbortController().signal
    assert not s.aborted
    assert s.reason is None
    s.throw_if_aborted()


def test_abort_defaults_to_x_aborted_and_first_wins() -> None:
    c = AbortController()
    c.abort()
    c.abort(XError("X_DRAINING"))
    assert c.signal.aborted
    assert c.signal.reason is not None
    assert c.signal.reason.code == "X_ABORTED"
    with pytest.raises(XError) as info:
        c.signal.throw_if_aborted()
    assert info.value is c.signal.reason


def test_abort_refuses_a_non_xerror_reason() -> None:
    with pytest.raises(XError) as info:
        AbortController().abort("stop")  # type: ignore[arg-type]
    assert info.value.code == "X_INVARIANT"
    assert "'stop'" in info.value.message


def test_listeners_fire_once_and_can_unsubscribe() -> None:
    c = AbortController()
    seen: list[str] = []
    c.signal.add_listener(lambda r: seen.append(r.code))
    unsubscribe = c.signal.add_listener(lambda r: seen.append("never"))
    unsubscribe()
    c.abort(XError("X_DRAINING"))
    c.abort(XError("X_ABORTED"))
    assert seen == ["X_DRAINING"]


def test_a_listener_added_after_abort_runs_at_once() -> None:
    c = AbortController()
    c.abort()
    seen: list[str] = []
    unsubscribe = c.signal.add_listener(lambda r: seen.append(r.code))
    unsubscribe()
    assert seen == ["X_ABORTED"]


def test_a_failing_listener_does_not_stop_the_others(caplog: pytest.LogCaptureFixture) -> None:
    c = AbortController()
    seen: list[str] = []

    def bad(_: XError) -> None:
        raise RuntimeError("listener bug")

    c.signal.add_listener(bad)
    c.signal.add_listener(lambda r: seen.append(r.code))
    with caplog.at_level(logging.ERROR, logger="ultimat3"):
        c.abort()
    assert seen == ["X_ABORTED"]
    assert "listener" in caplog.text


async def test_wait_returns_the_reason() -> None:
    c = AbortController()
    asyncio.get_running_loop().call_later(0.01, c.abort, XError("X_JOB_TIMEOUT"))
    reason = await c.signal.wait()
    assert reason.code == "X_JOB_TIMEOUT"
    assert (await c.signal.wait()) is reason


def test_any_signal_takes_the_first_reason() -> None:
    a, b = AbortController(), AbortController()
    both = any_signal(a.signal, b.signal)
    assert not both.aborted
    b.abort(XError("X_DRAINING"))
    a.abort(XError("X_ABORTED"))
    assert both.reason is not None
    assert both.reason.code == "X_DRAINING"


def test_any_signal_of_an_already_aborted_one() -> None:
    a = AbortController()
    a.abort(XError("X_JOB_SLOT_LOST"))
    s = any_signal(never_signal(), a.signal)
    assert s.reason is not None
    assert s.reason.code == "X_JOB_SLOT_LOST"


def test_any_signal_of_nothing_is_live() -> None:
    assert not any_signal().aborted


async def test_deadline_signal_aborts_with_x_job_timeout() -> None:
    s = deadline_signal(10)
    reason = await asyncio.wait_for(s.wait(), 2)
    assert reason.code == "X_JOB_TIMEOUT"
    assert "10ms" in reason.message


async def test_deadline_signal_takes_a_reason_and_can_be_cancelled() -> None:
    s = deadline_signal(10, reason=XError("X_LOCK_LOST"))
    s.cancel()
    await asyncio.sleep(0.03)
    assert not s.aborted
    s2 = deadline_signal(5, reason=XError("X_LOCK_LOST"))
    assert (await s2.wait()).code == "X_LOCK_LOST"


def test_deadline_zero_is_aborted_at_once() -> None:
    assert deadline_signal(0).aborted


def test_deadline_signal_needs_a_loop() -> None:
    with pytest.raises(XError) as info:
        deadline_signal(10)
    assert info.value.code == "X_INVARIANT"
    assert "deadline_signal" in info.value.message


def test_deadline_signal_refuses_a_negative_delay() -> None:
    with pytest.raises(XError) as info:
        deadline_signal(-1)
    assert info.value.code == "X_DURATION_INVALID"
    assert "deadline" in info.value.message


def test_throw_if_aborted_reads_a_ctx_a_signal_or_the_ambient_one() -> None:
    c = AbortController()

    class Ctx:
        signal: Signal = c.signal

    throw_if_aborted(Ctx())
    throw_if_aborted(c.signal)
    throw_if_aborted()
    c.abort(XError("X_DRAINING"))
    for target in (Ctx(), c.signal):
        with pytest.raises(XError, match="X_DRAINING"):
            throw_if_aborted(target)
    with use_signal(c.signal), pytest.raises(XError, match="X_DRAINING"):
        throw_if_aborted()


def test_throw_if_aborted_refuses_an_object_without_a_signal() -> None:
    with pytest.raises(XError) as info:
        throw_if_aborted(42)
    assert info.value.code == "X_INVARIANT"
    assert "int" in info.value.message


def test_use_signal_is_scoped() -> None:
    s = never_signal()
    assert current_signal() is None
    with use_signal(s):
        assert current_signal() is s
        with use_signal(None):
            assert current_signal() is None
        assert current_signal() is s
    assert current_signal() is None


async def test_run_to_completion_clears_the_ambient_signal() -> None:
    seen: list[Signal | None] = []

    async def work() -> int:
        seen.append(current_signal())
        return 7

    async with use_signal(never_signal()):
        assert await run_to_completion(work) == 7
        assert await run_to_completion(lambda: 8) == 8
        assert await run_to_completion(work()) == 7
    assert seen == [None, None]


async def test_run_to_completion_survives_the_outer_cancel() -> None:
    landed: list[str] = []
    started = asyncio.Event()

    async def must_land() -> None:
        started.set()
        await asyncio.sleep(0.05)
        landed.append("written")

    outer = asyncio.create_task(run_to_completion(must_land))
    await started.wait()
    outer.cancel()
    with pytest.raises(asyncio.CancelledError):
        await outer
    assert landed == ["written"]


async def test_run_to_completion_propagates_errors() -> None:
    def fails() -> None:
        raise XError("X_INVARIANT", "inner")

    with pytest.raises(XError, match="inner"):
        await run_to_completion(fails)
