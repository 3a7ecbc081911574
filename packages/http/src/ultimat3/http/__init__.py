"""ultimat3.http: ASGI pieces. Today ``XErrorMiddleware`` (an escaped ``XError`` answered as
``{"ok": false, "code", "message", "fix"}`` with its status); the rest lands with its issue."""

from ultimat3.http._middleware import XErrorMiddleware

__all__ = ["XErrorMiddleware"]
