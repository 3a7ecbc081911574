"""XErrorMiddleware answers an escaped XError with its status and body (Retry-After for a rate
limit), 500 for a code without one, and lets everything else through untouched."""

from __future__ import annotations

from typing import Any

import httpx
import pytest

from ultimat3.core import XError
from ultimat3.http import XErrorMiddleware


def _app(error: BaseException | None, *, after_start: bool = False) -> Any:
    async def app(scope: Any, receive: Any, send: Any) -> None:
        if after_start:
            await send({"type": "http.response.start", "status": 200, "headers": []})
        if error is not None:
            raise error
        await send({"type": "http.response.start", "status": 200, "headers": []})
        await send({"type": "http.response.body", "body": b"fine"})

    return XErrorMiddleware(app)


async def _get(app: Any) -> httpx.Response:
    transport = httpx.ASGITransport(app=app)
    async with httpx.AsyncClient(transport=transport, base_url="http://app") as client:
        return await client.get("/")


@pytest.mark.parametrize(
    ("error", "status"),
    [
        (XError("X_BODY_INVALID", "field email is missing", fix="send email"), 422),
        (XError("X_JOB_NOT_FOUND", "no job 123"), 404),
        (XError("X_INVARIANT", "a bug"), 500),
    ],
)
async def test_an_escaped_xerror_is_answered_with_its_status(error: XError, status: int) -> None:
    response = await _get(_app(error))
    assert response.status_code == status
    assert response.json() == {
        "ok": False, "code": error.code, "message": error.message, "fix": error.fix,
    }  # fmt: skip


async def test_a_rate_limit_carries_retry_after() -> None:
    error = XError("X_RATE_LIMITED", "slow down", meta={"retry_after_seconds": 2.2})
    response = await _get(_app(error))
    assert response.status_code == 429 and response.headers["retry-after"] == "3"


async def test_other_exceptions_and_a_clean_response_pass_through() -> None:
    assert (await _get(_app(None))).text == "fine"
    with pytest.raises(RuntimeError, match="not ours"):
        await _get(_app(RuntimeError("not ours")))
