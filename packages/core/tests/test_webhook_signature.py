import pytest
from hypothesis import given
from hypothesis import strategies as st

from ultimat3.core import (
    WEBHOOK_ID_HEADER,
    WEBHOOK_SIGNATURE_HEADER,
    WEBHOOK_TOPIC_HEADER,
    VerifiedWebhook,
    XError,
    sign_webhook,
    verify_webhook_signature,
)

NOW = 1_767_225_600
BODY = b'{"order":1}'


def signed(**kw: object) -> dict[str, str]:
    args: dict[str, object] = {
        "secret": "s3cret",
        "event_id": "evt_1",
        "topic": "order.created",
        "body": BODY,
        "timestamp": NOW,
    }
    args.update(kw)
    return sign_webhook(**args)  # type: ignore[arg-type]


def refused(headers: dict[str, str], body: bytes | str = BODY, **kw: object) -> XError:
    kw.setdefault("secret", "s3cret")
    kw.setdefault("now", NOW)
    with pytest.raises(XError) as info:
        verify_webhook_signature(headers, body, **kw)  # type: ignore[arg-type]
    return info.value


def test_sign_gives_the_three_headers() -> None:
    h = signed()
    assert set(h) == {WEBHOOK_SIGNATURE_HEADER, WEBHOOK_ID_HEADER, WEBHOOK_TOPIC_HEADER}
    assert h[WEBHOOK_SIGNATURE_HEADER].startswith(f"t={NOW},v1=")
    assert h[WEBHOOK_ID_HEADER] == "evt_1"


def test_verify_accepts_and_answers_what_was_signed() -> None:
    v = verify_webhook_signature(signed(), BODY, secret="s3cret", now=NOW)
    assert v == VerifiedWebhook(event_id="evt_1", topic="order.created", timestamp=NOW)


def test_headers_are_case_insensitive_and_str_bodies_are_utf8() -> None:
    h = {k.upper(): v for k, v in signed(body="héllo").items()}
    assert verify_webhook_signature(h, "héllo".encode(), secret="s3cret", now=NOW).topic


@pytest.mark.parametrize(
    "tamper",
    [
        lambda h: h.update({WEBHOOK_ID_HEADER: "evt_2"}),
        lambda h: h.update({WEBHOOK_TOPIC_HEADER: "order.deleted"}),
        lambda h: h.update(
            {WEBHOOK_SIGNATURE_HEADER: h[WEBHOOK_SIGNATURE_HEADER].replace(f"t={NOW}", "t=1")}
        ),
    ],
    ids=["event-id", "topic", "timestamp"],
)
def test_tampered_headers_are_refused(tamper: object) -> None:
    h = signed()
    tamper(h)  # type: ignore[operator]
    e = refused(h)
    assert e.code == "X_WEBHOOK_SIGNATURE_INVALID"
    assert e.status == 401
    assert WEBHOOK_SIGNATURE_HEADER in e.message


def test_tampered_body_is_refused() -> None:
    e = refused(signed(), b'{"order":2}')
    assert e.code == "X_WEBHOOK_SIGNATURE_INVALID"
    assert "matches no secret" in e.message


def test_wrong_secret_is_refused() -> None:
    assert refused(signed(), secret="other").code == "X_WEBHOOK_SIGNATURE_INVALID"


@pytest.mark.parametrize("skew", [301, -301])
def test_stale_either_way_is_refused(skew: int) -> None:
    e = refused(signed(), now=NOW + skew)
    assert e.code == "X_WEBHOOK_SIGNATURE_STALE"
    assert f"t={NOW}" in e.message
    assert "300s" in e.message


def test_within_tolerance_is_accepted() -> None:
    assert verify_webhook_signature(signed(), BODY, secret="s3cret", now=NOW + 300)


def test_rotation_accepts_any_listed_secret() -> None:
    old = signed(secret="old")
    assert verify_webhook_signature(old, BODY, secret=["new", "old"], now=NOW)
    both = signed(secret="new")
    both[WEBHOOK_SIGNATURE_HEADER] += "," + old[WEBHOOK_SIGNATURE_HEADER].split(",")[1]
    assert verify_webhook_signature(both, BODY, secret=["old"], now=NOW)


@pytest.mark.parametrize(
    ("header", "value", "named"),
    [
        (WEBHOOK_SIGNATURE_HEADER, None, "missing"),
        (WEBHOOK_ID_HEADER, None, WEBHOOK_ID_HEADER),
        (WEBHOOK_TOPIC_HEADER, None, WEBHOOK_TOPIC_HEADER),
        (WEBHOOK_SIGNATURE_HEADER, "garbage", "malformed"),
        (WEBHOOK_SIGNATURE_HEADER, "t=abc,v1=00", "bad t="),
        (WEBHOOK_SIGNATURE_HEADER, "v1=00", "no t="),
        (WEBHOOK_SIGNATURE_HEADER, f"t={NOW}", "no v1="),
        (WEBHOOK_SIGNATURE_HEADER, f"t={NOW},v1=zz", "matches no secret"),
    ],
)
def test_malformed_headers_are_refused(header: str, value: str | None, named: str) -> None:
    h = signed()
    if value is None:
        del h[header]
    else:
        h[header] = value
    e = refused(h)
    assert e.code == "X_WEBHOOK_SIGNATURE_INVALID"
    assert named in e.message


@pytest.mark.parametrize("secret", ["", [], ["ok", ""]])
def test_empty_secrets_are_config_errors(secret: object) -> None:
    e = refused(signed(), secret=secret)
    assert e.code == "X_CONFIG_INVALID"
    assert "secret" in e.message


def test_sign_refuses_an_empty_secret() -> None:
    with pytest.raises(XError) as info:
        signed(secret="")
    assert info.value.code == "X_CONFIG_INVALID"
    assert "secret" in info.value.message


@pytest.mark.parametrize("event_id", ["", "a:b", "has space", "x" * 257, "é"])
def test_bad_event_ids_are_refused_without_echo(event_id: str) -> None:
    with pytest.raises(XError) as info:
        signed(event_id=event_id)
    assert info.value.code == "X_WEBHOOK_EVENT_ID_INVALID"
    assert WEBHOOK_ID_HEADER in info.value.message
    if event_id:
        assert event_id not in info.value.message


def test_sign_refuses_an_empty_topic() -> None:
    with pytest.raises(XError) as info:
        signed(topic="")
    assert info.value.code == "X_INVARIANT"
    assert "topic" in info.value.message


printable_id = st.text(
    alphabet=st.characters(min_codepoint=0x21, max_codepoint=0x7E, exclude_characters=":"),
    min_size=1,
    max_size=256,
)


@given(
    secret=st.text(min_size=1),
    event_id=printable_id,
    topic=st.text(min_size=1).filter(lambda t: "\n" not in t),
    body=st.binary(),
    ts=st.integers(0, 10**10),
)
def test_round_trip(secret: str, event_id: str, topic: str, body: bytes, ts: int) -> None:
    h = sign_webhook(secret=secret, event_id=event_id, topic=topic, body=body, timestamp=ts)
    v = verify_webhook_signature(h, body, secret=secret, now=ts)
    assert (v.event_id, v.topic, v.timestamp) == (event_id, topic, ts)
