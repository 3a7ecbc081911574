"""``XErrorMiddleware(app)``: ASGI middleware answering an ``XError`` that escapes the app as
``{"ok": false, "code", "message", "fix"}`` with the code's HTTP status (500 when it has none);
``X_RATE_LIMITED`` (or any error with ``meta['retry_after_seconds']``) adds ``Retry-After``.
Anything else propagates untouched, and so does an error raised after the response started."""

from __future__ import annotations

import json
import math
from collections.abc import Awaitable, Callable, MutableMapping
from typing import Any

from ultimat3.core import XError

Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]
ASGIApp = Callable[[Scope, Receive, Send], Awaitable[None]]


class XErrorMiddleware:
    """Wrap an ASGI app: ``app = XErrorMiddleware(app)``."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope.get("type") != "http":
            await self.app(scope, receive, send)
            return
        started = False

        async def tracking(message: Message) -> None:
            nonlocal started
            if message.get("type") == "http.response.start":
                started = True
            await send(message)

        try:
            await self.app(scope, receive, tracking)
        except XError as exc:
            if started:
                raise
            await _answer(exc, send)


async def _answer(exc: XError, send: Send) -> None:
    status = exc.status if isinstance(exc.status, int) and 400 <= exc.status <= 599 else 500
    body = json.dumps(
        {"ok": False, "code": exc.code, "message": exc.message, "fix": exc.fix},
        ensure_ascii=False,
    ).encode()
    headers = [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode())]
    seconds = exc.meta.get("retry_after_seconds")
    if isinstance(seconds, int | float) and not isinstance(seconds, bool) and seconds == seconds:
        headers.append((b"retry-after", str(max(0, math.ceil(seconds))).encode()))
    elif exc.code == "X_RATE_LIMITED":
        headers.append((b"retry-after", b"1"))
    await send({"type": "http.response.start", "status": status, "headers": headers})
    await send({"type": "http.response.body", "body": body})
