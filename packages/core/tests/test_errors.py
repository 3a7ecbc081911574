import pickle

import pytest

from ultimat3.core import (
    CODES,
    XError,
    register_error_retry,
    reset_error_retry,
    retry_classification,
)


@pytest.fixture(autouse=True)
def _clean_registrations() -> None:
    reset_error_retry()


def test_defaults_come_from_the_registry() -> None:
    e = XError("X_LOCK_NOT_ACQUIRED")
    assert e.message == CODES["X_LOCK_NOT_ACQUIRED"].message
    assert e.fix == CODES["X_LOCK_NOT_ACQUIRED"].fix
    assert e.status == 409
    assert e.meta == {}
    assert e.retry == "retryable"


def test_explicit_values_win_over_defaults() -> None:
    e = XError("X_RATE_LIMITED", "slow down", fix="wait", meta={"a": 1}, status=499)
    assert (e.message, e.fix, e.meta, e.status) == ("slow down", "wait", {"a": 1}, 499)
    assert e.retry == "retry-after"


def test_str_is_code_colon_message() -> None:
    assert str(XError("X_INVARIANT", "boom")) == "X_INVARIANT: boom"


def test_unknown_code_gets_the_code_as_message() -> None:
    e = XError("X_APP_THING")
    assert e.message == "X_APP_THING"
    assert e.fix is None
    assert e.status is None


def test_to_dict_round_trips() -> None:
    e = XError("X_JOB_NOT_FOUND", "no job abc", meta={"id": "abc"})
    d = e.to_dict()
    assert d == {
        "code": "X_JOB_NOT_FOUND",
        "message": "no job abc",
        "fix": CODES["X_JOB_NOT_FOUND"].fix,
        "meta": {"id": "abc"},
        "status": 404,
    }
    back = XError.from_dict(d)
    assert back.to_dict() == d


def test_to_dict_makes_meta_json_safe() -> None:
    e = XError("X_INVARIANT", meta={"raw": b"\x00", "ok": (1, 2)})
    assert e.to_dict()["meta"] == {"raw": "b'\\x00'", "ok": [1, 2]}


def test_from_dict_refuses_a_missing_code() -> None:
    with pytest.raises(XError) as info:
        XError.from_dict({"message": "x"})
    assert info.value.code == "X_INVARIANT"
    assert "code" in info.value.message


def test_subclass_from_dict_returns_the_subclass() -> None:
    class JobsError(XError):
        pass

    assert type(JobsError.from_dict({"code": "X_JOB_TIMEOUT"})) is JobsError


def test_pickles_with_its_fields() -> None:
    e = XError("X_RATE_LIMITED", "x", meta={"retry_after_seconds": 3})
    back = pickle.loads(pickle.dumps(e))
    assert back.to_dict() == e.to_dict()


@pytest.mark.parametrize(
    ("code", "expected"),
    [
        ("X_JOB_TENANT_MISMATCH", "terminal"),
        ("X_LEDGER_UNBALANCED", "terminal"),
        ("X_LEDGER_SOMETHING_NEW", "terminal"),
        ("X_WEBHOOK_DELIVERY_THROTTLED", "retry-after"),
        ("X_DRAINING", "retryable"),
        ("X_WHATEVER", "retryable"),
        (None, "retryable"),
    ],
)
def test_retry_classification(code: str | None, expected: str) -> None:
    assert retry_classification(code) == expected


def test_registration_wins_over_the_default() -> None:
    register_error_retry({"X_DRAINING": "terminal", "X_APP_DECLINED": "terminal"})
    assert retry_classification("X_DRAINING") == "terminal"
    assert XError("X_APP_DECLINED").retry == "terminal"
    reset_error_retry()
    assert retry_classification("X_DRAINING") == "retryable"


def test_register_refuses_a_bad_class() -> None:
    with pytest.raises(XError) as info:
        register_error_retry({"X_APP": "sometimes"})  # type: ignore[dict-item]
    assert info.value.code == "X_INVARIANT"
    assert "sometimes" in info.value.message
    assert "X_APP" in info.value.message


def test_register_refuses_a_non_x_code() -> None:
    with pytest.raises(XError) as info:
        register_error_retry({"E_APP": "terminal"})
    assert info.value.code == "X_INVARIANT"
    assert "E_APP" in info.value.message


def test_register_is_all_or_nothing() -> None:
    with pytest.raises(XError):
        register_error_retry({"X_FIRST": "terminal", "bad": "terminal"})
    assert retry_classification("X_FIRST") == "retryable"


def test_every_code_is_well_formed() -> None:
    for code, info in CODES.items():
        assert info.code == code
        assert code.startswith("X_")
        assert info.message
        assert info.fix
        assert info.retry in {"retryable", "terminal", "retry-after"}
