"""``webhook_app(*receivers)``: a plain ASGI application serving webhook receivers.

POST reads the body as it streams (refusing past ``max_bytes`` before the rest is read), asks
``verify`` before anything is parsed, checks the event id, has the event made durable, and only
then answers 200. Every error body is ``{"ok": false, "code", "message"}`` where the message is
the code's registry text: nothing a request carried is quoted back (nor logged).
"""

from __future__ import annotations

import inspect
import json
import math
import re
import time
from collections.abc import Awaitable, Callable, Iterable, Mapping, MutableMapping
from typing import TYPE_CHECKING, Any

import httpx

from ultimat3.core import CODES, XError, log_event, meter, to_json_form

from ._inbound import Inbound, WebhookRoute

if TYPE_CHECKING:
    from opentelemetry.metrics import Counter

Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]

RECEIVER_RETRY_AFTER_SECONDS = 30
_EVENT_ID = re.compile(r"[\x20-\x7e]{1,256}")
_STATUS = {
    "X_WEBHOOK_SIGNATURE_INVALID": 401,
    "X_WEBHOOK_SIGNATURE_STALE": 401,
    "X_WEBHOOK_EVENT_ID_INVALID": 422,
    "X_WEBHOOK_EVENT_INVALID": 400,
    "X_BODY_INVALID": 413,
    "X_WEBHOOK_RECEIVER_UNAVAILABLE": 503,
    "X_CONFIG_INVALID": 500,
}


class _TooLarge(Exception):
    pass


_received: Counter | None = None


def received_counter() -> Counter:
    """``webhook_received_total{receiver, status}``: the answers of every receiver."""
    global _received
    if _received is None:
        _received = meter().create_counter(
            "webhook_received_total", description="inbound webhook requests, by answer status"
        )
    return _received


def _route_of(receiver: object) -> WebhookRoute:
    if isinstance(receiver, WebhookRoute):
        return receiver
    route = getattr(receiver, "webhook_route", None)
    if isinstance(route, WebhookRoute):
        return route
    raise XError(
        "X_WEBHOOK_RECEIVER_INVALID",
        f"webhook_app: {type(receiver).__name__} is not a webhook receiver",
        fix="pass the handles webhook_receiver() answers (or WebhookRoute values)",
    )


async def _maybe(value: Any) -> Any:
    return await value if inspect.isawaitable(value) else value


