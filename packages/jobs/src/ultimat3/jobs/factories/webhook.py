"""``webhook()``: deliver one event to one endpoint, as a job.

Each attempt reads the endpoint and the event afresh (nothing is checkpointed: no step), signs
the body with core's signature format (plus Standard Webhooks headers with
``signature='standard-webhooks'``), POSTs it through ``ultimat3.http``'s address guard with
redirects off, writes one ledger row, and answers by status: 2xx delivered; 429/503 with
Retry-After throttled (the retry waits it out); other 4xx and 3xx rejected; 5xx, a timeout or a
network error failed. ``disable_after`` failed attempts in a row disable the endpoint.

Needs ``ultimat3-http`` (``pip install "ultimat3-jobs[http]"``), imported on first declaration.
"""

from __future__ import annotations

import asyncio
import contextlib
import email.utils
import importlib
import inspect
import math
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass
from datetime import UTC
from typing import TYPE_CHECKING, Any, Final, Literal

from pydantic import BaseModel, ConfigDict

from ultimat3.core import (
    Duration,
    XError,
    current_clock,
    dumps_json,
    log_event,
    meter,
    parse_duration,
    sign_webhook,
)
from ultimat3.jobs import Job, JobContext, Retry, Step, job

from .webhook_ledger import (
    MemoryWebhookLedger,
    Outcome,
    PostgresWebhookLedger,
    WebhookAttempt,
    WebhookLedger,
    memory_webhook_ledger,
    postgres_webhook_ledger,
)

if TYPE_CHECKING:
    import httpx
    from opentelemetry.metrics import Counter

DEFAULT_WEBHOOK_DISABLE_AFTER: Final = 10
USER_AGENT: Final = "ultimat3-webhooks/0.1"
REQUEST_SHARE: Final = 0.9
"""The share of the job's timeout the request may take; the rest records the attempt."""
Signature = Literal["ultimat3", "standard-webhooks"]
_MISSING: Any = None  # a required field left out reads as None: refused like None
_HANDED_BACK: Final = frozenset({"X_DRAINING", "X_JOB_LEASE_LOST", "X_JOB_SLOT_LOST"})


_attempts_counter: Counter | None = None


def webhook_attempts_counter() -> Counter:
    """``webhook_attempts_total{webhook, outcome}``: delivery attempts, by outcome."""
    global _attempts_counter
    if _attempts_counter is None:
        _attempts_counter = meter().create_counter(
            "webhook_attempts_total", description="webhook delivery attempts, by outcome"
        )
    return _attempts_counter


class WebhookDelivery(BaseModel):
    """The input of a ``webhook()`` job: which event goes to which endpoint (ids only)."""

    model_config = ConfigDict(frozen=True)

    endpoint_id: str
    event_id: str
    org_id: str | None = None


@dataclass(frozen=True, slots=True)
class WebhookEndpoint:
    """Where a delivery goes, read per attempt."""

    id: str
    url: str
    secret: str
    enabled: bool = True


@dataclass(frozen=True, slots=True)
class WebhookEvent:
    """What is delivered, read per attempt: ``body`` is JSON-able, ``str`` or ``bytes``."""

    id: str
    topic: str
    body: Any


def _http() -> Any:
    try:
        return importlib.import_module("ultimat3.http")
    except ImportError as exc:
        raise XError(
            "X_CONFIG_INVALID",
            "webhook() needs ultimat3-http, which is not installed",
            fix='pip install "ultimat3-jobs[http]"',
        ) from exc


async def _maybe(value: Any) -> Any:
    return await value if inspect.isawaitable(value) else value


def _body_of(event: WebhookEvent) -> tuple[bytes, str]:
    body = event.body
    if isinstance(body, bytes | bytearray | memoryview):
        return bytes(body), "application/octet-stream"
    if isinstance(body, str):
        return body.encode(), "text/plain; charset=utf-8"
    try:
        return dumps_json(body).encode(), "application/json"
    except XError as exc:
        raise XError(
            "X_WEBHOOK_EVENT_INVALID",
            f"webhook event {event.id!r}: the body is not JSON-able ({type(body).__name__})",
            fix="answer a WebhookEvent whose body is JSON-able, a str or bytes",
            meta={"event_id": event.id},
        ) from exc


