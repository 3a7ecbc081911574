"""What a command prints: one ``Answer`` rendered as JSON (``--json``) or as a compact table, an
``XError`` rendered to stderr, and the exit codes.

Exit codes: ``0`` the command did what it said; ``1`` it was refused with an ``XError`` (the code
is the first thing on stderr); ``2`` the command line itself was wrong (argparse's usage error);
``130`` interrupted by Ctrl-C.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from decimal import Decimal
from typing import Any, Final, TextIO
from uuid import UUID

from ultimat3.core import XError
from ultimat3.jobs.adapter import BackfillRow

EXIT_OK: Final = 0
EXIT_ERROR: Final = 1
EXIT_USAGE: Final = 2
EXIT_INTERRUPTED: Final = 130


@dataclass(frozen=True, slots=True)
class Answer:
    """A command's result: ``data`` is plain JSON data (rows already through ``to_json_dict``),
    ``text`` the human form of the same thing."""

    data: Any
    text: str
    exit_code: int = EXIT_OK
    """What ``x`` exits with once it is printed (``x verify`` answers its findings with 1)."""


def _fallback(value: object) -> Any:
    """JSON for the few values a driver may hand back that ``json`` does not know."""
    if isinstance(value, datetime):
        return value.isoformat()
    if isinstance(value, UUID | Decimal):
        return str(value)
    if isinstance(value, bytes):
        return value.hex()
    if isinstance(value, set | frozenset):
        return sorted(value, key=str)
    return repr(value)


def dumps(data: Any) -> str:
    return json.dumps(data, indent=2, ensure_ascii=False, default=_fallback)


def emit(answer: Answer, *, as_json: bool, out: TextIO) -> None:
    out.write((dumps(answer.data) if as_json else answer.text).rstrip("\n") + "\n")
    out.flush()


def emit_error(error: XError, *, as_json: bool, err: TextIO) -> None:
    """``X_CODE: message`` and the fix, or ``{"error": {code, message, fix, meta, status}}``."""
    if as_json:
        err.write(dumps({"error": error.to_dict()}) + "\n")
    else:
        err.write(f"{error.code}: {error.message}\n")
        if error.fix:
            err.write(f"  fix: {error.fix}\n")
    err.flush()


def usage_error(prog: str, message: str) -> XError:
    """The ``XError`` a ``--json`` caller reads for a command line argparse refused."""
    return XError(
        "X_INVARIANT",
        f"{prog}: {message}",
        fix=f"{prog} --help lists the arguments it takes",
        meta={"usage": True},
    )


# --- human forms ---------------------------------------------------------------------------


def when(value: datetime | None) -> str:
    """A row time as ``2026-01-02 03:04:05Z``; ``-`` for none."""
    if value is None:
        return "-"
    return value.astimezone(UTC).strftime("%Y-%m-%d %H:%M:%SZ")


def clip(value: object, width: int = 40) -> str:
    """One cell: ``-`` for None, JSON for structures, cut to ``width`` with an ellipsis."""
    if value is None:
        return "-"
    text = value if isinstance(value, str) else json.dumps(value, default=_fallback)
    text = " ".join(text.split())
    return text if len(text) <= width else text[: width - 1] + "…"


def table(headers: Sequence[str], rows: Sequence[Sequence[str]]) -> str:
    """Left-aligned columns two spaces apart; the last column is not padded."""
    widths = [len(h) for h in headers]
    for row in rows:
        for i, cell in enumerate(row):
            widths[i] = max(widths[i], len(cell))
    lines = []
    for row in (headers, *rows):
        cells = [cell.ljust(widths[i]) for i, cell in enumerate(row)]
        lines.append("  ".join(cells).rstrip())
    return "\n".join(lines)


def error_text(error: object) -> str:
    """``X_CODE: message`` of a stored error mapping (a row's ``last_error``, a step's error)."""
    if not error:
        return "-"
    if isinstance(error, Mapping):
        code = error.get("code")
        message = error.get("message")
        if code and message:
            return f"{code}: {message}"
        return str(code or message or error)
    return str(error)


def backfill_table(rows: Sequence[BackfillRow]) -> str:
    return table(
        ("ID", "NAME", "STATE", "ROWS", "STARTED", "UPDATED", "JOB", "CURSOR"),
        [
            (
                b.id,
                clip(b.name, 32),
                b.state,
                str(b.rows),
                when(b.started_at),
                when(b.updated_at),
                b.job_id or "-",
                clip(b.cursor, 30),
            )
            for b in rows
        ],
    )
