import uuid

import pytest
from hypothesis import given
from hypothesis import strategies as st

from ultimat3.core import (
    XError,
    is_lowercase_uuid,
    new_id,
    new_ids,
    require_lowercase_uuid,
    uuid7_at,
)


def test_new_id_is_a_lowercase_uuid7() -> None:
    value = new_id()
    parsed = uuid.UUID(value)
    assert parsed.version == 7
    assert parsed.variant == uuid.RFC_4122
    assert str(parsed) == value
    assert is_lowercase_uuid(value)


def test_new_ids_sort_in_creation_order() -> None:
    ids = [new_id() for _ in range(5000)]
    assert ids == sorted(ids)
    assert len(set(ids)) == len(ids)


@given(st.integers(0, 300))
def test_new_ids_are_uuid7s_after_every_earlier_id_and_before_every_later(n: int) -> None:
    before = new_id()
    ids = new_ids(n)
    after = new_id()
    assert len(ids) == n == len(set(ids))
    assert [before, *ids, after] == sorted([before, *ids, after])
    assert before not in ids and after not in ids
    for value in ids:
        parsed = uuid.UUID(value)
        assert (parsed.version, parsed.variant, str(parsed)) == (7, uuid.RFC_4122, value)
        assert abs((parsed.int >> 80) - (uuid.UUID(after).int >> 80)) < 60_000


def test_new_ids_of_nothing_is_empty() -> None:
    assert new_ids(0) == [] and new_ids(-1) == []


@given(st.integers(0, (1 << 48) - 1), st.integers(0, (1 << 74) - 1))
def test_uuid7_at_encodes_its_timestamp(ms: int, tail: int) -> None:
    value = uuid7_at(ms, tail)
    parsed = uuid.UUID(value)
    assert parsed.version == 7
    assert parsed.variant == uuid.RFC_4122
    assert parsed.int >> 80 == ms
    assert is_lowercase_uuid(value)


@given(
    st.tuples(st.integers(0, (1 << 48) - 1), st.integers(0, (1 << 74) - 1)),
    st.tuples(st.integers(0, (1 << 48) - 1), st.integers(0, (1 << 74) - 1)),
)
def test_uuid7_string_order_is_time_then_tail_order(a: tuple[int, int], b: tuple[int, int]) -> None:
    assert (uuid7_at(*a) < uuid7_at(*b)) == (a < b)


def test_uuid7_at_refuses_out_of_range() -> None:
    with pytest.raises(XError) as info:
        uuid7_at(1 << 48, 0)
    assert info.value.code == "X_INVARIANT"
    assert str(1 << 48) in info.value.message


@pytest.mark.parametrize(
    "bad",
    [
        "0190B5A2-7C1E-7A3B-8C4D-0123456789AB",
        "0190b5a27c1e7a3b8c4d0123456789ab",
        "{0190b5a2-7c1e-7a3b-8c4d-0123456789ab}",
        " 0190b5a2-7c1e-7a3b-8c4d-0123456789ab",
        "",
        None,
        42,
        uuid.UUID(int=1),
    ],
)
def test_require_lowercase_uuid_refuses_naming_the_field(bad: object) -> None:
    assert not is_lowercase_uuid(bad)
    with pytest.raises(XError) as info:
        require_lowercase_uuid(bad, name="org_id")
    assert info.value.code == "X_ID_INVALID"
    assert "org_id" in info.value.message
    assert repr(bad) in info.value.message


def test_require_lowercase_uuid_accepts_canonical() -> None:
    value = "0190b5a2-7c1e-7a3b-8c4d-0123456789ab"
    assert require_lowercase_uuid(value, name="id") == value


@given(st.uuids())
def test_any_uuid_str_is_canonical(u: uuid.UUID) -> None:
    assert is_lowercase_uuid(str(u))
    assert not is_lowercase_uuid(str(u).upper()) or str(u) == str(u).upper()


@given(
    n=st.integers(1, 40),
    tail=st.one_of(
        st.integers(0, (1 << 74) - 1),
        # rand_b (the low 62 bits) a few steps short of carrying into rand_a, or rand_a as well
        # short of carrying into the millisecond
        st.integers(1, 1 << 40).map(lambda k: (1 << 62) - k),
        st.integers(1, 1 << 40).map(lambda k: (1 << 74) - k),
    ),
    steps=st.binary(min_size=160, max_size=160),
    behind=st.booleans(),
)
def test_new_ids_are_the_values_new_id_would_count_through(
    n: int, tail: int, steps: bytes, behind: bool
) -> None:
    """Whatever the random tail (near a carry or not) and whether the clock is behind the last
    id, new_ids answers the uuid7s of ``first, first + 1 + step, ...`` written as uuid7_at
    writes them — the fast path (one head per batch) and the carrying path alike."""
    import time

    from ultimat3.core import _ids

    ms = time.time_ns() // 1_000_000
    last = ((ms + 5) << 74) | tail if behind else 0  # an earlier id from "the future"
    random = tail.to_bytes(10, "big") + steps[: 4 * n]
    increments = [int.from_bytes(steps[4 * i : 4 * i + 4], "little") for i in range(n)]
    value = (ms << 74) | tail
    if value <= last:
        value = last + 1 + increments[0]
    expected = [value]
    for step in increments[1:]:
        expected.append(expected[-1] + 1 + step)
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(_ids, "_last", last)
        # by dotted path: the os and time modules _ids uses (it does not re-export them)
        patch.setattr("ultimat3.core._ids.os.urandom", lambda size: random[:size])
        patch.setattr("ultimat3.core._ids.time.time_ns", lambda: ms * 1_000_000)
        ids = new_ids(n)
        assert _ids._last == expected[-1]
    assert ids == [uuid7_at(v >> 74, v & ((1 << 74) - 1)) for v in expected]
