"""What an action did, carried across its redirect (POST, then 303 to the page, then GET).

The message rides in the short-lived cookie ``x_jobs_flash`` and is shown once: the GET that
reads it clears it. It is only ever shown as text, so a forged one can say nothing but text.
A reload of the page after an action therefore reloads the page, never the action."""

from __future__ import annotations

import base64
import binascii
import json

from ._http import Request
from ._layout import Banner

COOKIE = "x_jobs_flash"
MAX_AGE_S = 60
MAX_TEXT = 2_000


def _cookie(request: Request, value: str, max_age: int) -> str:
    secure = "; Secure" if request.scheme == "https" else ""
    path = request.root or "/"
    return f"{COOKIE}={value}; Path={path}; Max-Age={max_age}; HttpOnly; SameSite=Strict{secure}"


def set_flash(request: Request, banner: Banner) -> str:
    """The ``Set-Cookie`` value carrying ``banner`` to the next page."""
    data = {"text": banner.text[:MAX_TEXT], "ok": banner.ok, "code": banner.code, "fix": banner.fix}
    raw = base64.urlsafe_b64encode(json.dumps(data).encode()).decode().rstrip("=")
    return _cookie(request, raw, MAX_AGE_S)


def take_flash(request: Request) -> tuple[Banner | None, str | None]:
    """The banner this request carries (``None`` when none or unreadable), and the
    ``Set-Cookie`` value that clears it."""
    raw = request.cookies.get(COOKIE)
    if not raw:
        return None, None
    clear = _cookie(request, "", 0)
    try:
        data = json.loads(base64.urlsafe_b64decode(raw + "=" * (-len(raw) % 4)))
        text, ok = data["text"], data["ok"]
        code, fix = data.get("code"), data.get("fix")
        if not isinstance(text, str) or not isinstance(ok, bool):
            return None, clear
        return Banner(
            text[:MAX_TEXT],
            ok=ok,
            code=code if isinstance(code, str) else None,
            fix=fix if isinstance(fix, str) else None,
        ), clear
    except (ValueError, KeyError, TypeError, binascii.Error):
        return None, clear
