"""``verify_body_hmac``: rotation, encodings, prefixes, refusals; constant-time by construction."""

from __future__ import annotations

import base64
import hashlib
import hmac

import pytest
from hypothesis import given
from hypothesis import strategies as st

from ultimat3.core import XError
from ultimat3.http import verify_body_hmac


def mac(secret: str, body: bytes) -> bytes:
    return hmac.new(secret.encode(), body, hashlib.sha256).digest()


@given(st.binary(max_size=512), st.text(min_size=1, max_size=40))
def test_a_hex_mac_under_the_secret_verifies_and_any_flipped_byte_does_not(
    body: bytes, secret: str
) -> None:
    given_ = "sha256=" + mac(secret, body).hex()
    out = verify_body_hmac(body=body, secret=secret, given=given_, prefix="sha256=")
    assert out.body == body
    tampered = body + b"!"
    with pytest.raises(XError) as info:
        verify_body_hmac(body=tampered, secret=secret, given=given_, prefix="sha256=")
    assert info.value.code == "X_WEBHOOK_SIGNATURE_INVALID"


def test_rotation_accepts_the_old_secret_and_base64() -> None:
    body = b'{"id":"evt_1"}'
    given_ = base64.b64encode(mac("old", body)).decode()
    out = verify_body_hmac(body=body, secret=["new", "old"], given=given_, encoding="base64")
    assert out.text == '{"id":"evt_1"}'
    with pytest.raises(XError) as info:
        verify_body_hmac(body=body, secret=["new"], given=given_, encoding="base64")
    assert info.value.code == "X_WEBHOOK_SIGNATURE_INVALID"


def test_text_is_none_for_bytes_that_are_not_utf8() -> None:
    body = b"\xff\xfe"
    out = verify_body_hmac(body=body, secret="s", given=mac("s", body).hex())
    assert out.text is None and out.body == body


@pytest.mark.parametrize("given_", [None, "", "sha1=abc", "sha256=zz", "sha256=" + "0" * 64])
def test_a_missing_malformed_or_wrong_signature_is_refused(given_: str | None) -> None:
    with pytest.raises(XError) as info:
        verify_body_hmac(body=b"x", secret="s", given=given_, prefix="sha256=")
    assert info.value.code == "X_WEBHOOK_SIGNATURE_INVALID"


@pytest.mark.parametrize("secret", ["", [], ["ok", ""], [""]])
def test_an_empty_secret_or_an_empty_rotation_entry_is_a_config_error(
    secret: str | list[str],
) -> None:
    with pytest.raises(XError) as info:
        verify_body_hmac(body=b"x", secret=secret, given="00")
    assert info.value.code == "X_CONFIG_INVALID"


def test_an_unknown_encoding_is_a_config_error() -> None:
    with pytest.raises(XError) as info:
        verify_body_hmac(body=b"x", secret="s", given="00", encoding="base32")  # type: ignore[arg-type]
    assert info.value.code == "X_CONFIG_INVALID"


def test_every_secret_is_compared_even_after_a_match(monkeypatch: pytest.MonkeyPatch) -> None:
    """No early exit: the time taken does not tell which secret matched."""
    compared: list[bytes] = []
    real = hmac.compare_digest

    def counting(a: bytes, b: bytes) -> bool:
        compared.append(b)
        return real(a, b)

    monkeypatch.setattr("ultimat3.http._hmac.hmac.compare_digest", counting)
    body = b"payload"
    verify_body_hmac(body=body, secret=["a", "b", "c"], given=mac("a", body).hex())
    assert len(compared) == 3
