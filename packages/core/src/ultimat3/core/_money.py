"""``Money``: integer minor units in one ISO 4217 currency."""

from __future__ import annotations

from dataclasses import dataclass
from decimal import Decimal, InvalidOperation
from types import MappingProxyType
from typing import Any

from ._errors import XError

_SCALE_0 = "BIF CLP DJF GNF ISK JPY KMF KRW PYG RWF UGX UYI VND VUV XAF XOF XPF"
_SCALE_3 = "BHD IQD JOD KWD LYD OMR TND"
_SCALE_4 = "CLF UYW"
_SCALE_2 = (
    "AED AFN ALL AMD ANG AOA ARS AUD AWG AZN BAM BBD BDT BGN BMD BND BOB BOV BRL BSD BTN BWP "
    "BYN BZD CAD CDF CHE CHF CHW CNY COP COU CRC CUP CVE CZK DKK DOP DZD EGP ERN ETB EUR FJD "
    "FKP GBP GEL GHS GIP GMD GTQ GYD HKD HNL HTG HUF IDR ILS INR IRR JMD KES KGS KHR KPW KYD "
    "KZT LAK LBP LKR LRD LSL MAD MDL MGA MKD MMK MNT MOP MRU MUR MVR MWK MXN MXV MYR MZN NAD "
    "NGN NIO NOK NPR NZD PAB PEN PGK PHP PKR PLN QAR RON RSD RUB SAR SBD SCR SDG SEK SGD SHP "
    "SLE SOS SRD SSP STN SVC SYP SZL THB TJS TMT TOP TRY TTD TWD TZS UAH USD USN UYU UZS VED "
    "VES WST XCD XCG YER ZAR ZMW ZWG"
)

CURRENCY_SCALES = MappingProxyType(
    {
        code: scale
        for scale, codes in ((0, _SCALE_0), (2, _SCALE_2), (3, _SCALE_3), (4, _SCALE_4))
        for code in codes.split()
    }
)
"""ISO 4217 codes and their minor-unit scale (JPY 0, EUR 2, KWD 3)."""

_FIX = "Money(1234, 'EUR') is 12.34 EUR: integer minor units and an ISO 4217 code"


def _refuse(message: str) -> XError:
    return XError("X_MONEY_INVALID", message, fix=_FIX)


@dataclass(frozen=True, slots=True)
class Money:
    """An amount in integer minor units (cents) of an ISO 4217 currency."""

    minor: int
    currency: str

    def __post_init__(self) -> None:
        minor: Any = self.minor
        if isinstance(minor, bool) or not isinstance(minor, int):
            raise _refuse(f"Money minor {minor!r} must be an int of minor units")
        currency: Any = self.currency
        if not isinstance(currency, str) or currency not in CURRENCY_SCALES:
            raise _refuse(f"Money currency {currency!r} is not an ISO 4217 code")

    @property
    def scale(self) -> int:
        """Digits after the decimal point for this currency."""
        return CURRENCY_SCALES[self.currency]

    def to_decimal(self) -> Decimal:
        """The amount in major units, e.g. ``Decimal('12.34')``."""
        return Decimal(self.minor).scaleb(-self.scale)

    @classmethod
    def from_decimal(cls, amount: Decimal | str | int, currency: str) -> Money:
        """Money from a major-unit amount; refuses more decimals than the currency has."""
        if not isinstance(currency, str) or currency not in CURRENCY_SCALES:
            raise _refuse(f"Money currency {currency!r} is not an ISO 4217 code")
        if isinstance(amount, bool) or not isinstance(amount, Decimal | str | int):
            raise _refuse(f"Money amount {amount!r} must be a Decimal or a str (never a float)")
        try:
            value = Decimal(amount)
        except InvalidOperation:
            raise _refuse(f"Money amount {amount!r} is not a number") from None
        if not value.is_finite():
            raise _refuse(f"Money amount {amount!r} is not finite")
        scale = CURRENCY_SCALES[currency]
        minor = value.scaleb(scale)
        if minor != minor.to_integral_value():
            raise _refuse(f"Money amount {amount!r} has more than {scale} decimals for {currency}")
        return cls(int(minor), currency)

    @classmethod
    def zero(cls, currency: str) -> Money:
        """Nothing, in ``currency``."""
        return cls(0, currency)

    def _same(self, other: Money, op: str) -> None:
        if other.currency != self.currency:
            raise _refuse(f"cannot {op} {other.currency} and {self.currency}")

    def __add__(self, other: object) -> Money:
        if not isinstance(other, Money):
            return NotImplemented
        self._same(other, "add")
        return Money(self.minor + other.minor, self.currency)

    def __sub__(self, other: object) -> Money:
        if not isinstance(other, Money):
            return NotImplemented
        self._same(other, "subtract")
        return Money(self.minor - other.minor, self.currency)

    def __neg__(self) -> Money:
        return Money(-self.minor, self.currency)

    def __str__(self) -> str:
        return f"{self.to_decimal()} {self.currency}"
