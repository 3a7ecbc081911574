"""Keyset cursors for ``introspect.list``: opaque, url-safe, checked.

A cursor names one row's position in the newest-first order, ``(created_at, id)``. It carries a
checksum, so a cursor no page produced (typed by hand, truncated, edited) is refused with
``X_JOB_PAGE_INVALID`` instead of silently paging from somewhere else. Every driver uses these two
functions, so a cursor from one page of a driver is understood by the next call on it.
"""

from __future__ import annotations

import base64
import binascii
import zlib
from datetime import UTC, datetime, timedelta

from ultimat3.core import XError

from ._model import JobRow

_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
_VERSION = "1"
_FIX = "pass after=job_cursor(last_row) or before=job_cursor(first_row) of a page you were given"


def job_cursor(row: JobRow) -> str:
    """The cursor of ``row``: ``after=job_cursor(last)`` is the next page, ``before=`` the
    previous. Encodes ``created_at`` (microseconds) and ``id``."""
    created = row.created_at
    if created.tzinfo is None or created.utcoffset() is None:
        raise XError(
            "X_INVARIANT",
            f"job {row.id}: created_at {created!r} is naive; rows carry aware UTC times",
        )
    micros = (created - _EPOCH) // timedelta(microseconds=1)
    body = f"{_VERSION}:{micros}:{row.id}"
    check = format(zlib.crc32(body.encode()), "08x")
    return base64.urlsafe_b64encode(f"{body}:{check}".encode()).decode().rstrip("=")


def parse_job_cursor(cursor: str) -> tuple[datetime, str]:
    """``(created_at, id)`` of a cursor :func:`job_cursor` made; ``X_JOB_PAGE_INVALID`` for any
    other string."""
    if not isinstance(cursor, str) or not cursor or len(cursor) > 512:
        raise _invalid(cursor)
    try:
        raw = base64.urlsafe_b64decode(cursor + "=" * (-len(cursor) % 4)).decode()
    except (binascii.Error, UnicodeDecodeError, ValueError):
        raise _invalid(cursor) from None
    body, sep, check = raw.rpartition(":")
    if not sep or format(zlib.crc32(body.encode()), "08x") != check:
        raise _invalid(cursor)
    version, sep1, rest = body.partition(":")
    micros_text, sep2, job_id = rest.partition(":")
    if version != _VERSION or not sep1 or not sep2 or not job_id:
        raise _invalid(cursor)
    try:
        micros = int(micros_text)
        created = _EPOCH + timedelta(microseconds=micros)
    except (ValueError, OverflowError):
        raise _invalid(cursor) from None
    return created, job_id


def _invalid(cursor: object) -> XError:
    shown = cursor if not isinstance(cursor, str) or len(cursor) <= 80 else cursor[:80] + "..."
    return XError(
        "X_JOB_PAGE_INVALID",
        f"the cursor {shown!r} came from no page of introspect.list",
        fix=_FIX,
    )
