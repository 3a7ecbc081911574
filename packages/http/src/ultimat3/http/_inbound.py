"""What a webhook receiver is handed (``Inbound``) and what the ASGI app serves (``WebhookRoute``).

The route is plain data: ``webhook_receiver()`` in ``ultimat3.jobs`` builds one over its job, and
anything else that can ``accept(event_id, payload)`` durably can be served the same way."""

from __future__ import annotations

import re
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, Final

import httpx

DEFAULT_WEBHOOK_BODY_LIMIT: Final = 1_048_576
"""1 MiB: the default ``max_bytes`` of a receiver."""

RESERVED_PREFIXES: Final = ("/api", "/_x")
_PARAM = re.compile(r":([A-Za-z_][A-Za-z0-9_]*)")


@dataclass(frozen=True, slots=True)
class Inbound:
    """One inbound request, nothing parsed: ``body`` is the exact bytes."""

    body: bytes
    headers: httpx.Headers
    """Case-insensitive; ``headers.get('x-signature')``."""
    params: Mapping[str, str]
    """The ``:param`` segments of the route's path."""
    url: str
    method: str


Verify = Callable[[Inbound], Any]
"""``verify(inbound)`` -> ``{"event_id", "payload"}`` or ``{"answer": (status, headers, body)}``;
sync or async; raises an ``XError`` to refuse."""

Accept = Callable[[str, Any], Awaitable[bool]]
"""``await accept(event_id, payload)`` -> ``deduped``, once the event is durable."""


@dataclass(frozen=True, slots=True)
class WebhookRoute:
    """A receiver as the ASGI app serves it."""

    name: str
    path: str
    verify: Verify
    accept: Accept
    handshake: Callable[[Inbound], Any] | None = None
    max_bytes: int = DEFAULT_WEBHOOK_BODY_LIMIT
    rate_limit: Any = None
    """A ``RateLimiter`` spent once per request (key ``webhook:<name>``) before the body is
    read; a refusal is 429 ``X_RATE_LIMITED`` with ``Retry-After``."""
    pattern: re.Pattern[str] = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "pattern", compile_path(self.path))

    def match(self, path: str) -> dict[str, str] | None:
        """The ``:param`` values of ``path`` when it is this route's, else ``None``."""
        m = self.pattern.fullmatch(path)
        return m.groupdict() if m is not None else None


def compile_path(path: str) -> re.Pattern[str]:
    """``/hooks/billing/:account`` -> a pattern whose groups are the params (one segment each)."""
    out: list[str] = []
    last = 0
    for m in _PARAM.finditer(path):
        out.append(re.escape(path[last : m.start()]))
        out.append(f"(?P<{m.group(1)}>[^/]+)")
        last = m.end()
    out.append(re.escape(path[last:]))
    return re.compile("".join(out))


def path_problem(path: object) -> str | None:
    """Why ``path`` cannot be a receiver's path (``None`` when it can)."""
    if not isinstance(path, str) or not path:
        return f"path {path!r} is not a non-empty str"
    if not path.startswith("/"):
        return f"path {path!r} is relative; give an absolute path such as '/hooks/billing'"
    for prefix in RESERVED_PREFIXES:
        if path == prefix or path.startswith(prefix + "/"):
            return f"path {path!r} is under {prefix}, which the app's own routes own"
    names = _PARAM.findall(path)
    if len(names) != len(set(names)):
        return f"path {path!r} names a :param twice"
    if any(c in path for c in "?#") or "//" in path:
        return f"path {path!r} holds '?', '#' or an empty segment"
    return None