class WebhookApp:
    """The ASGI app ``webhook_app`` answers; ``routes`` lists what it serves."""

    def __init__(self, routes: Iterable[WebhookRoute]) -> None:
        self.routes = tuple(routes)
        seen: dict[str, str] = {}
        for route in self.routes:
            if route.path in seen:
                raise XError(
                    "X_WEBHOOK_RECEIVER_INVALID",
                    f"webhook_app: receivers {seen[route.path]!r} and {route.name!r} both "
                    f"serve {route.path!r}",
                    fix="give each receiver its own path",
                )
            seen[route.path] = route.name

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "lifespan":
            await _lifespan(receive, send)
            return
        if scope["type"] != "http":
            return  # websockets: not served (closing the socket is the server's default)
        path: str = scope.get("path", "")
        root = scope.get("root_path", "")
        if root and path.startswith(root):
            path = path[len(root) :] or "/"
        for route in self.routes:
            params = route.match(path)
            if params is not None:
                status = 500

                async def counted(message: Message) -> None:
                    nonlocal status
                    if message["type"] == "http.response.start":
                        status = int(message["status"])
                    await send(message)

                try:
                    await self._serve(route, params, scope, receive, counted)
                finally:
                    received_counter().add(1, {"receiver": route.name, "status": status})
                return
        await _error(send, 404, "X_NOT_FOUND", "no webhook receiver serves this path")

    async def _serve(
        self,
        route: WebhookRoute,
        params: dict[str, str],
        scope: Scope,
        receive: Receive,
        send: Send,
    ) -> None:
        method = scope.get("method", "GET")
        if method == "GET" and route.handshake is not None:
            inbound = _inbound(scope, b"", params)
            try:
                answer = await _maybe(route.handshake(inbound))
                if isinstance(answer, Mapping) and "answer" in answer:
                    answer = answer["answer"]
            except XError as exc:
                await _refuse(send, route, exc)
                return
            except Exception as exc:
                _log_refusal(route, "X_WEBHOOK_EVENT_INVALID", exc)
                await _error(send, 400, "X_WEBHOOK_EVENT_INVALID")
                return
            await _answer_or_500(send, route, answer)
            return
        if method != "POST":
            allow = "POST, GET" if route.handshake is not None else "POST"
            await _error(
                send,
                405,
                "X_METHOD_NOT_ALLOWED",
                f"this webhook receiver answers {allow}",
                headers=[(b"allow", allow.encode())],
            )
            return
        started = time.monotonic()
        if route.rate_limit is not None:
            decision = await route.rate_limit.hit(f"webhook:{route.name}")
            if not decision.allowed:
                _log_refusal(route, "X_RATE_LIMITED", None)
                wait = max(1, math.ceil(decision.retry_after_seconds))
                await _error(
                    send, 429, "X_RATE_LIMITED", headers=[(b"retry-after", str(wait).encode())]
                )
                return
        try:
            body = await _read_body(scope, receive, route.max_bytes)
        except _TooLarge:
            log_event(
                "http.webhook.refused", level="warning", receiver=route.name, code="X_BODY_INVALID"
            )
            await _error(
                send,
                413,
                "X_BODY_INVALID",
                f"the body is over this receiver's max_bytes of {route.max_bytes}",
            )
            return
        inbound = _inbound(scope, body, params)
        try:
            verdict = await _maybe(route.verify(inbound))
        except XError as exc:
            await _refuse(send, route, exc)
            return
        except Exception as exc:  # its message may quote the body: never echoed, never logged
            _log_refusal(route, "X_WEBHOOK_EVENT_INVALID", exc)
            await _error(send, 400, "X_WEBHOOK_EVENT_INVALID")
            return
        if isinstance(verdict, Mapping) and "answer" in verdict:
            await _answer_or_500(send, route, verdict["answer"])
            return
        if not isinstance(verdict, Mapping) or "event_id" not in verdict:
            _log_refusal(route, "X_WEBHOOK_EVENT_INVALID", None)
            await _error(send, 400, "X_WEBHOOK_EVENT_INVALID")
            return
        event_id = verdict["event_id"]
        if not isinstance(event_id, str) or not _EVENT_ID.fullmatch(event_id):
            _log_refusal(route, "X_WEBHOOK_EVENT_ID_INVALID", None)
            await _error(send, 422, "X_WEBHOOK_EVENT_ID_INVALID")
            return
        try:
            payload = to_json_form(verdict.get("payload"))
        except XError:
            _log_refusal(route, "X_WEBHOOK_EVENT_INVALID", None)
            await _error(send, 400, "X_WEBHOOK_EVENT_INVALID")
            return
        try:
            deduped = await route.accept(event_id, payload)
        except Exception as exc:
            log_event(
                "http.webhook.unavailable",
                level="error",
                receiver=route.name,
                code=exc.code if isinstance(exc, XError) else type(exc).__name__,
            )
            await _error(
                send,
                503,
                "X_WEBHOOK_RECEIVER_UNAVAILABLE",
                headers=[(b"retry-after", str(RECEIVER_RETRY_AFTER_SECONDS).encode())],
            )
            return
        log_event(
            "http.webhook.accepted",
            level="debug",
            receiver=route.name,
            deduped=bool(deduped),
            duration_ms=int((time.monotonic() - started) * 1000),
        )
        await _json(send, 200, {"ok": True, "event_id": event_id, "deduped": bool(deduped)})


def webhook_app(*receivers: object) -> WebhookApp:
    """A plain ASGI application serving each receiver's ``path`` (mount it in Starlette or
    FastAPI with ``app.mount("/", webhook_app(...))``). POST runs the receiver; GET its
    ``handshake`` when it has one (else 405); any other method 405; an unknown path 404."""
    return WebhookApp(_route_of(r) for r in receivers)


# --- helpers --------------------------------------------------------------------------------


def _inbound(scope: Scope, body: bytes, params: dict[str, str]) -> Inbound:
    raw = scope.get("headers") or []
    headers = httpx.Headers([(k.decode("latin-1"), v.decode("latin-1")) for k, v in raw])
    scheme = scope.get("scheme", "http")
    host = headers.get("host")
    if not host:
        server = scope.get("server")
        host = f"{server[0]}:{server[1]}" if server else "localhost"
    query = scope.get("query_string", b"").decode("latin-1")
    url = f"{scheme}://{host}{scope.get('root_path', '')}{scope.get('path', '')}"
    if query:
        url += "?" + query
    return Inbound(
        body=body, headers=headers, params=params, url=url, method=scope.get("method", "GET")
    )


