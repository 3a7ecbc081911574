"""Identifier rules: names from declarations are checked once, at declaration, then always
quoted (``psycopg.sql.Identifier``), so a reserved word such as ``order`` is a fine name."""

from __future__ import annotations

import hashlib
import re

from ultimat3.core import XError

MAX_IDENTIFIER_BYTES = 63
_NAME_RE = re.compile(r"^[a-z_][a-z0-9_]*$")


def check_identifier(name: object, *, what: str, fix: str) -> str:
    """``name`` if it is a usable Postgres identifier, else ``X_CONFIG_INVALID`` naming ``what``."""
    if not isinstance(name, str) or not name:
        raise XError(
            "X_CONFIG_INVALID", f"{what}: the name is empty or not a str ({name!r})", fix=fix
        )
    if len(name.encode("utf-8")) > MAX_IDENTIFIER_BYTES:
        raise XError(
            "X_CONFIG_INVALID",
            f"{what}: {name!r} is {len(name.encode('utf-8'))} bytes, past Postgres' "
            f"{MAX_IDENTIFIER_BYTES}-byte identifier limit",
            fix=fix,
            meta={"name": name},
        )
    if not _NAME_RE.match(name):
        raise XError(
            "X_CONFIG_INVALID",
            f"{what}: {name!r} is not snake_case (lowercase letters, digits and _, not starting "
            "with a digit)",
            fix=fix,
            meta={"name": name},
        )
    return name


def derived_name(*parts: str, suffix: str) -> str:
    """An index / constraint name from its parts, shortened with a hash past 63 bytes."""
    name = "_".join((*parts, suffix))
    if len(name) <= MAX_IDENTIFIER_BYTES:
        return name
    digest = hashlib.sha1(name.encode()).hexdigest()[:10]
    keep = MAX_IDENTIFIER_BYTES - len(digest) - len(suffix) - 2
    return f"{name[:keep]}_{digest}_{suffix}"
