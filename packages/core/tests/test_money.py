from decimal import Decimal

import pytest

from ultimat3.core import CURRENCY_SCALES, Money, XError


def test_scales() -> None:
    assert Money(1, "JPY").scale == 0
    assert Money(1, "EUR").scale == 2
    assert Money(1, "KWD").scale == 3
    assert {CURRENCY_SCALES[c] for c in ("BHD", "JOD", "OMR", "TND")} == {3}


def test_to_and_from_decimal() -> None:
    assert Money(1234, "EUR").to_decimal() == Decimal("12.34")
    assert Money.from_decimal("12.34", "EUR") == Money(1234, "EUR")
    assert Money.from_decimal(Decimal("1.000"), "JPY") == Money(1, "JPY")
    assert Money.from_decimal("-0.005", "KWD") == Money(-5, "KWD")
    assert str(Money(-1234, "USD")) == "-12.34 USD"


def test_arithmetic_in_one_currency() -> None:
    assert Money(100, "EUR") + Money(50, "EUR") == Money(150, "EUR")
    assert Money(100, "EUR") - Money(150, "EUR") == Money(-50, "EUR")
    assert -Money(5, "EUR") == Money(-5, "EUR")
    assert Money.zero("USD") == Money(0, "USD")


def test_refuses_mixing_currencies_naming_both() -> None:
    with pytest.raises(XError) as info:
        _ = Money(1, "EUR") + Money(1, "USD")
    assert info.value.code == "X_MONEY_INVALID"
    assert "EUR" in info.value.message
    assert "USD" in info.value.message
    with pytest.raises(XError, match="subtract"):
        _ = Money(1, "EUR") - Money(1, "USD")


def test_adding_a_non_money_is_a_type_error() -> None:
    with pytest.raises(TypeError):
        _ = Money(1, "EUR") + 1


@pytest.mark.parametrize(("minor", "currency"), [(True, "EUR"), (1.5, "EUR"), ("1", "EUR")])
def test_refuses_non_int_minor(minor: object, currency: str) -> None:
    with pytest.raises(XError) as info:
        Money(minor, currency)  # type: ignore[arg-type]
    assert info.value.code == "X_MONEY_INVALID"
    assert repr(minor) in info.value.message


@pytest.mark.parametrize("currency", ["eur", "EURO", "XYZ", "", 978])
def test_refuses_unknown_currency(currency: object) -> None:
    with pytest.raises(XError) as info:
        Money(1, currency)  # type: ignore[arg-type]
    assert info.value.code == "X_MONEY_INVALID"
    assert repr(currency) in info.value.message


@pytest.mark.parametrize(
    ("amount", "currency"),
    [("1.234", "EUR"), ("1.5", "JPY"), ("abc", "EUR"), ("NaN", "EUR"), ("Infinity", "USD")],
)
def test_from_decimal_refuses(amount: str, currency: str) -> None:
    with pytest.raises(XError) as info:
        Money.from_decimal(amount, currency)
    assert info.value.code == "X_MONEY_INVALID"
    assert repr(amount) in info.value.message


def test_from_decimal_refuses_a_float_and_a_bad_currency() -> None:
    with pytest.raises(XError) as info:
        Money.from_decimal(1.5, "EUR")  # type: ignore[arg-type]
    assert "1.5" in info.value.message
    with pytest.raises(XError) as info:
        Money.from_decimal("1", "ZZZ")
    assert "'ZZZ'" in info.value.message


def test_money_is_frozen() -> None:
    m = Money(1, "EUR")
    with pytest.raises(AttributeError):
        m.minor = 2  # type: ignore[misc]
