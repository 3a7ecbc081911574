"""ledger(): balanced Money before anything is written, every line in one durable step,
idempotent by key, a conflicting key refused with nothing written (memory book)."""

from __future__ import annotations

import subprocess
import sys
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from ultimat3.core import Money, XError
from ultimat3.jobs.factories.ledger import (
    LedgerBook,
    LedgerLine,
    Posting,
    PostingEntry,
    assert_balanced_posting,
    ledger,
    lines_of_posting,
)
from ultimat3.jobs.factories.ledger_books import MemoryLedgerBook, memory_ledger_book
from ultimat3.jobs.testing import job_harness


def _posting(key: str, *legs: tuple[str, int, str]) -> Posting:
    return Posting(
        key=key,
        entries=[PostingEntry(account=a, amount=Money(m, c)) for a, m, c in legs],
    )


PAYMENT = _posting("pay_1", ("cash", 1250, "EUR"), ("revenue", -1250, "EUR"))


# --- assert_balanced_posting -------------------------------------------------------------------


def test_a_balanced_posting_is_answered_parsed() -> None:
    raw = {
        "key": "pay_1",
        "entries": [
            {"account": "cash", "amount": {"minor": 1250, "currency": "EUR"}},
            {"account": "revenue", "amount": {"minor": -1250, "currency": "EUR"}},
        ],
    }
    assert assert_balanced_posting(raw) == PAYMENT


def test_an_fx_posting_balances_each_currency_on_its_own() -> None:
    fx = _posting(
        "fx_1",
        ("eur-cash", -1000, "EUR"),
        ("fx-clearing", 1000, "EUR"),
        ("fx-clearing", -1087, "USD"),
        ("usd-cash", 1087, "USD"),
    )
    assert assert_balanced_posting(fx) is fx


def test_a_currency_left_over_is_unbalanced_naming_it() -> None:
    fx = _posting("fx_2", ("a", -1000, "EUR"), ("b", 1000, "EUR"), ("c", -1087, "USD"))
    with pytest.raises(XError) as caught:
        assert_balanced_posting(fx)
    assert caught.value.code == "X_LEDGER_UNBALANCED"
    assert "-10.87 USD" in caught.value.message
    assert caught.value.meta["unbalanced"] == {"USD": -1087}
    assert caught.value.status == 422


def test_sums_across_currencies_never_offset_each_other() -> None:
    with pytest.raises(XError, match="X_LEDGER_UNBALANCED"):
        assert_balanced_posting(_posting("x", ("a", 100, "EUR"), ("b", -100, "USD")))


@pytest.mark.parametrize(
    ("entries", "why"),
    [
        ([], "0 entries"),
        ([{"account": "cash", "amount": {"minor": 0, "currency": "EUR"}}], "1 entries"),
        (
            [
                {"account": " ", "amount": {"minor": 5, "currency": "EUR"}},
                {"account": "b", "amount": {"minor": -5, "currency": "EUR"}},
            ],
            "blank account",
        ),
        (
            [
                {"account": "a", "amount": {"minor": 1.5, "currency": "EUR"}},
                {"account": "b", "amount": {"minor": -1.5, "currency": "EUR"}},
            ],
            "not an integer",
        ),
        (
            [
                {"account": "a", "amount": {"minor": True, "currency": "EUR"}},
                {"account": "b", "amount": {"minor": -1, "currency": "EUR"}},
            ],
            "not an integer",
        ),
        (
            [
                {"account": "a", "amount": {"minor": 5, "currency": "EURO"}},
                {"account": "b", "amount": {"minor": -5, "currency": "EURO"}},
            ],
            "ISO 4217",
        ),
        (
            [
                {"account": "a", "amount": "12.50 EUR"},
                {"account": "b", "amount": "-12.50 EUR"},
            ],
            "not Money",
        ),
    ],
)
def test_an_invalid_entry_is_refused_naming_what(entries: list[Any], why: str) -> None:
    with pytest.raises(XError) as caught:
        assert_balanced_posting({"key": "k", "entries": entries})
    assert caught.value.code == "X_LEDGER_ENTRY_INVALID"
    assert why in caught.value.message
    assert caught.value.fix
    assert caught.value.status == 422


