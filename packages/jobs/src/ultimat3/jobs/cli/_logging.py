"""``x worker --log-level LEVEL --log-format text|json``: the root logger of a process the
library owns. ``text`` is one line a record (``time level logger message``); ``json`` one JSON
object a line carrying the structured event's fields (``event`` and every ``key=value`` of
``log_event``) for a log shipper. The handler writes to stderr and is removed when the command
ends."""

from __future__ import annotations

import contextlib
import json
import logging
import sys
from collections.abc import Iterator
from datetime import UTC, datetime
from typing import Any, Final, TextIO

from ultimat3.core import XError

LOG_LEVELS: Final = ("debug", "info", "warning", "error")
LOG_FORMATS: Final = ("text", "json")
TEXT_FORMAT: Final = "%(asctime)s %(levelname)s %(name)s %(message)s"


class JsonFormatter(logging.Formatter):
    """One JSON object a record: ``ts``, ``level``, ``logger``, ``message``, then the event's
    fields (``event`` and the ``x_fields`` of ``log_event``), and ``exc`` when there is one."""

    def format(self, record: logging.LogRecord) -> str:
        doc: dict[str, Any] = {
            "ts": datetime.fromtimestamp(record.created, UTC).isoformat(timespec="milliseconds"),
            "level": record.levelname.lower(),
            "logger": record.name,
            "message": record.getMessage(),
        }
        event = getattr(record, "event", None)
        if event is not None:
            doc["event"] = event
        fields = getattr(record, "x_fields", None)
        if isinstance(fields, dict):
            for key, value in fields.items():
                doc.setdefault(key, value)
        if record.exc_info:
            doc["exc"] = self.formatException(record.exc_info)
        return json.dumps(doc, default=str, ensure_ascii=False)


def _refuse(flag: str, value: str, allowed: tuple[str, ...]) -> XError:
    return XError(
        "X_CONFIG_INVALID",
        f"{flag} {value!r} is not one of {', '.join(allowed)}",
        fix=f"{flag} {allowed[1] if flag == '--log-level' else allowed[0]}",
    )


def check_log_options(level: str, fmt: str) -> None:
    """Refuse an unknown ``--log-level`` or ``--log-format`` (``X_CONFIG_INVALID``)."""
    if level not in LOG_LEVELS:
        raise _refuse("--log-level", level, LOG_LEVELS)
    if fmt not in LOG_FORMATS:
        raise _refuse("--log-format", fmt, LOG_FORMATS)


@contextlib.contextmanager
def root_logging(level: str, fmt: str, *, stream: TextIO | None = None) -> Iterator[None]:
    """Configure the root logger for the block (its level and one handler), then restore it."""
    check_log_options(level, fmt)
    root = logging.getLogger()
    handler = logging.StreamHandler(stream if stream is not None else sys.stderr)
    handler.setFormatter(JsonFormatter() if fmt == "json" else logging.Formatter(TEXT_FORMAT))
    before = root.level
    root.addHandler(handler)
    root.setLevel(level.upper())
    try:
        yield
    finally:
        root.removeHandler(handler)
        root.setLevel(before)
