"""The hostile-input guard: an input's JSON form, checked ONCE before any driver sees it, so a bad
input is the same ``X_BODY_INVALID`` (naming the path) on every driver and nothing is written.

Refused, each naming where in the input: a value with no JSON form (``object()``, ``bytes`` that
are not UTF-8, an int past Python's 4,300-digit text limit), NaN / ±Infinity anywhere (pydantic's
JSON mode would silently store them as ``null``), a float of magnitude ``2**53`` or more (a
decimal store such as Postgres ``jsonb`` reads it back as a different number), a NUL character
or a lone surrogate in any string or key (no driver can store both), nesting deeper than
``MAX_INPUT_DEPTH``, and a JSON form over the job's ``max_input_bytes``.
"""

from __future__ import annotations

import dataclasses
import json
import math
import re
from collections.abc import Mapping, Sequence
from itertools import chain
from typing import Any

from pydantic import BaseModel, TypeAdapter

from ultimat3.core import XError

MAX_INPUT_BYTES = 1_048_576
"""The default cap on an input's JSON form, in UTF-8 bytes (``job(max_input_bytes=...)``)."""

MAX_INPUT_BYTES_CEILING = 64 * 1_048_576
"""The largest ``max_input_bytes`` a job may declare (64 MiB): a queue row is not a blob store."""

MAX_INPUT_DEPTH = 64
"""The deepest nesting an input may have (containers inside containers, the input itself 1)."""

MAX_EXACT_FLOAT = 2.0**53
"""Floats of this magnitude or more are refused: past it a float's shortest decimal text is not
its exact value, and a decimal store (Postgres ``jsonb``) reads back the text's value."""

MAX_INT_DIGITS = 4300
"""Python's default ``sys.get_int_max_str_digits()``: a longer int cannot be written as JSON."""

_ANY: TypeAdapter[Any] = TypeAdapter(Any)
_IDENT = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")


class _Bad(Exception):
    """Where (a path) and why one value of an input is refused."""

    def __init__(self, path: str, why: str) -> None:
        super().__init__(path, why)
        self.base = path
        self.why = why
        self.segments: list[str] = []
        """Path segments added while the walk unwinds, innermost first (built only on error)."""

    @property
    def path(self) -> str:
        return self.base + "".join(reversed(self.segments))


def _key_path(path: str, key: object) -> str:
    if isinstance(key, str) and _IDENT.fullmatch(key):
        return f"{path}.{key}"
    shown = json.dumps(key) if isinstance(key, str) else repr(key)
    return f"{path}[{shown}]"


def _check_str(value: str, path: str) -> int:
    """The string's UTF-8 size; ``_Bad`` for a NUL or a lone surrogate."""
    if "\x00" in value:
        raise _Bad(path, "holds a NUL character (\\u0000), which no driver can store")
    if value.isascii():
        return len(value)
    try:
        return len(value.encode("utf-8"))
    except UnicodeEncodeError as exc:
        raise _Bad(
            path, f"holds a lone surrogate ({value[exc.start]!r}), which is not UTF-8"
        ) from None


def _check_float(value: float, path: str) -> None:
    if not math.isfinite(value):
        raise _Bad(path, f"{value!r} is not a JSON number")
    if abs(value) >= MAX_EXACT_FLOAT:
        raise _Bad(
            path,
            f"the float {value!r} is 2**53 or more in magnitude: it does not survive a decimal "
            "store exactly (pass an int, or the number as a str)",
        )


def _int_digits(value: int, path: str) -> int:
    """The digits of a big int; ``_Bad`` past ``MAX_INT_DIGITS`` (JSON cannot write it)."""
    if value.bit_length() > MAX_INT_DIGITS * 3:  # a cheap pre-check; str() is the judge
        try:
            return len(str(value))
        except ValueError:
            raise _Bad(path, f"is an int of more than {MAX_INT_DIGITS} digits") from None
    return len(str(value))


def _scan_form(value: Any, depth: int, size: list[int]) -> bool:
    """Walk a JSON form (pydantic's ``mode='json'`` dump): answers whether a ``None`` was seen
    (pydantic writes NaN / Infinity in an ``Any`` field as ``null``); ``_Bad`` otherwise, its
    path assembled only as the walk unwinds (nothing is built on the common, valid path)."""
    kind = type(value)
    if kind is str:
        size[0] += _check_str(value, "") + 2
        return False
    if kind is bool:
        size[0] += 5
        return False
    if kind is int:
        if -(10**18) < value < 10**18:
            size[0] += 20
        else:
            size[0] += _int_digits(value, "")
        return False
    if kind is float:
        _check_float(value, "")
        size[0] += 24
        return False
    if value is None:
        size[0] += 4
        return True
    if depth >= MAX_INPUT_DEPTH:
        raise _Bad("", f"nests deeper than {MAX_INPUT_DEPTH} levels (MAX_INPUT_DEPTH)")
    saw_none = False
    if kind is dict:
        for key, item in value.items():
            try:
                if type(key) is not str:
                    raise _Bad("", f"has the key {key!r}, which is not a str")
                size[0] += _check_str(key, "") + 4
                saw_none = _scan_form(item, depth + 1, size) or saw_none
            except _Bad as bad:
                if type(key) is str:
                    bad.segments.append(_key_path("", key))
                raise
        return saw_none
    if kind is list:
        for i, item in enumerate(value):
            size[0] += 1
            try:
                saw_none = _scan_form(item, depth + 1, size) or saw_none
            except _Bad as bad:
                bad.segments.append(f"[{i}]")
                raise
        return saw_none
    raise _Bad("", f"(of type {kind.__name__}) is not a JSON value")