def test_a_blank_posting_key_is_an_invalid_entry() -> None:
    with pytest.raises(XError, match="X_LEDGER_ENTRY_INVALID"):
        assert_balanced_posting(_posting(" ", ("a", 1, "EUR"), ("b", -1, "EUR")))


def test_a_posting_that_is_not_one_at_all_is_an_invalid_entry() -> None:
    with pytest.raises(XError) as caught:
        assert_balanced_posting({"key": "k", "entries": "cash"})
    assert caught.value.code == "X_LEDGER_ENTRY_INVALID"
    assert "entries" in caught.value.message


# --- the property ------------------------------------------------------------------------------

CURRENCIES = st.sampled_from(["JPY", "KRW", "EUR", "USD", "KWD", "BHD", "CLF"])  # 0, 2, 3, 4
ACCOUNTS = st.text(alphabet="abcdefghij:-", min_size=1, max_size=8)


@st.composite
def postings(draw: st.DrawFn) -> tuple[Posting, bool]:
    """A posting of 1..3 currencies, each split into 1..4 legs that sum to zero, then maybe
    nudged off balance in one currency. Answers the posting and whether it balances."""
    currencies = draw(st.lists(CURRENCIES, min_size=1, max_size=3, unique=True))
    legs: list[tuple[str, int, str]] = []
    for currency in currencies:
        parts = draw(st.lists(st.integers(-(10**12), 10**12), min_size=1, max_size=4))
        parts.append(-sum(parts))
        legs.extend((draw(ACCOUNTS), minor, currency) for minor in parts)
    nudge = draw(st.one_of(st.just(0), st.integers(-(10**6), 10**6)))
    if nudge:
        index = draw(st.integers(0, len(legs) - 1))
        account, minor, currency = legs[index]
        legs[index] = (account, minor + nudge, currency)
    order = draw(st.permutations(legs))
    return _posting("k", *order), nudge == 0


@given(postings())
@settings(max_examples=300, deadline=None)
def test_a_posting_is_accepted_exactly_when_each_currency_sums_to_zero(
    case: tuple[Posting, bool],
) -> None:
    posting, balanced = case
    sums: dict[str, int] = {}
    for entry in posting.entries:
        sums[entry.amount.currency] = sums.get(entry.amount.currency, 0) + entry.amount.minor
    assert balanced == all(total == 0 for total in sums.values())
    if balanced:
        assert assert_balanced_posting(posting) is posting
    else:
        with pytest.raises(XError) as caught:
            assert_balanced_posting(posting)
        assert caught.value.code == "X_LEDGER_UNBALANCED"
        assert set(caught.value.meta["unbalanced"]) == {c for c, t in sums.items() if t}


@given(st.lists(postings(), min_size=1, max_size=6))
@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
async def test_through_the_job_the_book_holds_exactly_the_balanced_postings(
    cases: list[tuple[Posting, bool]],
) -> None:
    book = memory_ledger_book()
    post = ledger(name="prop.post", tenant="none", book=lambda: book)
    async with job_harness(jobs=[post]) as harness:
        ids = []
        for index, (posting, _) in enumerate(cases):
            keyed = posting.model_copy(update={"key": f"p{index}"})
            ids.append((await harness.enqueue(post, keyed)).id)
        await harness.drain()
        for index, ((_, balanced), job_id) in enumerate(zip(cases, ids, strict=True)):
            trace = await harness.trace(job_id)
            stored = await book.lines_of(f"p{index}")
            if balanced:
                assert trace.state == "done"
                assert len(stored) == len(cases[index][0].entries)
            else:
                assert trace.state == "dead"
                assert trace.last_error is not None
                assert trace.last_error["code"] == "X_LEDGER_UNBALANCED"
                assert trace.attempts == 1  # terminal: no retry
                assert stored == []
    for (_, currency), total in _currency_totals(book).items():
        assert total == 0, currency


