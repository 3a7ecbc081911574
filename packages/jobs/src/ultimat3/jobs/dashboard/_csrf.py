"""CSRF for the action forms: a double-submit token, checked with the request's origin.

Every page served with actions on sets the cookie ``x_jobs_csrf`` (``HttpOnly``,
``SameSite=Strict``, scoped to the mount) when the browser has none, and every form carries the
same value in its hidden ``csrf`` field. A POST is refused with ``X_FORBIDDEN`` unless both are
there and equal, and unless its ``Origin`` (when the browser sends one) is the dashboard's own
host. A page on another site can neither read the cookie nor set it, so it cannot forge the
field; the token is stateless, so any number of server processes agree on it.
"""

from __future__ import annotations

import hmac
import secrets
from urllib.parse import urlsplit

from ultimat3.core import XError

from ._http import Request

COOKIE = "x_jobs_csrf"
FIELD = "csrf"


def token_of(request: Request) -> tuple[str, str | None]:
    """The token for this request's forms, and the ``Set-Cookie`` value when it is new."""
    have = request.cookies.get(COOKIE, "")
    if len(have) >= 32 and have.replace("-", "").replace("_", "").isalnum():
        return have, None
    token = secrets.token_urlsafe(32)
    secure = "; Secure" if request.scheme == "https" else ""
    path = request.root or "/"
    return token, f"{COOKIE}={token}; Path={path}; HttpOnly; SameSite=Strict{secure}"


def check(request: Request) -> None:
    """Refuse a POST whose token or origin is not the dashboard's own (``X_FORBIDDEN``)."""
    origin = request.headers.get("origin")
    host = request.headers.get("host")
    foreign = origin is not None and origin != "null" and host is not None
    if foreign and urlsplit(str(origin)).netloc.lower() != str(host).lower():
        raise XError(
            "X_FORBIDDEN",
            f"a dashboard action from another origin ({origin}) is refused",
            fix="use the dashboard's own forms, served from the same host",
            status=403,
        )
    cookie = request.cookies.get(COOKIE, "")
    sent = request.form.get(FIELD, "")
    if not cookie or not sent or not hmac.compare_digest(cookie, sent):
        raise XError(
            "X_FORBIDDEN",
            "the action's CSRF token is missing or does not match this browser's",
            fix="reload the dashboard page and submit its form again (cookies must be on)",
            status=403,
        )
