from datetime import timedelta

import pytest
from hypothesis import given
from hypothesis import strategies as st

from ultimat3.core import MAX_DURATION_MS, XError, format_duration, parse_duration


@pytest.mark.parametrize(
    ("text", "ms"),
    [
        ("500ms", 500),
        ("90s", 90_000),
        ("2m", 120_000),
        ("3h", 10_800_000),
        ("3d", 259_200_000),
        ("1w", 604_800_000),
        ("1h30m", 5_400_000),
        ("1m1ms", 60_001),
    ],
)
def test_parses_strings(text: str, ms: int) -> None:
    assert parse_duration(text) == ms


def test_parses_ints_and_timedeltas() -> None:
    assert parse_duration(1500) == 1500
    assert parse_duration(timedelta(seconds=1, milliseconds=5)) == 1005


def test_zero_only_when_allowed() -> None:
    assert parse_duration(0, allow_zero=True) == 0
    assert parse_duration("0s", allow_zero=True) == 0
    with pytest.raises(XError) as info:
        parse_duration("0s", name="delay")
    assert info.value.code == "X_DURATION_INVALID"
    assert "delay" in info.value.message
    assert "'0s'" in info.value.message


@pytest.mark.parametrize(
    "bad",
    [
        True,
        1.5,
        -1,
        timedelta(seconds=-1),
        timedelta(microseconds=1500),
        "",
        "5",
        "5 s",
        "5S",
        "1.5s",
        "soon",
        "-5s",
        "999999999999999999999999d",
        MAX_DURATION_MS + 1,
        "200000w",
        None,
        [1],
    ],
)
def test_refuses_bad_input_naming_it(bad: object) -> None:
    with pytest.raises(XError) as info:
        parse_duration(bad, name="timeout")  # type: ignore[arg-type]
    assert info.value.code == "X_DURATION_INVALID"
    assert "timeout" in info.value.message
    assert repr(bad)[:40] in info.value.message
    assert info.value.fix is not None
    assert "'500ms'" in info.value.fix


def test_format_duration_examples() -> None:
    assert format_duration(0) == "0ms"
    assert format_duration(5_400_000) == "1h30m"
    assert format_duration(1_500) == "1s500ms"
    assert format_duration(604_800_000 + 1) == "1w1ms"


def test_format_duration_refuses_negative() -> None:
    with pytest.raises(XError) as info:
        format_duration(-1)
    assert info.value.code == "X_DURATION_INVALID"
    assert "-1" in info.value.message


@given(st.integers(min_value=1, max_value=MAX_DURATION_MS))
def test_format_then_parse_round_trips(ms: int) -> None:
    assert parse_duration(format_duration(ms)) == ms


@given(
    st.integers(min_value=1, max_value=10_000),
    st.sampled_from([("ms", 1), ("s", 1000), ("m", 60_000), ("h", 3_600_000), ("d", 86_400_000)]),
)
def test_units_multiply(n: int, unit: tuple[str, int]) -> None:
    assert parse_duration(f"{n}{unit[0]}") == n * unit[1]


@given(st.integers(min_value=1, max_value=MAX_DURATION_MS))
def test_int_timedelta_and_string_agree(ms: int) -> None:
    assert parse_duration(ms) == parse_duration(timedelta(milliseconds=ms)) == ms
