"""The webhook signature format: ``t=<seconds>,v1=<hex hmac-sha256>``, with secret rotation."""

from __future__ import annotations

import hashlib
import hmac
import re
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from ._errors import XError

WEBHOOK_SIGNATURE_HEADER = "x-ultimate-webhook-signature"
WEBHOOK_ID_HEADER = "x-ultimate-webhook-id"
WEBHOOK_TOPIC_HEADER = "x-ultimate-webhook-topic"
DEFAULT_WEBHOOK_TOLERANCE_SECONDS = 300

_EVENT_ID_RE = re.compile(r"[\x21-\x39\x3b-\x7e]{1,256}")  # printable ASCII, no space, no ':'
_HEX64 = re.compile(r"[0-9a-f]{64}")
_SIGN_FIX = (
    "sign with sign_webhook(secret=..., event_id=..., topic=..., body=...) and send the three "
    "headers it returns with the body byte for byte"
)


@dataclass(frozen=True, slots=True)
class VerifiedWebhook:
    """What a valid signature vouches for."""

    event_id: str
    topic: str
    timestamp: int


def _secrets(secret: str | Sequence[str]) -> list[bytes]:
    items = [secret] if isinstance(secret, str) else list(secret)
    if not items:
        raise XError(
            "X_CONFIG_INVALID",
            "the webhook secret list is empty",
            fix="pass the shared secret, or [new_secret, old_secret] while rotating",
        )
    for i, item in enumerate(items):
        if not isinstance(item, str) or not item:
            where = "the webhook secret" if isinstance(secret, str) else f"webhook secret [{i}]"
            raise XError(
                "X_CONFIG_INVALID",
                f"{where} is empty or not a str",
                fix="set the shared secret (read it from the environment at the app's edge)",
            )
    return [item.encode() for item in items]


def _check_event_id(event_id: object) -> str:
    if not isinstance(event_id, str) or not _EVENT_ID_RE.fullmatch(event_id):
        raise XError(
            "X_WEBHOOK_EVENT_ID_INVALID",
            f"the {WEBHOOK_ID_HEADER} header is not 1-256 printable ASCII characters "
            "without spaces or ':'",
        )
    return event_id


def _mac(secret: bytes, t: int, event_id: str, topic: str, body: bytes) -> str:
    message = b"v1:%d:%s:%s:" % (t, event_id.encode(), topic.encode()) + body
    return hmac.new(secret, message, hashlib.sha256).hexdigest()


def _body(body: bytes | str) -> bytes:
    return body.encode() if isinstance(body, str) else bytes(body)


def sign_webhook(
    *,
    secret: str,
    event_id: str,
    topic: str,
    body: bytes | str,
    timestamp: int | None = None,
) -> dict[str, str]:
    """The three headers that sign ``body`` for ``event_id`` and ``topic``."""
    (key,) = _secrets(secret) if isinstance(secret, str) else _secrets([secret])
    _check_event_id(event_id)
    if not isinstance(topic, str) or not topic:
        raise XError(
            "X_INVARIANT", f"sign_webhook: topic {topic!r} must be a non-empty str", fix=_SIGN_FIX
        )
    t = int(time.time()) if timestamp is None else timestamp
    signature = _mac(key, t, event_id, topic, _body(body))
    return {
        WEBHOOK_SIGNATURE_HEADER: f"t={t},v1={signature}",
        WEBHOOK_ID_HEADER: event_id,
        WEBHOOK_TOPIC_HEADER: topic,
    }


def _invalid(why: str) -> XError:
    return XError("X_WEBHOOK_SIGNATURE_INVALID", f"webhook signature refused: {why}", fix=_SIGN_FIX)


def verify_webhook_signature(
    headers: Mapping[str, str],
    body: bytes | str,
    *,
    secret: str | Sequence[str],
    tolerance_seconds: int = DEFAULT_WEBHOOK_TOLERANCE_SECONDS,
    now: int | None = None,
) -> VerifiedWebhook:
    """Check the signature headers against ``body`` and every secret; answer what they vouch."""
    keys = _secrets(secret)
    lower = {str(k).lower(): v for k, v in headers.items()}
    header = lower.get(WEBHOOK_SIGNATURE_HEADER)
    if not header:
        raise _invalid(f"the {WEBHOOK_SIGNATURE_HEADER} header is missing")
    event_id = lower.get(WEBHOOK_ID_HEADER)
    if not event_id:
        raise _invalid(f"the {WEBHOOK_ID_HEADER} header is missing")
    topic = lower.get(WEBHOOK_TOPIC_HEADER)
    if not topic:
        raise _invalid(f"the {WEBHOOK_TOPIC_HEADER} header is missing")
    t: int | None = None
    candidates: list[str] = []
    for part in header.split(","):
        name, sep, value = part.strip().partition("=")
        if not sep:
            raise _invalid(f"the {WEBHOOK_SIGNATURE_HEADER} header is malformed")
        if name == "t":
            if t is not None or not value.isascii() or not value.isdigit() or len(value) > 12:
                raise _invalid(f"the {WEBHOOK_SIGNATURE_HEADER} header has a bad t=")
            t = int(value)
        elif name == "v1":
            candidates.append(value)
    if t is None:
        raise _invalid(f"the {WEBHOOK_SIGNATURE_HEADER} header has no t=")
    if not candidates:
        raise _invalid(f"the {WEBHOOK_SIGNATURE_HEADER} header has no v1=")
    _check_event_id(event_id)
    payload = _body(body)
    expected = [_mac(key, t, event_id, topic, payload) for key in keys]
    matched = False
    for candidate in candidates:
        given = candidate.encode() if _HEX64.fullmatch(candidate) else b"0" * 64
        for mac in expected:
            matched |= hmac.compare_digest(given, mac.encode())
    if not matched:
        raise _invalid(f"the {WEBHOOK_SIGNATURE_HEADER} header matches no secret")
    current = int(time.time()) if now is None else now
    if abs(current - t) > tolerance_seconds:
        raise XError(
            "X_WEBHOOK_SIGNATURE_STALE",
            f"webhook signature refused: t={t} is {current - t}s from now, outside the "
            f"tolerance of {tolerance_seconds}s",
            meta={"timestamp": t, "tolerance_seconds": tolerance_seconds},
        )
    return VerifiedWebhook(event_id=event_id, topic=topic, timestamp=t)
