"""The driver's JSON text: the fast path for values that are their own JSON form writes exactly
what core's ``dumps_json`` writes, and everything else still goes through ``dumps_json``'s
conversions and refusals."""

from __future__ import annotations

import json
import math
import uuid
from datetime import UTC, datetime
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from ultimat3.core import XError, dumps_json
from ultimat3.jobs_redis._codec import compact_json, freeze, live_key

json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats() | st.text(),
    lambda inner: (
        st.lists(inner, max_size=4)
        | st.dictionaries(st.text(max_size=5), inner, max_size=4)
        | st.tuples(inner, inner)
    ),
    max_leaves=20,
)


@given(json_values)
def test_freeze_writes_what_dumps_json_writes_or_refuses_alike(value: Any) -> None:
    try:
        expected: str | None = dumps_json(value)
    except XError:
        expected = None
    if expected is None:
        with pytest.raises(XError) as caught:
            freeze(value, what="v")
        assert caught.value.code == "X_INVARIANT"  # freeze's default code
    else:
        assert freeze(value, what="v") == expected


@pytest.mark.parametrize(
    "value",
    [
        {"at": datetime(2026, 1, 2, tzinfo=UTC)},
        [uuid.UUID(int=7)],
        {"ok": True, "n": [1, 2.5, "x", None]},
        {"nested": {"t": (1, 2)}},
    ],
)
def test_values_that_need_converting_still_convert(value: Any) -> None:
    assert freeze(value, what="v") == dumps_json(value)


@pytest.mark.parametrize(
    "value", [{1: "int key"}, {"x": math.nan}, [math.inf], {"b": b"bytes"}, {"s": {1, 2}}]
)
def test_what_has_no_json_form_is_refused_with_the_callers_code(value: Any) -> None:
    try:
        dumps_json(value)
    except XError:
        pass
    else:
        assert freeze(value, what="v") == dumps_json(value)
        return
    with pytest.raises(XError) as caught:
        freeze(value, what="the payload", code="X_STEP_OUTPUT_UNSERIALIZABLE")
    assert caught.value.code == "X_STEP_OUTPUT_UNSERIALIZABLE"
    assert "the payload" in caught.value.message


def test_a_cycle_is_refused_not_a_crash() -> None:
    cyclic: dict[str, Any] = {}
    cyclic["self"] = cyclic
    with pytest.raises(XError):
        freeze(cyclic, what="v")


@given(json_values)
def test_compact_json_writes_what_the_stdlib_encoder_writes(value: Any) -> None:
    """The C encoder built once writes exactly what ``json.JSONEncoder(...).encode`` writes (live
    keys written before it must still match)."""
    stdlib = json.JSONEncoder(ensure_ascii=False, separators=(",", ":"))
    assert compact_json(value) == stdlib.encode(value)


def test_a_live_key_is_written_as_before() -> None:
    assert live_key("send", None, 'k\u00e9"') == '["send",null,"k\u00e9\\""]'
    assert live_key("send", "", "1") == '["send","","1"]'