def _children(value: Any) -> list[tuple[object, object]] | None:
    """The (key, child) pairs of a container of a validated input, ``None`` for a leaf."""
    if isinstance(value, BaseModel):
        return [(name, getattr(value, name, None)) for name in type(value).model_fields]
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return [(f.name, getattr(value, f.name)) for f in dataclasses.fields(value)]
    if isinstance(value, Mapping):
        return list(value.items())
    if isinstance(value, list | tuple | set | frozenset):
        return list(enumerate(value))
    return None


def _find_bad(value: Any, path: str, depth: int) -> None:
    """Walk a validated (python) input for what its JSON dump chokes on or silently changes:
    raises ``_Bad`` at the first such value."""
    if isinstance(value, bool) or value is None:
        return
    if isinstance(value, float):
        _check_float(value, path)
        return
    if isinstance(value, int):
        _int_digits(int(value), path)
        return
    if isinstance(value, str):
        _check_str(value, path)
        return
    if isinstance(value, bytes | bytearray):
        try:
            bytes(value).decode("utf-8")
        except UnicodeDecodeError:
            raise _Bad(path, "bytes that are not UTF-8 have no JSON form (base64 them)") from None
        return
    refusal = getattr(type(value), "__x_json_refusal__", None)  # a sealed entity value
    if refusal is not None:
        raise refusal(value, path)
    children = _children(value)
    if children is None:  # a leaf: pydantic writes datetime, UUID, Decimal, Enum ...
        try:
            _ANY.dump_python(value, mode="json")
        except Exception:
            raise _Bad(path, f"(of type {type(value).__name__}) has no JSON form") from None
        return
    if depth >= MAX_INPUT_DEPTH:
        raise _Bad(path, f"nests deeper than {MAX_INPUT_DEPTH} levels (MAX_INPUT_DEPTH)")
    for key, child in children:
        if isinstance(value, Mapping) and not isinstance(key, str | int | float | bool):
            raise _Bad(path, f"the key {key!r} is not a str")
        child_path = (
            f"{path}[{key}]"
            if isinstance(value, list | tuple | set | frozenset)
            else _key_path(path, key)
        )
        _find_bad(child, child_path, depth + 1)


def _refusal(job: str, where: str, bad: _Bad) -> XError:
    shown = bad.path if len(bad.path) <= 120 else bad.path[:60] + "..." + bad.path[-40:]
    return XError(
        "X_BODY_INVALID",
        f"job {job!r}{where}: the input at {shown} {bad.why}",
        fix="pass JSON-native values (finite numbers, UTF-8 text without NUL, at most "
        f"{MAX_INPUT_DEPTH} levels deep) the declared input accepts",
        meta={"job": job, "path": bad.path},
    )


def _too_big(job: str, where: str, size: int, cap: int) -> XError:
    return XError(
        "X_BODY_INVALID",
        f"job {job!r}{where}: the input is {size:,} bytes as JSON, over max_input_bytes ({cap:,})",
        fix="queue a reference (a storage key, a row id) instead of the data, or raise the "
        f"cap: job(..., max_input_bytes={max(cap * 2, size)})",
        meta={"job": job, "bytes": size, "max_input_bytes": cap},
    )


_NO_FORM: Any = object()


def checked_payload(
    job: str,
    adapter: TypeAdapter[Any],
    value: Any,
    *,
    max_bytes: int,
    where: str = "",
    form: Any = _NO_FORM,
) -> Any:
    """The JSON form ``value`` (a validated input) is queued as, or ``X_BODY_INVALID`` naming the
    job, the path and the rule it breaks. Nothing has been written when it raises. ``form`` is
    the dump already made (a batch dumps its list once)."""
    if form is _NO_FORM:
        try:
            form = adapter.dump_python(value, mode="json")
        except Exception as exc:  # PydanticSerializationError, UnicodeDecodeError, ValueError
            try:
                _find_bad(value, "$", 0)
            except _Bad as bad:
                raise _refusal(job, where, bad) from None
            except RecursionError:
                raise _refusal(job, where, _Bad("$", "nests too deep")) from None
            raise _refusal(job, where, _Bad("$", f"has no JSON form ({exc})")) from None
    size = [0]
    try:
        try:
            saw_none = _scan_form(form, 0, size)
        except _Bad as bad:
            bad.base = "$"
            raise
        if saw_none:
            _find_bad(adapter.dump_python(value), "$", 0)  # a NaN written as null?
    except _Bad as bad:
        raise _refusal(job, where, bad) from None
    except RecursionError:
        raise _refusal(job, where, _Bad("$", "nests too deep")) from None
    if size[0] * 6 > max_bytes:  # the estimate is a lower bound; escapes at most multiply by 6
        exact = len(json.dumps(form, separators=(",", ":"), ensure_ascii=False).encode())
        if exact > max_bytes:
            raise _too_big(job, where, exact, max_bytes)
    return form


