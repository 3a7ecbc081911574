from datetime import UTC, datetime, timedelta, timezone

import pytest

from ultimat3.core import (
    Clock,
    FrozenClock,
    SystemClock,
    XError,
    current_clock,
    install_clock,
    use_clock,
)


def test_frozen_clock_defaults_to_2026() -> None:
    c = FrozenClock()
    assert c.now() == datetime(2026, 1, 1, tzinfo=UTC)
    assert c.now_ms() == 1_767_225_600_000


def test_frozen_clock_accepts_datetime_int_and_iso() -> None:
    when = datetime(2026, 3, 1, 12, tzinfo=UTC)
    ms = FrozenClock(when).now_ms()
    assert FrozenClock(ms).now() == when
    assert FrozenClock("2026-03-01T12:00:00Z").now_ms() == ms
    assert FrozenClock(datetime(2026, 3, 1, 13, tzinfo=timezone(timedelta(hours=1)))).now() == when


def test_advance_moves_forward_and_notifies() -> None:
    c = FrozenClock()
    seen: list[int] = []
    unsubscribe = c.subscribe(seen.append)
    c.advance("3d")
    c.advance(timedelta(milliseconds=5))
    c.advance(0)
    unsubscribe()
    c.advance("1s")
    assert c.now() == datetime(2026, 1, 4, 0, 0, 1, 5000, tzinfo=UTC)
    assert len(seen) == 3


def test_set_may_go_backwards() -> None:
    c = FrozenClock()
    c.set("2025-01-01T00:00:00+00:00")
    assert c.now().year == 2025


def test_refuses_a_naive_datetime_naming_it() -> None:
    with pytest.raises(XError) as info:
        FrozenClock(datetime(2026, 1, 1))
    assert info.value.code == "X_INVARIANT"
    assert "start" in info.value.message
    assert "naive" in info.value.message


def test_refuses_a_bad_iso_string_naming_it() -> None:
    with pytest.raises(XError) as info:
        FrozenClock().set("tomorrow")
    assert info.value.code == "X_INVARIANT"
    assert "'tomorrow'" in info.value.message


def test_advance_refuses_a_negative_duration() -> None:
    with pytest.raises(XError) as info:
        FrozenClock().advance(-5)
    assert info.value.code == "X_DURATION_INVALID"
    assert "advance" in info.value.message


def test_system_clock_is_aware_utc_and_agrees_with_now_ms() -> None:
    c = SystemClock()
    now = c.now()
    assert now.tzinfo is UTC
    assert abs(c.now_ms() - now.timestamp() * 1000) < 5_000
    assert isinstance(c, Clock)


def test_use_clock_is_ambient_and_scoped() -> None:
    frozen = FrozenClock()
    assert isinstance(current_clock(), SystemClock)
    with use_clock(frozen):
        assert current_clock() is frozen
    assert isinstance(current_clock(), SystemClock)


async def test_use_clock_works_with_async_with() -> None:
    frozen = FrozenClock()
    async with use_clock(frozen):
        assert current_clock() is frozen


def test_install_clock_sets_the_process_default() -> None:
    frozen = FrozenClock()
    install_clock(frozen)
    try:
        assert current_clock() is frozen
    finally:
        install_clock(None)
    assert isinstance(current_clock(), SystemClock)


@pytest.mark.parametrize("bad", [True, 1.5, None])
def test_set_refuses_what_is_not_a_time(bad: object) -> None:
    with pytest.raises(XError) as info:
        FrozenClock().set(bad)  # type: ignore[arg-type]
    assert info.value.code == "X_INVARIANT"
    assert repr(bad) in info.value.message
