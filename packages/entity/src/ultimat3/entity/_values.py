"""Values against their column: refused before any statement (``X_ENTITY_VALUE_INVALID``
naming the entity and the column), normalized to the one Python form both databases answer."""

from __future__ import annotations

import json
import math
import re
import uuid as _uuid
from datetime import UTC, datetime
from decimal import Decimal
from typing import TYPE_CHECKING, Any

from ultimat3.core import XError

from ._sealing import REDACTED, revealed

if TYPE_CHECKING:
    from ._columns import Column

_CANONICAL_UUID = re.compile(r"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}\Z")
INT32 = (-(2**31), 2**31 - 1)
INT64 = (-(2**63), 2**63 - 1)


def _refuse(entity: str, column: str, why: str, value: Any, fix: str) -> XError:
    shown = repr(value)
    if len(shown) > 80:
        shown = shown[:77] + "..."
    return XError(
        "X_ENTITY_VALUE_INVALID",
        f"{entity}.{column}: {why} (got {shown})",
        fix=fix,
        meta={"entity": entity, "column": column},
    )


def check_value(entity: str, column: str, col: Column, value: Any) -> Any:
    """The normalized value, or ``X_ENTITY_VALUE_INVALID``. ``None`` only on a nullable column.
    A sealed column takes a ``Sealed`` read back as its plaintext, and its refusals never quote
    the value."""
    if col.is_sealed:
        try:
            return _check_value(entity, column, col, revealed(value))
        except XError as exc:
            message = exc.message.rsplit(" (got ", 1)[0] + f" (got {REDACTED})"
            raise XError(exc.code, message, fix=exc.fix, meta=dict(exc.meta)) from None
    return _check_value(entity, column, col, value)


def _check_value(entity: str, column: str, col: Column, value: Any) -> Any:
    if value is None:
        if col.is_nullable:
            return None
        raise _refuse(
            entity,
            column,
            "None on a column that is not nullable",
            value,
            f"give {column} a value, or declare it .nullable()",
        )
    kind = col.kind
    if kind == "uuid":
        if isinstance(value, str) and _CANONICAL_UUID.match(value):
            return value  # the common case, checked without building a UUID
        if isinstance(value, _uuid.UUID):
            return str(value)
        if isinstance(value, str):
            try:
                return str(_uuid.UUID(value))
            except ValueError:
                pass
        raise _refuse(entity, column, "not a UUID", value, "pass a UUID string, e.g. new_id()")
    if kind == "text":
        if not isinstance(value, str):
            raise _refuse(entity, column, "not a str", value, "pass a str")
        if "\x00" in value:
            raise _refuse(
                entity,
                column,
                "text with a NUL character (Postgres text cannot hold one)",
                value,
                "strip '\\x00' from the text, or store bytes elsewhere",
            )
        if not _utf8(value):
            raise _refuse(
                entity,
                column,
                "text with a lone surrogate (not valid UTF-8)",
                value,
                "decode the text properly (errors='replace') before storing it",
            )
        return value
    if kind in ("integer", "bigint"):
        lo, hi = INT32 if kind == "integer" else INT64
        if isinstance(value, bool) or not isinstance(value, int):
            raise _refuse(entity, column, f"not an int for a {kind} column", value, "pass an int")
        if not lo <= value <= hi:
            raise _refuse(
                entity,
                column,
                f"past the {kind} range [{lo}, {hi}]",
                value,
                "declare the column bigint() or numeric()"
                if kind == "integer"
                else "declare the column numeric()",
            )
        return value
    if kind == "numeric":
        if isinstance(value, bool) or not isinstance(value, int | float | Decimal):
            raise _refuse(entity, column, "not a number", value, "pass a Decimal or an int")
        if isinstance(value, float) and not math.isfinite(value):
            raise _refuse(entity, column, "not a finite number", value, "pass a finite number")
        dec = Decimal(repr(value)) if isinstance(value, float) else Decimal(value)
        if not dec.is_finite():
            raise _refuse(entity, column, "not a finite number", value, "pass a finite Decimal")
        return dec
    if kind == "boolean":
        if not isinstance(value, bool):
            raise _refuse(entity, column, "not a bool", value, "pass True or False")
        return value
    if kind == "timestamp":
        if not isinstance(value, datetime):
            raise _refuse(entity, column, "not a datetime", value, "pass datetime.now(UTC)")
        if value.tzinfo is None or value.utcoffset() is None:
            raise _refuse(
                entity,
                column,
                "a naive datetime for a timestamptz column",
                value,
                "attach a zone: value.replace(tzinfo=UTC) or datetime.now(UTC)",
            )
        return value.astimezone(UTC)
    if kind == "jsonb":
        try:
            encoded = json.dumps(value, allow_nan=False)
        except (TypeError, ValueError) as exc:
            raise _refuse(
                entity,
                column,
                f"not JSON ({exc})",
                value,
                "pass dicts, lists, str, int, float, bool or None",
            ) from exc
        if not _utf8(json.dumps(value, ensure_ascii=False)):
            raise _refuse(
                entity,
                column,
                "JSON with a lone surrogate (not valid UTF-8)",
                value,
                "decode the strings properly before storing them",
            )
        if "\\u0000" in encoded:
            raise _refuse(
                entity,
                column,
                "JSON with a NUL character (jsonb cannot hold one)",
                value,
                "strip '\\x00' from the strings",
            )
        return json.loads(encoded)
    raise AssertionError(kind)  # pragma: no cover - kinds are a closed set


def _utf8(text: str) -> bool:
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True
