"""The little of HTTP the dashboard speaks, on plain ASGI: the request it reads (path under the
mount, query, cookies, a bounded form body) and the response it sends."""

from __future__ import annotations

from collections.abc import Awaitable, Callable, MutableMapping
from dataclasses import dataclass, field
from http.cookies import SimpleCookie
from typing import Any
from urllib.parse import parse_qs, urlencode

from ultimat3.core import XError

Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]

MAX_FORM_BYTES = 64 * 1024
"""A dashboard form is a handful of short fields; a bigger body is refused unread."""


@dataclass(slots=True)
class Request:
    method: str
    path: str
    """The path under the mount: ``/jobs/abc`` for ``/admin/jobs/jobs/abc``."""
    root: str
    """Where the dashboard is mounted (``scope["root_path"]``), without a trailing slash."""
    query: dict[str, str]
    headers: dict[str, str]
    cookies: dict[str, str]
    scheme: str
    form: dict[str, str] = field(default_factory=dict)

    def url(self, path: str, params: dict[str, str | None] | None = None) -> str:
        """A link to ``path`` under the mount, with the non-empty ``params``."""
        kept = {k: v for k, v in (params or {}).items() if v not in (None, "")}
        query = f"?{urlencode(kept)}" if kept else ""
        return f"{self.root}{path}{query}"


def _first(values: dict[str, list[str]]) -> dict[str, str]:
    return {k: v[0] for k, v in values.items() if v}


def request_of(scope: Scope) -> Request:
    root = str(scope.get("root_path") or "").rstrip("/")
    path = str(scope.get("path") or "/")
    if root and (path == root or path.startswith(root + "/")):
        path = path[len(root) :]  # servers that keep the mount in ``path`` (ASGI 3 / uvicorn)
    headers = {
        k.decode("latin-1").lower(): v.decode("latin-1") for k, v in scope.get("headers") or []
    }
    cookies: dict[str, str] = {}
    if "cookie" in headers:
        jar: SimpleCookie = SimpleCookie()
        try:
            jar.load(headers["cookie"])
        except Exception:  # a malformed Cookie header is as good as none
            jar = SimpleCookie()
        cookies = {k: m.value for k, m in jar.items()}
    query = _first(
        parse_qs(scope.get("query_string", b"").decode("latin-1"), keep_blank_values=True)
    )
    return Request(
        method=str(scope.get("method", "GET")).upper(),
        path=path or "/",
        root=root,
        query=query,
        headers=headers,
        cookies=cookies,
        scheme=str(scope.get("scheme", "http")),
    )


async def read_form(request: Request, receive: Receive) -> dict[str, str]:
    """The urlencoded body, at most ``MAX_FORM_BYTES``; ``X_BODY_INVALID`` for anything else."""
    kind = request.headers.get("content-type", "").split(";")[0].strip().lower()
    if kind != "application/x-www-form-urlencoded":
        raise XError(
            "X_BODY_INVALID",
            f"a dashboard action takes a urlencoded form, not {kind or 'no content type'!r}",
            fix="post the dashboard's own form (application/x-www-form-urlencoded)",
            status=415,
        )
    body = bytearray()
    while True:
        message = await receive()
        if message["type"] == "http.disconnect":
            break
        body += message.get("body", b"")
        if len(body) > MAX_FORM_BYTES:
            raise XError(
                "X_BODY_INVALID",
                f"the form is over {MAX_FORM_BYTES} bytes",
                fix="post the dashboard's own form: a few short fields",
                status=413,
            )
        if not message.get("more_body"):
            break
    try:
        text = body.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise XError(
            "X_BODY_INVALID", "the form is not UTF-8", fix="post UTF-8 text", status=400
        ) from exc
    return _first(parse_qs(text, keep_blank_values=True))


CSP = (
    "default-src 'none'; style-src 'self'; img-src 'self'; form-action 'self'; "
    "base-uri 'none'; frame-ancestors 'none'"
)
"""No script runs on a dashboard page, not even ours: a value that escaped escaping still could
not execute."""


@dataclass(slots=True)
class Response:
    body: str | bytes
    status: int = 200
    content_type: str = "text/html; charset=utf-8"
    headers: list[tuple[str, str]] = field(default_factory=list)

    async def send(self, send: Send, *, head: bool = False) -> None:
        data = self.body.encode("utf-8") if isinstance(self.body, str) else self.body
        headers = [
            (b"content-type", self.content_type.encode()),
            (b"content-length", str(len(data)).encode()),
            (b"cache-control", b"no-store"),
            (b"x-content-type-options", b"nosniff"),
            (b"referrer-policy", b"same-origin"),
            (b"content-security-policy", CSP.encode()),
            *((k.encode("latin-1"), v.encode("latin-1")) for k, v in self.headers),
        ]
        await send({"type": "http.response.start", "status": self.status, "headers": headers})
        await send({"type": "http.response.body", "body": b"" if head else data})
