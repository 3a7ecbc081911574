"""``ledger()``: double-entry postings, a factory over ``job()``.

A posting is a key and two entries or more, each an account and a ``Money``. The run refuses
anything that is not balanced Money (``assert_balanced_posting``: each currency sums to zero on
its own) before a line is written, then writes every line in ONE durable step through the app's
``LedgerBook``. A replay of the same lines writes 0; the key already stored with OTHER lines is
``X_LEDGER_POSTING_CONFLICT`` and nothing is written.

    post_payment = ledger(name="payments.post", tenant="none", book=lambda: book)
    assert_balanced_posting(posting)          # in the request, before the enqueue
    await post_payment.enqueue(posting)

Books live in ``ultimat3.jobs.factories.ledger_books`` (``memory_ledger_book()``,
``postgres_ledger_book()``); both are reachable as ``from ultimat3.jobs import ...``.
"""

from __future__ import annotations

import inspect
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Annotated, Any, Literal, Protocol, runtime_checkable

from pydantic import BaseModel, ConfigDict, PlainSerializer, PlainValidator

from ultimat3.core import CURRENCY_SCALES, Money, Signal, XError
from ultimat3.jobs import Job, JobContext, Retry, Step, job

_ENTRY_FIX = (
    "give two entries or more, each a non-blank account and Money(minor: int, currency: ISO 4217),"
    " e.g. PostingEntry(account='cash', amount=Money(1250, 'EUR'))"
)


def _entry_invalid(message: str, **meta: Any) -> XError:
    return XError("X_LEDGER_ENTRY_INVALID", message, fix=_ENTRY_FIX, meta=meta)


def _to_money(value: object) -> Money:
    """An entry's amount: a ``Money``, or its JSON form ``{"minor": int, "currency": "EUR"}``."""
    if isinstance(value, Money):
        return value
    if isinstance(value, Mapping):
        minor, currency = value.get("minor"), value.get("currency")
        if isinstance(minor, bool) or not isinstance(minor, int):
            raise _entry_invalid(f"amount minor {minor!r} is not an integer of minor units")
        if not isinstance(currency, str) or currency not in CURRENCY_SCALES:
            raise _entry_invalid(f"amount currency {currency!r} is not an ISO 4217 code")
        return Money(minor, currency)
    raise _entry_invalid(f"amount {value!r} is a {type(value).__name__}, not Money")


def _money_json(value: Money) -> dict[str, Any]:
    return {"minor": value.minor, "currency": value.currency}


MoneyField = Annotated[Money, PlainValidator(_to_money), PlainSerializer(_money_json)]
"""``Money`` as a pydantic field: a bad amount is ``X_LEDGER_ENTRY_INVALID`` (raised as is)."""


class PostingEntry(BaseModel):
    """One leg of a posting: an account (the app's name for it) and a signed ``Money``."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    account: str
    amount: MoneyField


class Posting(BaseModel):
    """A ledger job's input: the posting's key (the app's id: a provider's payment id), its
    entries, and optionally the org it belongs to."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    key: str
    entries: list[PostingEntry]
    org_id: str | None = None


@dataclass(frozen=True, slots=True)
class LedgerLine:
    """One stored line: ``line`` is the entry's 0-based index in its posting."""

    posting_key: str
    line: int
    account: str
    amount: Money


@runtime_checkable
class LedgerBook(Protocol):
    """Where the lines live (the app's table). ``post`` writes every line of a key or none."""

    async def post(self, key: str, lines: Sequence[LedgerLine]) -> int:
        """Write ``lines`` under ``key``; answers how many were written (0 on a replay of the
        same lines). The key holding OTHER lines is ``X_LEDGER_POSTING_CONFLICT``, nothing
        written."""
        ...

    async def lines_of(self, key: str) -> list[LedgerLine]:
        """The lines stored under ``key``, in line order (``[]`` for an unknown key)."""
        ...


