"""``verify_body_hmac``: a vendor's HMAC over the exact body bytes, with secret rotation."""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal

from ultimat3.core import XError

Encoding = Literal["hex", "base64"]
_ALGORITHMS = {"sha256": hashlib.sha256, "sha1": hashlib.sha1, "sha512": hashlib.sha512}


@dataclass(frozen=True, slots=True)
class VerifiedBody:
    """What a valid mac vouches for: the exact ``body`` and its UTF-8 ``text`` (``None`` when
    the bytes are not UTF-8). Read the event id from here, never from an unsigned header."""

    text: str | None
    body: bytes


def _keys(secret: str | Sequence[str]) -> list[bytes]:
    items = [secret] if isinstance(secret, str) else list(secret)
    if not items:
        raise XError(
            "X_CONFIG_INVALID",
            "verify_body_hmac: the secret list is empty",
            fix="pass the vendor's signing secret, or [new_secret, old_secret] while rotating",
        )
    for i, item in enumerate(items):
        if not isinstance(item, str) or not item:
            where = "the secret" if isinstance(secret, str) else f"secret [{i}]"
            raise XError(
                "X_CONFIG_INVALID",
                f"verify_body_hmac: {where} is empty or not a str",
                fix="set the signing secret (read it from the environment at the app's edge); "
                "an unset variable read as '' is refused rather than matching an empty key",
            )
    return [item.encode() for item in items]


def _invalid(why: str) -> XError:
    return XError(
        "X_WEBHOOK_SIGNATURE_INVALID",
        f"webhook signature refused: {why}",
        fix="check the signing secret and that the body is read byte for byte",
    )


def verify_body_hmac(
    *,
    body: bytes,
    secret: str | Sequence[str],
    given: str | None,
    encoding: Encoding = "hex",
    prefix: str = "",
    algorithm: Literal["sha256", "sha1", "sha512"] = "sha256",
) -> VerifiedBody:
    """Check ``given`` (the signature header's value, ``prefix`` first) against the HMAC of
    ``body`` under every secret, in constant time; ``X_WEBHOOK_SIGNATURE_INVALID`` otherwise."""
    keys = _keys(secret)
    if encoding not in ("hex", "base64"):
        raise XError(
            "X_CONFIG_INVALID",
            f"verify_body_hmac: encoding {encoding!r} is not 'hex' or 'base64'",
            fix="encoding='hex' or encoding='base64', as the vendor documents",
        )
    digest = _ALGORITHMS.get(algorithm)
    if digest is None:
        raise XError(
            "X_CONFIG_INVALID",
            f"verify_body_hmac: algorithm {algorithm!r} is not one of {sorted(_ALGORITHMS)}",
            fix="algorithm='sha256' (the default) unless the vendor documents another",
        )
    if not given:
        raise _invalid("the signature is missing")
    if not given.startswith(prefix):
        raise _invalid(f"the signature does not start with {prefix!r}")
    text = given[len(prefix) :].strip()
    try:
        mac = bytes.fromhex(text) if encoding == "hex" else base64.b64decode(text, validate=True)
    except (ValueError, binascii.Error):
        mac = b""
    data = bytes(body)
    matched = False
    for key in keys:  # every key, whatever matched first: the time does not tell which one
        expected = hmac.new(key, data, digest).digest()
        matched |= hmac.compare_digest(mac, expected)
    if not matched:
        raise _invalid("the signature matches no secret")
    try:
        decoded: str | None = data.decode("utf-8")
    except UnicodeDecodeError:
        decoded = None
    return VerifiedBody(text=decoded, body=data)
