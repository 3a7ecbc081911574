"""Object keys: ``/``-separated relative paths, checked before any store touches anything."""

from __future__ import annotations

from ultimat3.core import XError

MAX_KEY_BYTES = 1024
"""S3's own ceiling for a key, held by every store so a key valid on disk is valid on S3."""


def _why(key: str, *, prefix: bool) -> str | None:
    if not key:
        return None if prefix else "it is empty"
    if len(key.encode("utf-8", "surrogatepass")) > MAX_KEY_BYTES:
        return f"it is longer than {MAX_KEY_BYTES} bytes"
    for ch in key:
        point = ord(ch)
        if point < 0x20 or point == 0x7F or 0x80 <= point < 0xA0:
            return f"it holds the control character U+{point:04X}"
        if 0xD800 <= point <= 0xDFFF:
            return f"it holds the lone surrogate U+{point:04X}"
    if "\\" in key:
        return "it holds a backslash (keys are '/'-separated)"
    if key.startswith("/"):
        return "it is absolute (starts with '/')"
    segments = key.split("/")
    if prefix and segments[-1] == "":
        segments = segments[:-1]  # a prefix may end with '/': "invoices/"
    for segment in segments:
        if segment in ("..", "."):
            return f"it has a {segment!r} segment"
        if segment == "":
            return "it has an empty segment ('//' or a trailing '/')"
    return None


def check_key(key: object) -> str:
    """Answer ``key`` when it is a valid object key; ``X_STORAGE_KEY_INVALID`` naming it
    otherwise. Valid: a non-empty relative ``/``-separated path of at most 1,024 UTF-8 bytes,
    with no empty, ``.`` or ``..`` segment, no backslash, no NUL or other control character."""
    if not isinstance(key, str):
        raise XError(
            "X_STORAGE_KEY_INVALID",
            f"object key {key!r} is a {type(key).__name__}, not a str",
            fix="pass the key as a str such as 'imports/2026/orders.csv'",
            meta={"key": repr(key)},
        )
    why = _why(key, prefix=False)
    if why is not None:
        raise XError(
            "X_STORAGE_KEY_INVALID",
            f"object key {key!r} is refused: {why}",
            fix="use a relative '/'-separated path such as 'imports/2026/orders.csv' (no empty, "
            "'.' or '..' segment, no backslash, no control character)",
            meta={"key": key},
        )
    return key


def check_prefix(prefix: object) -> str:
    """Answer ``prefix`` when it is a valid listing prefix (``''``, or a key, or a key with a
    trailing ``/``); ``X_STORAGE_KEY_INVALID`` otherwise."""
    if not isinstance(prefix, str):
        raise XError(
            "X_STORAGE_KEY_INVALID",
            f"list prefix {prefix!r} is a {type(prefix).__name__}, not a str",
            fix="pass the prefix as a str such as 'imports/' ('' lists everything)",
            meta={"key": repr(prefix)},
        )
    why = _why(prefix, prefix=True)
    if why is not None:
        raise XError(
            "X_STORAGE_KEY_INVALID",
            f"list prefix {prefix!r} is refused: {why}",
            fix="use '' or a relative '/'-separated path, optionally ending with '/'",
            meta={"key": prefix},
        )
    return prefix


def not_found(key: str, where: str) -> XError:
    """``X_STORAGE_NOT_FOUND`` naming the key and the store."""
    return XError(
        "X_STORAGE_NOT_FOUND",
        f"no object {key!r} in {where}",
        fix="check the key (list(prefix) shows what is stored), or put the object first",
        meta={"key": key},
    )
