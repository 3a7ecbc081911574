"""``XErrorMiddleware``: an ASGI middleware answering an escaped ``XError`` as JSON.

The body is ``{"ok": false, "code", "message", "fix"}`` with the code's status (500 when the
code has none); any other exception is left to the server. Nothing is sent when the app had
already started its response."""

from __future__ import annotations

import json
from typing import Any

from ultimat3.core import XError, log_event

from ._app import Receive, Scope, Send


class XErrorMiddleware:
    """Wrap an ASGI app: ``app = XErrorMiddleware(app)``."""

    def __init__(self, app: Any) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        started = False

        async def tracking(message: Any) -> None:
            nonlocal started
            if message["type"] == "http.response.start":
                started = True
            await send(message)

        try:
            await self.app(scope, receive, tracking)
        except XError as exc:
            log_event("http.xerror", level="warning", code=exc.code, status=exc.status)
            if started:
                raise
            body = json.dumps(
                {"ok": False, "code": exc.code, "message": exc.message, "fix": exc.fix},
                separators=(",", ":"),
            ).encode()
            headers = [
                (b"content-type", b"application/json"),
                (b"content-length", b"%d" % len(body)),
            ]
            retry_after = exc.meta.get("retry_after_seconds")
            if isinstance(retry_after, int | float) and not isinstance(retry_after, bool):
                headers.append((b"retry-after", str(max(1, int(-(-retry_after // 1)))).encode()))
            await send(
                {"type": "http.response.start", "status": exc.status or 500, "headers": headers}
            )
            await send({"type": "http.response.body", "body": body})
