"""The JSON form: what a value becomes after a JSON round trip, refusing what has none."""

from __future__ import annotations

import contextlib
import dataclasses
import json
import math
import re
from collections.abc import Mapping
from datetime import date, datetime, time
from decimal import Decimal
from enum import Enum
from typing import TypeAlias
from uuid import UUID

from pydantic import BaseModel

from ._errors import XError

JsonValue: TypeAlias = "dict[str, JsonValue] | list[JsonValue] | str | int | float | bool | None"
"""A JSON document: dicts with str keys, lists, str, int, float, bool, None."""

_IDENT = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
_FIX = (
    "return JSON-native values (dict with str keys, list, str, int, float, bool, None), a "
    "pydantic model, a dataclass, datetime, UUID, Decimal or Enum"
)


def _key_path(path: str, key: str) -> str:
    return f"{path}.{key}" if _IDENT.fullmatch(key) else f"{path}[{json.dumps(key)}]"


def _refuse(path: str, why: str) -> XError:
    return XError(
        "X_STEP_OUTPUT_UNSERIALIZABLE",
        f"{path} has no JSON form: {why}",
        fix=_FIX,
        meta={"path": path},
    )


def _iso(value: datetime | date | time) -> str:
    text = value.isoformat()
    if isinstance(value, datetime | time) and text.endswith("+00:00"):
        text = text[:-6] + "Z"
    return text


def _convert(value: object, path: str, stack: set[int]) -> JsonValue:
    if value is None or isinstance(value, bool | str):
        return value
    if isinstance(value, Enum):
        return _convert(value.value, path, stack)
    if isinstance(value, int):
        return int(value)
    if isinstance(value, float):
        if math.isnan(value) or math.isinf(value):
            raise _refuse(path, f"{value!r} is not a JSON number")
        return float(value)
    if isinstance(value, datetime | date | time):
        return _iso(value)
    if isinstance(value, UUID):
        return str(value)
    if isinstance(value, Decimal):
        if not value.is_finite():
            raise _refuse(path, f"Decimal {value} is not a JSON number")
        return str(value)
    if isinstance(value, bytes | bytearray | memoryview):
        raise _refuse(path, f"{type(value).__name__} has no JSON form (encode it: base64, hex)")
    if isinstance(value, BaseModel):
        if id(value) in stack:
            raise _refuse(path, "a cycle")
        stack.add(id(value))
        try:
            dumped = value.model_dump(mode="json")
        except Exception as exc:
            raise _refuse(path, f"{type(value).__name__}: {exc}") from exc
        finally:
            stack.discard(id(value))
        return _convert(dumped, path, stack)
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        as_dict = {f.name: getattr(value, f.name) for f in dataclasses.fields(value)}
        return _container(value, as_dict, path, stack)
    if isinstance(value, Mapping | list | tuple | set | frozenset):
        return _container(value, value, path, stack)
    refusal = getattr(type(value), "__x_json_refusal__", None)  # e.g. a sealed entity value
    if refusal is not None:
        raise refusal(value, path)
    raise _refuse(path, f"a {type(value).__name__} is not JSON-serialisable")


def _container(owner: object, value: object, path: str, stack: set[int]) -> JsonValue:
    if id(owner) in stack:
        raise _refuse(path, "a cycle")
    stack.add(id(owner))
    try:
        if isinstance(value, Mapping):
            out: dict[str, JsonValue] = {}
            for key, item in value.items():
                if not isinstance(key, str):
                    raise _refuse(path, f"the key {key!r} is not a str")
                out[key] = _convert(item, _key_path(path, key), stack)
            return out
        assert isinstance(value, list | tuple | set | frozenset)
        items = [_convert(item, f"{path}[{i}]", stack) for i, item in enumerate(value)]
        if isinstance(value, set | frozenset):
            with contextlib.suppress(TypeError):  # mixed kinds keep iteration order
                items.sort()
        return items
    finally:
        stack.discard(id(owner))


def to_json_form(value: object) -> JsonValue:
    """``value`` as it reads back after JSON: datetime → ISO str, UUID → str, model → dict ..."""
    return _convert(value, "$", set())


def dumps_json(value: object) -> str:
    """Compact JSON text of ``to_json_form(value)``."""
    return json.dumps(
        to_json_form(value), separators=(",", ":"), ensure_ascii=False, allow_nan=False
    )


def _no_constant(name: str) -> object:
    raise ValueError(f"{name} is not JSON")


def loads_json(text: str | bytes) -> JsonValue:
    """Parse JSON text; refuses NaN/Infinity and malformed text with ``X_INVARIANT``."""
    try:
        result: JsonValue = json.loads(text, parse_constant=_no_constant)
    except ValueError as exc:
        raise XError(
            "X_INVARIANT", f"loads_json: the text is not JSON ({exc})", fix="pass valid JSON text"
        ) from exc
    return result
