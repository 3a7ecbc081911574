import random

import pytest
from hypothesis import given
from hypothesis import strategies as st

from ultimat3.core import XError, backoff_delay

attempts = st.integers(min_value=1, max_value=200)
bases = st.integers(min_value=0, max_value=100_000)
caps = st.integers(min_value=0, max_value=10_000_000)
curves = st.sampled_from(["exponential", "linear", "fixed"])


def raw(attempt: int, base: int, curve: str) -> int:
    if curve == "exponential":
        return base * (1 << (attempt - 1))
    if curve == "linear":
        return base * attempt
    return base


def test_curves_without_jitter() -> None:
    assert [backoff_delay(a, jitter="none") for a in (1, 2, 3, 4)] == [1000, 2000, 4000, 8000]
    assert [backoff_delay(a, curve="linear", jitter="none", base="1s") for a in (1, 2, 3)] == [
        1000,
        2000,
        3000,
    ]
    assert backoff_delay(7, curve="fixed", jitter="none", base="5s") == 5000


def test_clamps_to_max_delay() -> None:
    assert backoff_delay(30, jitter="none") == 3_600_000
    assert backoff_delay(10_000, jitter="none", max_delay="2m") == 120_000


def test_default_jitter_is_equal() -> None:
    d = backoff_delay(3, rng=random.Random(1))
    assert 2000 <= d <= 4000


@given(attempts, bases, caps, curves, st.integers())
def test_jitter_bounds(attempt: int, base: int, cap: int, curve: str, seed: int) -> None:
    d = min(raw(attempt, base, curve), cap)
    kw = {"base": base, "max_delay": cap, "curve": curve}
    assert backoff_delay(attempt, jitter="none", **kw) == d  # type: ignore[arg-type]
    equal = backoff_delay(attempt, jitter="equal", rng=random.Random(seed), **kw)  # type: ignore[arg-type]
    assert d // 2 <= equal <= d
    full = backoff_delay(attempt, jitter="full", rng=random.Random(seed), **kw)  # type: ignore[arg-type]
    assert 0 <= full <= d


@given(attempts, bases, caps, curves)
def test_no_jitter_is_monotone(attempt: int, base: int, cap: int, curve: str) -> None:
    kw = {"base": base, "max_delay": cap, "curve": curve, "jitter": "none"}
    assert backoff_delay(attempt, **kw) <= backoff_delay(attempt + 1, **kw)  # type: ignore[arg-type]


@given(attempts, st.integers(), st.sampled_from(["equal", "full"]))
def test_deterministic_under_a_seed(attempt: int, seed: int, jitter: str) -> None:
    a = backoff_delay(attempt, jitter=jitter, rng=random.Random(seed))  # type: ignore[arg-type]
    b = backoff_delay(attempt, jitter=jitter, rng=random.Random(seed))  # type: ignore[arg-type]
    assert a == b


@pytest.mark.parametrize("bad", [0, -1, True, 1.0, "1"])
def test_refuses_a_bad_attempt(bad: object) -> None:
    with pytest.raises(XError) as info:
        backoff_delay(bad)  # type: ignore[arg-type]
    assert info.value.code == "X_INVARIANT"
    assert f"attempt {bad!r}" in info.value.message


def test_refuses_an_unknown_curve() -> None:
    with pytest.raises(XError) as info:
        backoff_delay(1, curve="quadratic")  # type: ignore[arg-type]
    assert info.value.code == "X_INVARIANT"
    assert "'quadratic'" in info.value.message


def test_refuses_an_unknown_jitter() -> None:
    with pytest.raises(XError) as info:
        backoff_delay(1, jitter="some")  # type: ignore[arg-type]
    assert info.value.code == "X_INVARIANT"
    assert "'some'" in info.value.message


def test_refuses_a_bad_base() -> None:
    with pytest.raises(XError) as info:
        backoff_delay(1, base=-5)
    assert info.value.code == "X_DURATION_INVALID"
    assert "base" in info.value.message