async def _read_body(scope: Scope, receive: Receive, limit: int) -> bytes:
    for name, value in scope.get("headers") or []:
        if name.lower() == b"content-length":
            try:
                if int(value) > limit:
                    raise _TooLarge
            except ValueError:
                pass
    chunks: list[bytes] = []
    size = 0
    while True:
        message = await receive()
        if message["type"] == "http.disconnect":
            break
        chunk = message.get("body", b"")
        if chunk:
            size += len(chunk)
            if size > limit:
                raise _TooLarge
            chunks.append(chunk)
        if not message.get("more_body", False):
            break
    return b"".join(chunks)


def _log_refusal(route: WebhookRoute, code: str, exc: BaseException | None) -> None:
    fields: dict[str, Any] = {"receiver": route.name, "code": code}
    if exc is not None:
        fields["error_type"] = type(exc).__name__  # the type, never its message
    log_event("http.webhook.refused", level="warning", **fields)


async def _refuse(send: Send, route: WebhookRoute, exc: XError) -> None:
    status = _STATUS.get(exc.code) or exc.status or 400
    _log_refusal(route, exc.code, None)
    await _error(send, status, exc.code)


async def _error(
    send: Send,
    status: int,
    code: str,
    message: str | None = None,
    *,
    headers: list[tuple[bytes, bytes]] | None = None,
) -> None:
    info = CODES.get(code)
    text = message or (info.message if info is not None else "the webhook was refused")
    await _json(send, status, {"ok": False, "code": code, "message": text}, headers=headers)


async def _json(
    send: Send,
    status: int,
    body: Mapping[str, Any],
    *,
    headers: list[tuple[bytes, bytes]] | None = None,
) -> None:
    data = json.dumps(body, separators=(",", ":")).encode()
    await _raw(send, status, [(b"content-type", b"application/json"), *(headers or [])], data)


async def _raw(send: Send, status: int, headers: list[tuple[bytes, bytes]], body: bytes) -> None:
    all_headers = [*headers, (b"content-length", str(len(body)).encode())]
    await send({"type": "http.response.start", "status": status, "headers": all_headers})
    await send({"type": "http.response.body", "body": body})


async def _answer_or_500(send: Send, route: WebhookRoute, answer: Any) -> None:
    """Send a challenge's answer; a malformed one is the receiver's bug: 500, nothing quoted."""
    try:
        await _answer(send, answer)
    except Exception as exc:
        _log_refusal(route, "X_WEBHOOK_RECEIVER_INVALID", exc)
        await _error(send, 500, "X_WEBHOOK_RECEIVER_INVALID")


async def _answer(send: Send, answer: Any) -> None:
    """A challenge's answer: ``(status, headers, body)`` with headers a mapping or pairs and the
    body ``bytes``, ``str`` or JSON-able."""
    if not isinstance(answer, tuple) or len(answer) != 3:
        raise XError(
            "X_WEBHOOK_RECEIVER_INVALID",
            "a challenge answer is not (status, headers, body)",
            fix="answer {'answer': (200, {'content-type': 'text/plain'}, challenge)}",
        )
    status, headers, body = answer
    pairs = list(headers.items()) if isinstance(headers, Mapping) else list(headers or [])
    raw = [(str(k).lower().encode("latin-1"), str(v).encode("latin-1")) for k, v in pairs]
    if isinstance(body, bytes):
        data = body
    elif isinstance(body, str):
        data = body.encode()
    else:
        data = json.dumps(to_json_form(body), separators=(",", ":")).encode()
        if not any(k == b"content-type" for k, _ in raw):
            raw.append((b"content-type", b"application/json"))
    await _raw(send, int(status), raw, data)


async def _lifespan(receive: Receive, send: Send) -> None:
    while True:
        message = await receive()
        if message["type"] == "lifespan.startup":
            await send({"type": "lifespan.startup.complete"})
        elif message["type"] == "lifespan.shutdown":
            await send({"type": "lifespan.shutdown.complete"})
            return