def assert_balanced_posting(posting: Posting | Mapping[str, Any]) -> Posting:
    """Refuse a posting that is not balanced Money, before anything is written: fewer than two
    entries, a blank account or a non-``Money`` amount is ``X_LEDGER_ENTRY_INVALID``; a currency
    whose entries do not sum to zero is ``X_LEDGER_UNBALANCED``. Answers the parsed posting."""
    parsed = posting if isinstance(posting, Posting) else _parse_posting(posting)
    if not isinstance(parsed.key, str) or not parsed.key.strip():
        raise _entry_invalid(f"posting key {parsed.key!r} is blank", field="key")
    if len(parsed.entries) < 2:
        raise _entry_invalid(
            f"posting {parsed.key!r} has {len(parsed.entries)} entries; double entry needs two "
            "or more",
            key=parsed.key,
        )
    totals: dict[str, int] = {}
    for index, entry in enumerate(parsed.entries):
        if not entry.account.strip():
            raise _entry_invalid(
                f"posting {parsed.key!r}: entry {index} has a blank account",
                key=parsed.key,
                entry=index,
            )
        totals[entry.amount.currency] = totals.get(entry.amount.currency, 0) + entry.amount.minor
    off = {currency: total for currency, total in sorted(totals.items()) if total != 0}
    if off:
        shown = ", ".join(f"{Money(total, currency)}" for currency, total in off.items())
        raise XError(
            "X_LEDGER_UNBALANCED",
            f"posting {parsed.key!r} does not balance: {shown} left over",
            fix="make each currency's entries sum to zero on their own (an FX posting balances "
            "its EUR legs and its USD legs separately)",
            meta={"key": parsed.key, "unbalanced": dict(off)},
        )
    return parsed


def _parse_posting(raw: Mapping[str, Any]) -> Posting:
    from pydantic import ValidationError

    try:
        return Posting.model_validate(raw)
    except ValidationError as exc:
        problems = [
            f"{'.'.join(str(p) for p in e['loc']) or '$'}: {e['msg']}"
            for e in exc.errors(include_url=False)
        ]
        raise _entry_invalid("the posting is not valid: " + "; ".join(problems)) from None


def lines_of_posting(posting: Posting) -> list[LedgerLine]:
    """The lines a posting stores: one per entry, numbered from 0 in entry order."""
    return [
        LedgerLine(posting.key, index, entry.account, entry.amount)
        for index, entry in enumerate(posting.entries)
    ]


TenantOf = Callable[[Posting], str] | Literal["none"]


def ledger(
    *,
    name: str,
    tenant: TenantOf,
    book: Callable[[], LedgerBook | Awaitable[LedgerBook]],
    retry: Retry | None = None,
    queue: str | None = None,
    timeout: Any = None,
) -> Job[Posting, dict[str, Any]]:
    """Declare a posting job: input ``Posting``, idempotency key ``<name>:<key>``. The run
    checks the posting (``assert_balanced_posting``), then writes every line through
    ``book()`` in one ``step.run('post')``. Result: ``{"key", "lines", "written"}``."""
    if not isinstance(name, str) or not name.strip():
        raise XError(
            "X_JOB_DECLARATION_INVALID",
            f"ledger(): name {name!r} is not a non-empty str",
            fix="ledger(name='payments.post', ...) — the durable queue key",
        )
    if not callable(book):
        raise XError(
            "X_JOB_DECLARATION_INVALID",
            f"ledger {name!r}: book is a {type(book).__name__}, not a function answering a "
            "LedgerBook",
            fix="book=lambda: memory_ledger_book() (tests) or a postgres_ledger_book(pool)",
            meta={"job": name},
        )

    async def run(posting: Posting, step: Step, ctx: JobContext) -> dict[str, Any]:
        checked = assert_balanced_posting(posting)  # before any line is written
        lines = lines_of_posting(checked)

        async def post(signal: Signal) -> int:
            answered = book()
            target = await answered if inspect.isawaitable(answered) else answered
            if not isinstance(target, LedgerBook):
                raise XError(
                    "X_CONFIG_INVALID",
                    f"ledger {name!r}: book() answered a {type(target).__name__}, not a "
                    "LedgerBook (post + lines_of)",
                    fix="answer memory_ledger_book() or postgres_ledger_book(pool)",
                    meta={"job": name},
                )
            return await target.post(checked.key, lines)

        written = await step.run("post", post)
        return {"key": checked.key, "lines": len(lines), "written": written}

    return job(
        name=name,
        input=Posting,
        idempotency_key=lambda p: f"{name}:{p.key}",
        tenant=tenant,
        queue="default" if queue is None else queue,
        retry=retry,
        timeout=timeout,
        run=run,
    )


__all__ = [
    "LedgerBook",
    "LedgerLine",
    "MoneyField",
    "Posting",
    "PostingEntry",
    "assert_balanced_posting",
    "ledger",
    "lines_of_posting",
]