def _bad_url(exc: Exception) -> bool:
    import httpx  # installed with ultimat3-http, which the declaration checked

    return isinstance(exc, httpx.InvalidURL | httpx.UnsupportedProtocol)


def retry_after_seconds(value: str | None, *, now: float | None = None) -> float | None:
    """A Retry-After header's seconds (delta-seconds or an HTTP date), ``None`` if unreadable."""
    if value is None:
        return None
    text = value.strip()
    if text.isdigit():
        return float(int(text))
    try:
        when = email.utils.parsedate_to_datetime(text)
    except (TypeError, ValueError):
        return None
    if when.tzinfo is None:
        when = when.replace(tzinfo=UTC)
    wait = when.timestamp() - (time.time() if now is None else now)
    return max(0.0, math.ceil(wait))


class _Deliverer:
    """The body of one ``webhook()`` job (one per declaration; one httpx client per loop)."""

    def __init__(
        self,
        *,
        name: str,
        endpoint: Callable[[WebhookDelivery], Any],
        event: Callable[[WebhookDelivery], Any],
        ledger: WebhookLedger,
        disable_after: int,
        allow_private: bool,
        timeout_ms: int,
        signature: Signature,
        tenant: Any,
        client: Callable[[], httpx.AsyncClient] | None,
    ) -> None:
        self.name = name
        self.endpoint = endpoint
        self.event = event
        self.ledger = ledger
        self.disable_after = disable_after
        self.allow_private = allow_private
        self.timeout_ms = timeout_ms
        self.signature = signature
        self.tenant = tenant
        self._client_factory = client

    @contextlib.asynccontextmanager
    async def client(self) -> AsyncIterator[httpx.AsyncClient]:
        """The app's client (never closed here) or a guarded one for this attempt."""
        if self._client_factory is not None:
            yield self._client_factory()
            return
        made: httpx.AsyncClient = _http().safe_client(
            allow_private=self.allow_private,
            timeout=self.timeout_ms * REQUEST_SHARE / 1000,
            headers={"user-agent": USER_AGENT},
        )
        async with made:
            yield made

    def _check_tenant(self, delivery: WebhookDelivery, ctx: JobContext) -> None:
        if self.tenant == "none":
            return
        declared = self.tenant(delivery)
        declared = None if declared is None else str(declared)
        if declared is None or ctx.tenant_id != declared:
            raise XError(
                "X_JOB_TENANT_MISMATCH",
                f"webhook {self.name!r}: the delivery names org {declared!r} but the run's org "
                f"is {ctx.tenant_id!r}",
                fix="enqueue every delivery with its endpoint's org_id (tenant=lambda d: "
                "d.org_id needs it on every enqueue)",
                meta={"job": self.name, "tenant": declared, "run_tenant": ctx.tenant_id},
            )

    async def __call__(self, delivery: WebhookDelivery, step: Step, ctx: JobContext) -> Any:
        self._check_tenant(delivery, ctx)
        endpoint = await _maybe(self.endpoint(delivery))
        if endpoint is None:
            raise XError(
                "X_WEBHOOK_ENDPOINT_UNKNOWN",
                f"webhook {self.name!r}: no endpoint {delivery.endpoint_id!r}",
                meta={"endpoint_id": delivery.endpoint_id},
            )
        event = await _maybe(self.event(delivery))
        if event is None:
            raise XError(
                "X_WEBHOOK_EVENT_UNKNOWN",
                f"webhook {self.name!r}: no event {delivery.event_id!r}",
                meta={"event_id": delivery.event_id},
            )
        if not endpoint.enabled:
            await self._record(delivery, ctx, None, "refused", "X_WEBHOOK_ENDPOINT_DISABLED", 0)
            raise XError(
                "X_WEBHOOK_ENDPOINT_DISABLED",
                f"webhook {self.name!r}: endpoint {endpoint.id!r} is disabled; nothing was sent",
                meta={"endpoint_id": endpoint.id},
            )
        body, content_type = _body_of(event)
        started = time.monotonic()
        status: int | None = None
        try:
            self._check_url(endpoint)
            headers = self._headers(endpoint, event, body, content_type)
            response = await self._post(endpoint.url, body, headers, ctx)
            status = response.status_code
            outcome, error = self._verdict(response, endpoint)
        except XError as exc:
            if exc.code in _HANDED_BACK:
                raise
            # only a delivery that failed on the way is the endpoint's failure; the rest (the
            # guard, a secret or an event that cannot be signed) sent nothing
            outcome = "failed" if exc.code == "X_WEBHOOK_DELIVERY_FAILED" else "refused"
            error = exc
        except Exception as exc:  # httpx's timeouts and network errors, or a URL it cannot read
            if _bad_url(exc):
                outcome = "refused"
                error = XError(
                    "X_WEBHOOK_ENDPOINT_INVALID",
                    f"webhook {self.name!r}: endpoint {endpoint.id!r} has a URL httpx cannot "
                    f"send to ({type(exc).__name__})",
                    fix="give the endpoint an absolute https:// URL",
                    meta={"endpoint_id": endpoint.id},
                )
                error.__cause__ = exc
            else:
                outcome = "failed"
                error = XError(
                    "X_WEBHOOK_DELIVERY_FAILED",
                    f"webhook {self.name!r}: delivery to endpoint {endpoint.id!r} failed: "
                    f"{type(exc).__name__}",
                    meta={"endpoint_id": endpoint.id, "error_type": type(exc).__name__},
                )
                error.__cause__ = exc
        duration_ms = int((time.monotonic() - started) * 1000)
        await self._record(
            delivery, ctx, status, outcome, error.code if error else None, duration_ms
        )
        webhook_attempts_counter().add(1, {"webhook": self.name, "outcome": outcome})
        ctx.log.info(
            "jobs.webhook.attempt",
            endpoint_id=endpoint.id,
            event_id=event.id,
            status=status,
            outcome=outcome,
            duration_ms=duration_ms,
        )
        if error is None:
            return {"status": status, "duration_ms": duration_ms}
        if outcome in ("failed", "rejected"):
            streak = await self.ledger.failures_in_a_row(endpoint.id)
            if streak >= self.disable_after:
                await self.ledger.disable(endpoint.id)
                ctx.log.warning("jobs.webhook.disabled", endpoint_id=endpoint.id, failures=streak)
                raise XError(
                    "X_WEBHOOK_ENDPOINT_DISABLED",
                    f"webhook {self.name!r}: endpoint {endpoint.id!r} failed {streak} attempts "
                    "in a row and is now disabled",
                    meta={"endpoint_id": endpoint.id, "failures": streak, "last": error.code},
                ) from error
        raise error

    def _check_url(self, endpoint: WebhookEndpoint) -> None:
        url = endpoint.url
        scheme = url.split(":", 1)[0].lower() if ":" in url else ""
        allowed = ("http", "https") if self.allow_private else ("https",)
        if scheme not in allowed:
            raise XError(
                "X_WEBHOOK_ENDPOINT_INVALID",
                f"webhook {self.name!r}: endpoint {endpoint.id!r} is not an https:// URL",
                fix="give the endpoint an https:// URL (http:// only with allow_private=True)",
                meta={"endpoint_id": endpoint.id},
            )

    def _headers(
        self, endpoint: WebhookEndpoint, event: WebhookEvent, body: bytes, content_type: str
    ) -> dict[str, str]:
        if not isinstance(endpoint.secret, str) or not endpoint.secret:
            raise XError(
                "X_WEBHOOK_ENDPOINT_INVALID",
                f"webhook {self.name!r}: endpoint {endpoint.id!r} has an empty secret",
                meta={"endpoint_id": endpoint.id},
            )
        timestamp = int(time.time())
        try:
            headers = sign_webhook(
                secret=endpoint.secret,
                event_id=event.id,
                topic=event.topic,
                body=body,
                timestamp=timestamp,
            )
        except XError as exc:
            raise XError(
                "X_WEBHOOK_EVENT_INVALID",
                f"webhook {self.name!r}: event {event.id!r} cannot be signed: {exc.message}",
                fix="give events an id of 1-256 printable ASCII characters without ':' or "
                "spaces, and a non-empty topic",
                meta={"event_id": event.id, "cause": exc.code},
            ) from exc
        if self.signature == "standard-webhooks":
            try:
                headers.update(
                    _http().sign_standard_webhook(
                        secret=endpoint.secret,
                        msg_id=event.id,
                        body=body,
                        timestamp=timestamp,
                    )
                )
            except XError as exc:
                raise XError(
                    "X_WEBHOOK_ENDPOINT_INVALID",
                    f"webhook {self.name!r}: endpoint {endpoint.id!r}: {exc.message}",
                    fix="give Standard Webhooks endpoints a 'whsec_<base64>' secret",
                    meta={"endpoint_id": endpoint.id},
                ) from exc
        headers["content-type"] = content_type
        return headers

    async def _post(
        self, url: str, body: bytes, headers: dict[str, str], ctx: JobContext
    ) -> httpx.Response:
        """The request, cut at 90% of the job's timeout (so the attempt still records its row
        before the deadline) or when the run's signal aborts, whichever comes first."""
        async with self.client() as client:
            return await self._race(client, url, body, headers, ctx)

    async def _race(
        self,
        client: httpx.AsyncClient,
        url: str,
        body: bytes,
        headers: dict[str, str],
        ctx: JobContext,
    ) -> httpx.Response:
        request = asyncio.ensure_future(
            client.post(url, content=body, headers=headers, follow_redirects=False)
        )
        aborted = asyncio.ensure_future(ctx.signal.wait())
        try:
            await asyncio.wait(
                {request, aborted},
                timeout=self.timeout_ms * REQUEST_SHARE / 1000,
                return_when=asyncio.FIRST_COMPLETED,
            )
        finally:
            aborted.cancel()
        if not request.done():
            request.cancel()
            with contextlib.suppress(BaseException):
                await request
            reason = ctx.signal.reason
            if reason is not None and reason.code in _HANDED_BACK:
                raise reason  # a drain or a lost lease: not the endpoint's failure, no row
            raise XError(
                "X_WEBHOOK_DELIVERY_FAILED",
                "webhook: the request was cut by the attempt's deadline"
                + (f" ({reason.code})" if reason is not None else ""),
                meta={"timeout_ms": self.timeout_ms},
            )
        return request.result()

    def _verdict(
        self, response: httpx.Response, endpoint: WebhookEndpoint
    ) -> tuple[Outcome, XError | None]:
        status = response.status_code
        meta: dict[str, Any] = {"endpoint_id": endpoint.id, "status": status}
        if 200 <= status < 300:
            return "delivered", None
        if status in (429, 503):
            wait = retry_after_seconds(response.headers.get("retry-after"))
            if wait is not None:
                return "throttled", XError(
                    "X_WEBHOOK_DELIVERY_THROTTLED",
                    f"webhook {self.name!r}: endpoint {endpoint.id!r} answered {status} with "
                    f"Retry-After {wait:g}s",
                    meta={**meta, "retry_after_seconds": wait},
                )
        if status >= 500 or status == 429:
            return "failed", XError(
                "X_WEBHOOK_DELIVERY_FAILED",
                f"webhook {self.name!r}: endpoint {endpoint.id!r} answered {status}",
                meta=meta,
            )
        return "rejected", XError(
            "X_WEBHOOK_DELIVERY_REJECTED",
            f"webhook {self.name!r}: endpoint {endpoint.id!r} answered {status}",
            meta=meta,
        )

    async def _record(
        self,
        delivery: WebhookDelivery,
        ctx: JobContext,
        status: int | None,
        outcome: Outcome,
        code: str | None,
        duration_ms: int,
    ) -> None:
        try:
            at = ctx.clock.now()
        except Exception:
            at = current_clock().now()
        await self.ledger.record(
            WebhookAttempt(
                endpoint_id=delivery.endpoint_id,
                event_id=delivery.event_id,
                attempt=ctx.attempt,
                status=status,
                outcome=outcome,
                code=code,
                duration_ms=duration_ms,
                at=at if at.tzinfo is not None else at.replace(tzinfo=UTC),
            )
        )