def _currency_totals(book: MemoryLedgerBook) -> dict[tuple[str, str], int]:
    out: dict[tuple[str, str], int] = {}
    for stored in book.lines.values():
        for line in stored:
            slot = ("*", line.amount.currency)
            out[slot] = out.get(slot, 0) + line.amount.minor
    return out


# --- the job -----------------------------------------------------------------------------------


async def test_the_run_writes_every_line_in_one_step() -> None:
    book = memory_ledger_book()
    post = ledger(name="payments.post", tenant="none", book=lambda: book)
    async with job_harness(jobs=[post]) as harness:
        trace = await harness(post, PAYMENT)
    assert trace.state == "done"
    assert trace.idempotency_key == "payments.post:pay_1"
    assert list(trace.steps) == ["post"]
    assert trace.steps["post"].executions == 1
    assert trace.result == {"key": "pay_1", "lines": 2, "written": 2}
    assert await book.lines_of("pay_1") == [
        LedgerLine("pay_1", 0, "cash", Money(1250, "EUR")),
        LedgerLine("pay_1", 1, "revenue", Money(-1250, "EUR")),
    ]


async def test_a_replay_of_the_same_lines_writes_nothing() -> None:
    book = memory_ledger_book()
    post = ledger(name="payments.post", tenant="none", book=lambda: book)
    async with job_harness(jobs=[post]) as harness:
        await harness(post, PAYMENT)
        again = await harness(post, PAYMENT.model_dump(mode="json"))  # a new run, same key
    assert again.state == "done"
    assert again.result == {"key": "pay_1", "lines": 2, "written": 0}
    assert len(await book.lines_of("pay_1")) == 2


async def test_the_key_stored_with_other_lines_is_a_conflict_and_nothing_is_written() -> None:
    book = memory_ledger_book()
    post = ledger(name="payments.post", tenant="none", book=lambda: book)
    other = _posting(
        "pay_1", ("cash", 1250, "EUR"), ("revenue", -1000, "EUR"), ("fees", -250, "EUR")
    )
    async with job_harness(jobs=[post]) as harness:
        await harness(post, PAYMENT)
        trace = await harness(post, other)
    assert trace.state == "dead"
    assert trace.attempts == 1
    assert trace.last_error is not None
    assert trace.last_error["code"] == "X_LEDGER_POSTING_CONFLICT"
    assert await book.lines_of("pay_1") == lines_of_posting(PAYMENT)


@pytest.mark.parametrize(
    "other",
    [
        _posting("pay_1", ("cash", 1250, "EUR"), ("sales", -1250, "EUR")),  # another account
        _posting("pay_1", ("cash", 1250, "EUR"), ("revenue", -1250, "EUR"), ("x", 0, "EUR")),
        _posting("pay_1", ("cash", 1250, "USD"), ("revenue", -1250, "USD")),  # another currency
    ],
)
async def test_the_memory_book_refuses_any_other_line_set_under_a_key(other: Posting) -> None:
    book = memory_ledger_book()
    assert await book.post("pay_1", lines_of_posting(PAYMENT)) == 2
    with pytest.raises(XError) as caught:
        await book.post("pay_1", lines_of_posting(other))
    assert caught.value.code == "X_LEDGER_POSTING_CONFLICT"
    assert caught.value.status == 409
    assert await book.lines_of("pay_1") == lines_of_posting(PAYMENT)


async def test_a_book_refuses_lines_not_numbered_under_their_key() -> None:
    book = memory_ledger_book()
    lines = lines_of_posting(PAYMENT)
    with pytest.raises(XError, match="X_LEDGER_ENTRY_INVALID"):
        await book.post("pay_2", lines)
    assert await book.lines_of("pay_2") == []


