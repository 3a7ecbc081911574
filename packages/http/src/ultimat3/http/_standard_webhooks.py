"""Signing in the Standard Webhooks format (``webhook-id``, ``webhook-timestamp``,
``webhook-signature: v1,<base64 hmac-sha256 of "<id>.<timestamp>.<body>">``).

The secret is the format's own: ``whsec_`` then base64 (the prefix optional), as every Standard
Webhooks verifier reads it."""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
import time

from ultimat3.core import XError

STANDARD_WEBHOOK_ID_HEADER = "webhook-id"
STANDARD_WEBHOOK_TIMESTAMP_HEADER = "webhook-timestamp"
STANDARD_WEBHOOK_SIGNATURE_HEADER = "webhook-signature"


def standard_webhook_key(secret: str) -> bytes:
    """The HMAC key a ``whsec_<base64>`` secret stands for; ``X_CONFIG_INVALID`` otherwise."""
    text = secret.removeprefix("whsec_") if isinstance(secret, str) else ""
    try:
        key = base64.b64decode(text + "=" * (-len(text) % 4), validate=True)
    except (binascii.Error, ValueError):
        key = b""
    if not key:
        raise XError(
            "X_CONFIG_INVALID",
            "the Standard Webhooks secret is not 'whsec_' followed by base64",
            fix="generate one as 'whsec_' + base64.b64encode(os.urandom(24)).decode()",
        )
    return key


def sign_standard_webhook(
    *, secret: str, msg_id: str, body: bytes | str, timestamp: int | None = None
) -> dict[str, str]:
    """The three Standard Webhooks headers that sign ``body`` as message ``msg_id``."""
    key = standard_webhook_key(secret)
    t = int(time.time()) if timestamp is None else timestamp
    data = body.encode() if isinstance(body, str) else bytes(body)
    mac = hmac.new(key, b"%s.%d." % (msg_id.encode(), t) + data, hashlib.sha256).digest()
    return {
        STANDARD_WEBHOOK_ID_HEADER: msg_id,
        STANDARD_WEBHOOK_TIMESTAMP_HEADER: str(t),
        STANDARD_WEBHOOK_SIGNATURE_HEADER: "v1," + base64.b64encode(mac).decode(),
    }