def _invalid(name: object, cause: str, fix: str) -> XError:
    label = f"webhook {name!r}" if isinstance(name, str) and name else "webhook()"
    return XError(
        "X_JOB_DECLARATION_INVALID",
        f"{label} is invalid: {cause}",
        fix=fix,
        meta={"job": name if isinstance(name, str) else None, "causes": [cause]},
    )


def webhook(
    *,
    name: str = _MISSING,
    tenant: Callable[[WebhookDelivery], str] | Literal["none"] = _MISSING,
    endpoint: Callable[[WebhookDelivery], WebhookEndpoint | Awaitable[Any] | None] = _MISSING,
    event: Callable[[WebhookDelivery], WebhookEvent | Awaitable[Any] | None] = _MISSING,
    ledger: WebhookLedger = _MISSING,
    disable_after: int = DEFAULT_WEBHOOK_DISABLE_AFTER,
    allow_private: bool = False,
    signature: Signature = "ultimat3",
    retry: Retry | None = None,
    queue: str | None = None,
    timeout: Duration = "30s",
    client: Callable[[], httpx.AsyncClient] | None = None,
) -> Job[WebhookDelivery, Any]:
    """Declare the job that delivers one event to one endpoint; enqueue
    ``WebhookDelivery(endpoint_id=..., event_id=..., org_id=...)`` per subscriber.

    Each attempt opens its own guarded client and closes it. ``client`` (a zero-argument
    function answering an ``httpx.AsyncClient`` the app owns and closes) replaces that: a
    long-lived ``ultimat3.http.safe_client()`` keeps connections alive across deliveries. The
    address guard is then whatever that client does."""
    _http()  # the extra is there, or X_CONFIG_INVALID now rather than on the first attempt
    if not isinstance(name, str) or not name.strip():
        raise _invalid(name, "name is missing or blank", "name='partner.webhooks' (a queue key)")
    if tenant is _MISSING:
        raise _invalid(name, "tenant is missing", "tenant='none', or tenant=lambda d: d.org_id")
    for label, fn in (("endpoint", endpoint), ("event", event)):
        if not callable(fn):
            raise _invalid(
                name,
                f"{label} is a {type(fn).__name__}, not a function of the delivery",
                f"{label}=lambda d: ... reading it by d.{label}_id",
            )
    if not isinstance(ledger, WebhookLedger):
        raise _invalid(
            name,
            f"ledger {type(ledger).__name__} has no record / failures_in_a_row / disable",
            "ledger=memory_webhook_ledger() in dev, postgres_webhook_ledger(dsn) in production",
        )
    if isinstance(disable_after, bool) or not isinstance(disable_after, int) or disable_after < 1:
        raise _invalid(name, f"disable_after {disable_after!r} is not an int >= 1", "10")
    if not isinstance(allow_private, bool):
        raise _invalid(name, f"allow_private {allow_private!r} is not a bool", "True or False")
    if signature not in ("ultimat3", "standard-webhooks"):
        raise _invalid(
            name,
            f"signature {signature!r} is not 'ultimat3' or 'standard-webhooks'",
            "signature='standard-webhooks' adds the Standard Webhooks headers",
        )
    timeout_ms = parse_duration(timeout, name="timeout")
    body = _Deliverer(
        name=name,
        endpoint=endpoint,
        event=event,
        ledger=ledger,
        disable_after=disable_after,
        allow_private=allow_private,
        timeout_ms=timeout_ms,
        signature=signature,
        tenant=tenant,
        client=client,
    )
    handle: Job[WebhookDelivery, Any] = job(
        name=name,
        input=WebhookDelivery,
        idempotency_key=lambda d: f"webhook:{name}:{d.endpoint_id}:{d.event_id}",
        tenant=tenant,
        queue=queue or "default",
        retry=retry,
        timeout=timeout_ms,
        run=body,
    )
    log_event("jobs.webhook.declared", level="debug", job=name)
    return handle


__all__ = [
    "DEFAULT_WEBHOOK_DISABLE_AFTER",
    "MemoryWebhookLedger",
    "PostgresWebhookLedger",
    "WebhookAttempt",
    "WebhookDelivery",
    "WebhookEndpoint",
    "WebhookEvent",
    "WebhookLedger",
    "memory_webhook_ledger",
    "postgres_webhook_ledger",
    "webhook",
]