async def test_an_unbalanced_run_is_dead_before_the_book_is_asked() -> None:
    asked: list[str] = []

    def book() -> LedgerBook:
        asked.append("book")
        return memory_ledger_book()

    post = ledger(name="payments.post", tenant="none", book=book)
    lopsided = _posting("pay_9", ("cash", 1250, "EUR"), ("revenue", -1200, "EUR"))
    async with job_harness(jobs=[post]) as harness:
        trace = await harness(post, lopsided)
    assert trace.state == "dead"
    assert trace.last_error is not None
    assert trace.last_error["code"] == "X_LEDGER_UNBALANCED"
    assert trace.steps == {}
    assert asked == []


async def test_an_invalid_amount_is_refused_at_the_enqueue() -> None:
    post = ledger(name="payments.post", tenant="none", book=memory_ledger_book)
    bad = {"key": "k", "entries": [{"account": "a", "amount": {"minor": "5", "currency": "EUR"}}]}
    async with job_harness(jobs=[post]) as harness:
        with pytest.raises(XError, match="X_LEDGER_ENTRY_INVALID"):
            await harness.enqueue(post, bad)
        assert await harness.rows() == []


async def test_a_book_answered_asynchronously_is_awaited() -> None:
    book = memory_ledger_book()

    async def open_book() -> LedgerBook:
        return book

    post = ledger(name="payments.post", tenant="none", book=open_book)
    async with job_harness(jobs=[post]) as harness:
        trace = await harness(post, PAYMENT)
    assert trace.state == "done"
    assert len(await book.lines_of("pay_1")) == 2


async def test_book_answering_something_else_is_a_config_error() -> None:
    post = ledger(name="payments.post", tenant="none", book=lambda: object())  # type: ignore[arg-type,return-value]
    async with job_harness(jobs=[post]) as harness:
        trace = await harness(post, PAYMENT)
    assert trace.last_error is not None
    assert trace.last_error["code"] == "X_CONFIG_INVALID"


def test_the_tenant_is_a_function_of_the_posting() -> None:
    post = ledger(name="p", tenant=lambda p: p.org_id or "none-org", book=memory_ledger_book)
    assert post.tenant_of(PAYMENT.model_copy(update={"org_id": "org_1"})) == "org_1"


@pytest.mark.parametrize("name", ["", "  ", None, 7])
def test_a_missing_or_blank_name_is_refused(name: Any) -> None:
    with pytest.raises(XError) as caught:
        ledger(name=name, tenant="none", book=memory_ledger_book)
    assert caught.value.code == "X_JOB_DECLARATION_INVALID"
    assert "name" in caught.value.message


def test_a_book_that_is_not_a_function_is_refused() -> None:
    with pytest.raises(XError) as caught:
        ledger(name="p", tenant="none", book=memory_ledger_book())  # type: ignore[arg-type]
    assert caught.value.code == "X_JOB_DECLARATION_INVALID"
    assert "book" in caught.value.message


def test_the_factory_names_are_reachable_lazily_from_ultimat3_jobs() -> None:
    code = (
        "import sys; from ultimat3.jobs import ledger, memory_ledger_book, postgres_ledger_book, "
        "Posting, PostingEntry, LedgerBook, LedgerLine, assert_balanced_posting; "
        "print(ledger.__module__, postgres_ledger_book.__module__)"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.split() == [
        "ultimat3.jobs.factories.ledger",
        "ultimat3.jobs.factories.ledger_books",
    ]


def test_retry_queue_and_timeout_pass_to_the_job() -> None:
    post = ledger(
        name="p", tenant="none", book=memory_ledger_book, retry=_retry(4), queue="money",
        timeout="2m",
    )  # fmt: skip
    assert (post.queue, post.retry.attempts, post.timeout_ms) == ("money", 4, 120_000)
    assert ledger(name="p", tenant="none", book=memory_ledger_book).queue == "default"


def _retry(attempts: int) -> Any:
    from ultimat3.jobs import Retry

    return Retry(attempts=attempts)
