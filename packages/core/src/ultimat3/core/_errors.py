"""``XError``, the one error every ultimat3 refusal raises, and its retry classification."""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

from ._codes import CODES, RETRY_CLASSES, RetryClass

_CODE_RE = re.compile(r"^X_[A-Z0-9_]+$")
_registered: dict[str, RetryClass] = {}


class XError(Exception):
    """An error with a stable ``X_`` code, a message, a runnable fix and JSON-safe meta."""

    code: str
    message: str
    fix: str | None
    meta: dict[str, Any]
    status: int | None

    def __init__(
        self,
        code: str,
        message: str | None = None,
        *,
        fix: str | None = None,
        meta: Mapping[str, Any] | None = None,
        status: int | None = None,
    ) -> None:
        info = CODES.get(code)
        self.code = code
        self.message = message if message is not None else (info.message if info else code)
        self.fix = fix if fix is not None else (info.fix if info else None)
        self.meta = dict(meta) if meta is not None else {}
        self.status = status if status is not None else (info.status if info else None)
        super().__init__(code, self.message)

    def __str__(self) -> str:
        return f"{self.code}: {self.message}"

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.code!r}, {self.message!r})"

    @property
    def retry(self) -> RetryClass:
        """How a job runner treats this error: ``retryable``, ``terminal`` or ``retry-after``."""
        return retry_classification(self.code)

    def to_dict(self) -> dict[str, Any]:
        """A JSON-safe dict: ``{code, message, fix, meta, status}``."""
        from ._jsonform import to_json_form

        meta: dict[str, Any] = {}
        for key, value in self.meta.items():
            try:
                meta[str(key)] = to_json_form(value)
            except XError:
                meta[str(key)] = repr(value)
        return {
            "code": self.code,
            "message": self.message,
            "fix": self.fix,
            "meta": meta,
            "status": self.status,
        }

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> XError:
        """Rebuild an error from :meth:`to_dict` output (unknown keys are ignored)."""
        code = d.get("code")
        if not isinstance(code, str) or not code:
            raise XError("X_INVARIANT", f"XError.from_dict needs a string 'code', got {code!r}")
        message = d.get("message")
        fix = d.get("fix")
        meta = d.get("meta")
        status = d.get("status")
        return cls(
            code,
            message if isinstance(message, str) else None,
            fix=fix if isinstance(fix, str) else None,
            meta=meta if isinstance(meta, Mapping) else None,
            status=status if isinstance(status, int) and not isinstance(status, bool) else None,
        )


def retry_classification(code: str | None) -> RetryClass:
    """The retry class of ``code``: registrations win, then the registry; unknown is retryable."""
    if code is None:
        return "retryable"
    registered = _registered.get(code)
    if registered is not None:
        return registered
    info = CODES.get(code)
    if info is not None:
        return info.retry
    if code.startswith("X_LEDGER_"):
        return "terminal"
    return "retryable"


def register_error_retry(mapping: Mapping[str, RetryClass]) -> None:
    """Classify the app's own codes (or reclassify built-in ones) for retries."""
    checked: dict[str, RetryClass] = {}
    for code, value in mapping.items():
        if not isinstance(code, str) or not _CODE_RE.match(code):
            raise XError(
                "X_INVARIANT",
                f"register_error_retry: {code!r} is not an X_UPPER_SNAKE code",
                fix="register codes such as {'X_PAYMENT_DECLINED': 'terminal'}",
            )
        if value not in RETRY_CLASSES:
            raise XError(
                "X_INVARIANT",
                f"register_error_retry: {code} has retry class {value!r}",
                fix="use 'retryable', 'terminal' or 'retry-after'",
            )
        checked[code] = value
    _registered.update(checked)


def reset_error_retry() -> None:
    """Forget every :func:`register_error_retry` registration (for tests)."""
    _registered.clear()
