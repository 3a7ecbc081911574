"""``webhook_receiver()``: a vendor's webhook, received as a job.

The route (``ultimat3.http.webhook_app``) reads the exact bytes, asks ``verify``, enqueues the
payload verify read out of them under the idempotency key ``webhook-receiver:<name>:<event_id>``
and only then answers 200 ``{"ok": true, "event_id", "deduped"}``. ``handle`` runs as the job's
body with that payload: it never re-verifies, so a retry past the vendor's signature window is not
refused. A redelivery while the job is live is ``deduped: true``.

Needs ``ultimat3-http`` (``pip install "ultimat3-jobs[http]"``), imported on first declaration.
"""

from __future__ import annotations

import importlib
import inspect
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Final, Literal

from pydantic import BaseModel, ConfigDict, Field

from ultimat3.core import Duration, XError
from ultimat3.jobs import (
    MAX_INPUT_BYTES,
    MAX_INPUT_BYTES_CEILING,
    Job,
    JobContext,
    Retry,
    Step,
    job,
)

DEFAULT_WEBHOOK_BODY_LIMIT: Final = 1_048_576
_MISSING: Any = None  # a required field left out reads as None: refused like None


class ReceivedWebhook(BaseModel):
    """The input a receiver's job is queued with: the verified event id and its payload.

    The payload is marked ``x-sensitive`` in the job's input schema (``describe()``)."""

    model_config = ConfigDict(frozen=True)

    event_id: str
    payload: Any = Field(default=None, json_schema_extra={"x-sensitive": True})


@dataclass(frozen=True, slots=True)
class ReceiverDelivery:
    """What ``handle`` receives: the event, and the run's ``step`` and ``ctx``."""

    event_id: str
    payload: Any
    step: Step
    ctx: JobContext


def _http() -> Any:
    try:
        return importlib.import_module("ultimat3.http")
    except ImportError as exc:
        raise XError(
            "X_CONFIG_INVALID",
            "webhook_receiver() needs ultimat3-http, which is not installed",
            fix='pip install "ultimat3-jobs[http]"',
        ) from exc


def _is_fn(value: object) -> bool:
    return callable(value)


def _invalid(name: object, causes: list[str]) -> XError:
    label = f"webhook_receiver {name!r}" if isinstance(name, str) and name else "webhook_receiver()"
    return XError(
        "X_WEBHOOK_RECEIVER_INVALID",
        f"{label} is invalid: " + "; ".join(causes),
        meta={"job": name if isinstance(name, str) else None, "causes": causes},
    )


def webhook_receiver(
    *,
    name: str = _MISSING,
    path: str = _MISSING,
    tenant: Callable[[ReceivedWebhook], str] | Literal["none"] = _MISSING,
    verify: Callable[[Any], Any] = _MISSING,
    handle: Callable[[ReceiverDelivery], Any] = _MISSING,
    handshake: Callable[[Any], Any] | None = None,
    max_bytes: int = DEFAULT_WEBHOOK_BODY_LIMIT,
    rate_limit: Any = None,
    retry: Retry | None = None,
    queue: str | None = None,
    timeout: Duration | None = None,
) -> Job[ReceivedWebhook, Any]:
    """Declare a receiver: the job (``handle`` as its body) and, on ``.webhook_route``, the route
    ``ultimat3.http.webhook_app(*receivers)`` serves at ``path``. ``rate_limit`` (an
    ``ultimat3.http.rate_limiter()``) is spent once per request before the body is read.
    Every refusal (a missing field included) is one ``X_WEBHOOK_RECEIVER_INVALID`` naming all."""
    http = _http()
    causes: list[str] = []
    if tenant is _MISSING:
        causes.append("tenant is missing (tenant='none', or a function of the input)")
    if path is _MISSING:
        causes.append("path is missing (path='/hooks/<vendor>')")
    if not isinstance(name, str) or not name.strip():
        causes.append("name is missing or blank (it is the queue key: name='billing.events')")
    problem = http.path_problem(path) if path is not _MISSING else None
    if problem is not None:
        causes.append(problem)
    if not _is_fn(verify):
        causes.append("verify is missing or not a function of the inbound request")
    if not _is_fn(handle):
        causes.append("handle is missing or not a function of the delivery")
    if handshake is not None and not _is_fn(handshake):
        causes.append(f"handshake is a {type(handshake).__name__}, not a function")
    if isinstance(max_bytes, bool) or not isinstance(max_bytes, int) or max_bytes < 1:
        causes.append(f"max_bytes {max_bytes!r} is not an int >= 1")
    if rate_limit is not None and not _is_fn(getattr(rate_limit, "hit", None)):
        causes.append(f"rate_limit is a {type(rate_limit).__name__}, not a rate_limiter()")
    if causes:
        raise _invalid(name, causes)

    async def body(received: ReceivedWebhook, step: Step, ctx: JobContext) -> Any:
        result = handle(
            ReceiverDelivery(
                event_id=received.event_id, payload=received.payload, step=step, ctx=ctx
            )
        )
        return await result if inspect.isawaitable(result) else result

    handle_job: Job[ReceivedWebhook, Any] = job(
        name=name,
        input=ReceivedWebhook,
        idempotency_key=lambda r: f"webhook-receiver:{name}:{r.event_id}",
        tenant=tenant,
        queue=queue or "default",
        retry=retry,
        timeout=timeout,
        # the queued input is the payload verify read from at most max_bytes of body; its JSON
        # form may be larger (escapes), so the job's input cap follows the body's, never below
        # the engine's default
        max_input_bytes=_input_cap(max_bytes),
        run=body,
    )

    async def accept(event_id: str, payload: Any) -> bool:
        result = await handle_job.enqueue(ReceivedWebhook(event_id=event_id, payload=payload))
        return bool(result.deduped)

    route = http.WebhookRoute(
        name=name,
        path=path,
        verify=verify,
        accept=accept,
        handshake=handshake,
        max_bytes=max_bytes,
        rate_limit=rate_limit,
    )
    handle_job.webhook_route = route  # type: ignore[attr-defined]  # what webhook_app() serves
    return handle_job


__all__ = ["DEFAULT_WEBHOOK_BODY_LIMIT", "ReceivedWebhook", "ReceiverDelivery", "webhook_receiver"]


def _input_cap(max_bytes: int) -> int:
    """The receiver job's ``max_input_bytes`` for a body cap of ``max_bytes``: room for the
    payload's JSON form (escaping can grow text up to 6x; a JSON body re-serialised is about its
    own size), at least the engine's default and at most its ceiling."""
    return min(max(MAX_INPUT_BYTES, 2 * max_bytes + 65_536), MAX_INPUT_BYTES_CEILING)
