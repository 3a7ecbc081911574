"""Standard Webhooks signing, checked by the format's reference verifier (``standardwebhooks``)."""

from __future__ import annotations

import base64
import os
import time

import pytest
from standardwebhooks import Webhook
from standardwebhooks.webhooks import WebhookVerificationError

from ultimat3.core import XError
from ultimat3.http import sign_standard_webhook, standard_webhook_key


def test_the_reference_library_verifies_what_we_sign() -> None:
    secret = "whsec_" + base64.b64encode(os.urandom(24)).decode()
    body = b'{"type":"order.paid","id":"ord_1"}'
    headers = sign_standard_webhook(secret=secret, msg_id="msg_1", body=body)
    assert Webhook(secret).verify(body, headers) == {"type": "order.paid", "id": "ord_1"}


def test_the_reference_library_refuses_a_tampered_body_and_a_stale_timestamp() -> None:
    secret = "whsec_" + base64.b64encode(b"k" * 24).decode()
    headers = sign_standard_webhook(secret=secret, msg_id="msg_1", body=b"{}")
    with pytest.raises(WebhookVerificationError):
        Webhook(secret).verify(b'{"x":1}', headers)
    stale = sign_standard_webhook(
        secret=secret, msg_id="msg_1", body=b"{}", timestamp=int(time.time()) - 3600
    )
    with pytest.raises(WebhookVerificationError):
        Webhook(secret).verify(b"{}", stale)


@pytest.mark.parametrize("secret", ["whsec_", "whsec_!!!", "", "not base64 at all"])
def test_a_secret_that_is_not_whsec_base64_is_a_config_error(secret: str) -> None:
    with pytest.raises(XError) as info:
        standard_webhook_key(secret)
    assert info.value.code == "X_CONFIG_INVALID"
