import dataclasses
import enum
import json
import math
import uuid
from datetime import UTC, date, datetime, time, timedelta, timezone
from decimal import Decimal
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st
from pydantic import BaseModel

from ultimat3.core import XError, dumps_json, loads_json, to_json_form


class Color(enum.Enum):
    RED = "red"


class Model(BaseModel):
    when: datetime
    n: int


@dataclasses.dataclass
class Point:
    x: int
    when: date


def test_converts_the_usual_types() -> None:
    u = uuid.UUID(int=5)
    value = {
        "dt": datetime(2026, 1, 1, 12, tzinfo=UTC),
        "dt_off": datetime(2026, 1, 1, 12, tzinfo=timezone(timedelta(hours=2))),
        "d": date(2026, 1, 2),
        "t": time(3, 4),
        "u": u,
        "dec": Decimal("1.10"),
        "e": Color.RED,
        "m": Model(when=datetime(2026, 1, 1, tzinfo=UTC), n=1),
        "p": Point(1, date(2026, 1, 1)),
        "tup": (1, 2),
        "s": {3, 1, 2},
        "nested": [None, True, 1.5],
    }
    assert to_json_form(value) == {
        "dt": "2026-01-01T12:00:00Z",
        "dt_off": "2026-01-01T12:00:00+02:00",
        "d": "2026-01-02",
        "t": "03:04:00",
        "u": str(u),
        "dec": "1.10",
        "e": "red",
        "m": {"when": "2026-01-01T00:00:00Z", "n": 1},
        "p": {"x": 1, "when": "2026-01-01"},
        "tup": [1, 2],
        "s": [1, 2, 3],
        "nested": [None, True, 1.5],
    }


def refused(value: object) -> XError:
    with pytest.raises(XError) as info:
        to_json_form(value)
    assert info.value.code == "X_STEP_OUTPUT_UNSERIALIZABLE"
    return info.value


def test_refuses_with_the_offending_path() -> None:
    e = refused({"items": [1, 2, {"when": b"x"}]})
    assert "$.items[2].when" in e.message
    assert e.meta["path"] == "$.items[2].when"
    assert "bytes" in e.message


@pytest.mark.parametrize(
    ("value", "path"),
    [
        (math.nan, "$"),
        ({"x": math.inf}, "$.x"),
        ({"a b": Decimal("NaN")}, '$["a b"]'),
        ([object()], "$[0]"),
        ({1: "a"}, "$"),
        ({"k": timedelta(1)}, "$.k"),
    ],
)
def test_refuses_what_has_no_json_form(value: object, path: str) -> None:
    assert f"{path} has no JSON form" in refused(value).message


def test_refuses_a_cycle() -> None:
    a: list[Any] = [1]
    a.append({"back": a})
    assert "$[1].back" in refused(a).message
    assert "cycle" in refused(a).message


def test_shared_non_cyclic_values_are_fine() -> None:
    shared = [1]
    assert to_json_form([shared, shared]) == [[1], [1]]


def test_dumps_and_loads() -> None:
    text = dumps_json({"when": datetime(2026, 1, 1, tzinfo=UTC), "é": 1})
    assert text == '{"when":"2026-01-01T00:00:00Z","é":1}'
    assert loads_json(text) == {"when": "2026-01-01T00:00:00Z", "é": 1}


@pytest.mark.parametrize("text", ["{", "NaN", "[Infinity]"])
def test_loads_refuses_bad_json(text: str) -> None:
    with pytest.raises(XError) as info:
        loads_json(text)
    assert info.value.code == "X_INVARIANT"
    assert "not JSON" in info.value.message


json_native = st.recursive(
    st.none()
    | st.booleans()
    | st.integers()
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(),
    lambda children: st.lists(children) | st.dictionaries(st.text(), children),
    max_leaves=20,
)


@given(json_native)
def test_json_native_values_equal_their_round_trip(value: object) -> None:
    assert to_json_form(value) == json.loads(json.dumps(value))


@given(
    st.recursive(
        json_native
        | st.datetimes(timezones=st.just(UTC))
        | st.uuids()
        | st.decimals(allow_nan=False, allow_infinity=False)
        | st.dates(),
        lambda children: st.lists(children) | st.tuples(children, children),
        max_leaves=10,
    )
)
def test_to_json_form_is_idempotent(value: object) -> None:
    once = to_json_form(value)
    assert to_json_form(once) == once
    assert loads_json(dumps_json(value)) == once