_FLAT_LEAVES = frozenset({str, int, float, bool})


def flat_forms_pass(forms: Sequence[Any], *, max_bytes: int) -> bool:
    """Whether every form of a batch passes ``checked_payload``, settled over the whole batch in
    a few C-level passes rather than one walk per input: each form a dict of str keys to str /
    int / finite float / bool (the common flat input), no NUL or lone surrogate in any text, no
    int or float past what the walk allows, and the batch's whole estimated size within the cap
    of ONE input. ``False`` decides nothing: each form then takes ``checked_payload``, whose
    refusal names its input. (A ``None`` value takes the walk too: pydantic writes a NaN in an
    ``Any`` field as ``null``.)"""
    if not forms or set(map(type, forms)) != {dict}:
        return False
    keys = list(chain.from_iterable(forms))
    values = list(chain.from_iterable(map(dict.values, forms)))
    kinds = set(map(type, values))
    if not kinds <= _FLAT_LEAVES or not set(map(type, keys)) <= {str}:
        return False
    texts = keys + [v for v in values if type(v) is str] if str in kinds else keys
    joined = "".join(texts)
    if "\x00" in joined:
        return False
    if joined.isascii():
        size = len(joined)
    else:
        try:
            size = len(joined.encode("utf-8"))
        except UnicodeEncodeError:
            return False
    if int in kinds:
        ints = [v for v in values if type(v) is int]
        if not (min(ints) > -(10**18) and max(ints) < 10**18):
            return False
    if float in kinds:
        floats = [v for v in values if type(v) is float]
        if not all(map(math.isfinite, floats)) or max(map(abs, floats)) >= MAX_EXACT_FLOAT:
            return False
    # the walk's estimate, summed over the batch (str +2, key +4, a number 24 at most, a bool
    # 5): within one input's cap / 6 for the whole batch, every input is within its own
    size += 2 * len(texts) + 2 * len(keys) + 24 * len(values)
    return size * 6 <= max_bytes


def keys_pass(keys: Sequence[object]) -> bool:
    """Whether every key of a batch is what ``checked_key`` passes (a non-empty ASCII str of at
    most ``MAX_IDEMPOTENCY_KEY`` characters without NUL), in a few C-level passes; ``False``
    decides nothing (each key then takes ``checked_key``, whose refusal names it)."""
    if not keys or set(map(type, keys)) != {str}:
        return False
    texts: Sequence[str] = keys  # type: ignore[assignment]
    joined = "\x00".join(texts)
    return (
        joined.isascii()
        and joined.count("\x00") == len(texts) - 1
        and "" not in texts
        and max(map(len, texts)) <= MAX_IDEMPOTENCY_KEY
    )


MAX_IDEMPOTENCY_KEY = 512
"""The longest idempotency key, in characters (at most 2,048 UTF-8 bytes: inside every driver's
index limit, Postgres's btree included)."""


def checked_key(job: str, key: str, *, where: str = "") -> str:
    """An idempotency key every driver stores the same: at most ``MAX_IDEMPOTENCY_KEY``
    characters, UTF-8 text without NUL; ``X_INVARIANT`` naming the job otherwise."""
    if len(key) <= MAX_IDEMPOTENCY_KEY and key.isascii() and "\x00" not in key:
        return key
    shown = repr(key) if len(key) <= 40 else f"{key[:37]!r}..."
    why = f"is {len(key):,} characters, over {MAX_IDEMPOTENCY_KEY} (MAX_IDEMPOTENCY_KEY)"
    if len(key) <= MAX_IDEMPOTENCY_KEY:
        try:
            _check_str(key, "the key")
        except _Bad as bad:
            why = bad.why
        else:
            return key
    raise XError(
        "X_INVARIANT",
        f"job {job!r}{where}: idempotency_key answered {shown}, which {why}",
        fix="derive a short key from the input's identity (an id, a date), or hash a long "
        "one: idempotency_key=lambda i: hashlib.sha256(i.text.encode()).hexdigest()",
        meta={"job": job, "max": MAX_IDEMPOTENCY_KEY},
    )
