"""What ``import_rows()`` and ``export_rows()`` share: the lazy storage import, declaration
causes, sync-or-async callbacks, and the default idempotency key."""

from __future__ import annotations

import hashlib
import inspect
import json
from collections.abc import Callable
from types import ModuleType
from typing import Any

from ultimat3.core import XError, to_json_form


def storage(factory: str) -> ModuleType:
    """``ultimat3.storage``, or ``X_CONFIG_INVALID`` naming the extra to install."""
    try:
        import ultimat3.storage as module
    except ImportError:  # pragma: no cover - exercised by the isolation check
        raise XError(
            "X_CONFIG_INVALID",
            f"{factory}() needs ultimat3-storage, which is not installed",
            fix='pip install "ultimat3-jobs[storage]"',
        ) from None
    return module


class Causes:
    """Every cause of one declaration's refusal, raised together."""

    def __init__(self, factory: str, name: object) -> None:
        self.factory = factory
        self.name = name
        self.items: list[tuple[str, str]] = []

    def add(self, cause: str, fix: str) -> None:
        self.items.append((cause, fix))

    def callable(self, field: str, value: object, fix: str) -> None:
        if not callable(value):
            self.add(f"{field} is a {type(value).__name__}, not a callable", fix)

    def whole(self, field: str, value: object, minimum: int) -> None:
        if not isinstance(value, int) or isinstance(value, bool) or value < minimum:
            self.add(
                f"{field} {value!r} is not an int >= {minimum}", f"{field}=<an int >= {minimum}>"
            )

    def raise_if_any(self) -> None:
        if not self.items:
            return
        label = (
            f"{self.factory}({self.name!r})" if isinstance(self.name, str) else f"{self.factory}()"
        )
        raise XError(
            "X_JOB_DECLARATION_INVALID",
            f"{label} is invalid: " + "; ".join(c for c, _ in self.items),
            fix="; ".join(dict.fromkeys(f for _, f in self.items)),
            meta={
                "job": self.name if isinstance(self.name, str) else None,
                "causes": [c for c, _ in self.items],
            },
        )


def check_name(causes: Causes, name: object) -> None:
    if not isinstance(name, str) or not name.strip():
        causes.add(
            f"name {name!r} is not a non-empty str",
            "name='orders.import' — a durable queue key, required for every factory",
        )


async def call(fn: Callable[..., Any], *args: Any) -> Any:
    """``fn(*args)``, awaited when it answers an awaitable (every callback may be either)."""
    result = fn(*args)
    if inspect.isawaitable(result):
        result = await result
    return result


def input_digest_key(prefix: str) -> Callable[[Any], str]:
    """The default idempotency key: ``<prefix>:<sha256 of the input's JSON form>`` — the same
    input while a run of it is live dedupes onto that run."""

    def key(value: Any) -> str:
        form = value.model_dump(mode="json") if hasattr(value, "model_dump") else value
        text = json.dumps(to_json_form(form), sort_keys=True, separators=(",", ":"))
        return f"{prefix}:{hashlib.sha256(text.encode()).hexdigest()[:32]}"

    return key
