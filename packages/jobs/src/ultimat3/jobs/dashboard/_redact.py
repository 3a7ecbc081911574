"""Sensitive values of a job's input are shown as ``[redacted]``.

A key naming a secret (``password``, ``secret``, ``token``, ``api_key``, ``authorization``,
``cookie``, ``credential``, ``private_key``, ... in any case, with ``-`` or ``_``) has its value
replaced, at any depth of the payload. The dashboard reads the payload; it never shows those."""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

REDACTED = "[redacted]"
SENSITIVE = re.compile(
    r"pass(word|wd|phrase)?|secret|token|api[-_]?key|auth(orization)?|cookie|credential|"
    r"private[-_]?key|session|ssn|card[-_]?number|cvv",
    re.IGNORECASE,
)


def redact(value: Any) -> Any:
    """``value`` with the values under sensitive keys replaced by ``[redacted]``."""
    if isinstance(value, Mapping):
        return {
            k: REDACTED if isinstance(k, str) and SENSITIVE.search(k) else redact(v)
            for k, v in value.items()
        }
    if isinstance(value, list | tuple):
        return [redact(v) for v in value]
    return value
