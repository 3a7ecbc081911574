"""postgres_ledger_book() on a real server: one insert ... on conflict do nothing per posting, a
replay writes 0, a conflict writes nothing, and any interleaving of concurrent replays and
conflicting postings leaves one set of lines per key, balanced per currency."""

from __future__ import annotations

import asyncio
import random
import uuid
from collections.abc import AsyncIterator
from pathlib import Path

import psycopg
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from psycopg_pool import AsyncConnectionPool

from ultimat3.core import Money, XError
from ultimat3.jobs import job_worker
from ultimat3.jobs.factories.ledger import (
    LedgerLine,
    Posting,
    PostingEntry,
    ledger,
    lines_of_posting,
)
from ultimat3.jobs.factories.ledger_books import PostgresLedgerBook, postgres_ledger_book
from ultimat3.jobs.postgres import PostgresJobDriver

ROOT = Path(__file__).resolve().parents[4]


def _posting(key: str, *legs: tuple[str, int, str]) -> Posting:
    return Posting(
        key=key, entries=[PostingEntry(account=a, amount=Money(m, c)) for a, m, c in legs]
    )


async def _drop(url: str, schema: str) -> None:
    async with await psycopg.AsyncConnection.connect(url, autocommit=True) as conn:
        await conn.execute(f'drop schema if exists "{schema}" cascade')


@pytest.fixture
async def pool(database_url: str) -> AsyncIterator[AsyncConnectionPool]:
    async with AsyncConnectionPool(database_url, min_size=1, max_size=8, open=False) as opened:
        yield opened


@pytest.fixture
async def book(database_url: str, pool: AsyncConnectionPool) -> AsyncIterator[PostgresLedgerBook]:
    schema = f"x_ledger_{uuid.uuid4().hex[:12]}"
    made = postgres_ledger_book(pool, schema=schema)
    await made.migrate()
    try:
        yield made
    finally:
        await _drop(database_url, schema)


PAYMENT = _posting("pay_1", ("cash", 1250, "EUR"), ("revenue", -1250, "EUR"))


async def test_a_post_writes_its_lines_and_a_replay_writes_zero(book: PostgresLedgerBook) -> None:
    lines = lines_of_posting(PAYMENT)
    assert await book.post("pay_1", lines) == 2
    assert await book.post("pay_1", lines) == 0
    assert await book.lines_of("pay_1") == lines
    assert await book.lines_of("nobody") == []


@pytest.mark.parametrize(
    "other",
    [
        _posting("pay_1", ("cash", 1250, "EUR"), ("sales", -1250, "EUR")),
        _posting("pay_1", ("cash", 1250, "EUR"), ("revenue", -1250, "EUR"), ("x", 0, "EUR")),
        _posting("pay_1", ("cash", 125, "JPY"), ("revenue", -125, "JPY")),
        _posting("pay_1", ("cash", 1250, "EUR"), ("revenue", -1000, "EUR"), ("f", -250, "EUR")),
    ],
)
async def test_other_lines_under_a_stored_key_conflict_and_nothing_is_written(
    book: PostgresLedgerBook, other: Posting
) -> None:
    await book.post("pay_1", lines_of_posting(PAYMENT))
    with pytest.raises(XError) as caught:
        await book.post("pay_1", lines_of_posting(other))
    assert caught.value.code == "X_LEDGER_POSTING_CONFLICT"
    assert await book.lines_of("pay_1") == lines_of_posting(PAYMENT)


async def test_fewer_lines_than_stored_conflict(book: PostgresLedgerBook) -> None:
    three = _posting("k", ("a", 5, "KWD"), ("b", -3, "KWD"), ("c", -2, "KWD"))
    await book.post("k", lines_of_posting(three))
    two = _posting("k", ("a", 5, "KWD"), ("b", -5, "KWD"))
    with pytest.raises(XError, match="X_LEDGER_POSTING_CONFLICT"):
        await book.post("k", lines_of_posting(two))
    assert len(await book.lines_of("k")) == 3


async def test_the_ddl_file_is_the_one_the_docs_show(book: PostgresLedgerBook) -> None:
    ddl = (ROOT / "packages/jobs/src/ultimat3/jobs/factories/sql/ledger_lines.sql").read_text(
        "utf-8"
    )
    docs = (ROOT / "docs/ledger.md").read_text("utf-8")
    body = ddl[ddl.index("CREATE TABLE") :].strip()
    assert body in docs
    assert f'"{book.schema}"."ledger_lines"' in book.ddl()


async def test_migrate_is_idempotent(book: PostgresLedgerBook) -> None:
    await book.migrate()
    assert await book.post("pay_1", lines_of_posting(PAYMENT)) == 2


async def test_a_book_over_a_dsn_owns_and_closes_its_pool(database_url: str) -> None:
    schema = f"x_ledger_{uuid.uuid4().hex[:12]}"
    owned = postgres_ledger_book(database_url, schema=schema, table="lines")
    try:
        await owned.migrate()
        assert await owned.post("pay_1", lines_of_posting(PAYMENT)) == 2
    finally:
        await owned.close()
        await _drop(database_url, schema)


async def test_a_missing_table_is_a_driver_error_keeping_the_cause(
    pool: AsyncConnectionPool,
) -> None:
    missing = postgres_ledger_book(pool, schema=f"x_nope_{uuid.uuid4().hex[:8]}")
    with pytest.raises(XError) as caught:
        await missing.post("pay_1", lines_of_posting(PAYMENT))
    assert caught.value.code == "X_DRIVER_UNAVAILABLE"
    assert isinstance(caught.value.__cause__, psycopg.Error)


@pytest.mark.parametrize(
    ("kwargs", "what"),
    [({"table": ""}, "table"), ({"schema": " "}, "schema")],
)
def test_a_blank_table_or_schema_is_refused(kwargs: dict[str, str], what: str) -> None:
    with pytest.raises(XError) as caught:
        postgres_ledger_book("postgresql://postgres@127.0.0.1/test", **kwargs)
    assert caught.value.code == "X_CONFIG_INVALID"
    assert what in caught.value.message


def test_a_source_that_is_no_dsn_nor_pool_is_refused() -> None:
    with pytest.raises(XError, match="X_CONFIG_INVALID"):
        postgres_ledger_book(42)  # type: ignore[arg-type]


# --- concurrency -------------------------------------------------------------------------------

CURRENCIES = ["JPY", "EUR", "KWD"]


def _candidates(key: str, rng: random.Random) -> list[list[LedgerLine]]:
    """Two to four different balanced line sets for one key (different counts or amounts)."""
    out: list[list[LedgerLine]] = []
    while len(out) < rng.randint(2, 4):
        currency = rng.choice(CURRENCIES)
        parts = [rng.randint(-1000, 1000) for _ in range(rng.randint(1, 3))]
        parts.append(-sum(parts))
        legs = [("acct" + str(i), minor, currency) for i, minor in enumerate(parts)]
        lines = lines_of_posting(_posting(key, *legs))
        if lines not in out:
            out.append(lines)
    return out


@given(seed=st.integers(0, 2**32 - 1))
@settings(
    max_examples=8,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture],
)
async def test_concurrent_replays_and_conflicts_leave_one_balanced_set_per_key(
    book: PostgresLedgerBook, seed: int
) -> None:
    rng = random.Random(seed)
    prefix = f"s{seed}:"
    keys = [f"{prefix}k{i}" for i in range(4)]
    candidates = {key: _candidates(key, rng) for key in keys}
    calls = [
        (key, lines)
        for key in keys
        for lines in candidates[key]
        for _ in range(rng.randint(1, 3))  # each set replayed 1-3 times
    ]
    rng.shuffle(calls)

    async def attempt(key: str, lines: list[LedgerLine]) -> tuple[str, list[LedgerLine], object]:
        await asyncio.sleep(rng.random() / 200)
        try:
            return key, lines, await book.post(key, lines)
        except XError as exc:
            return key, lines, exc.code

    answers = await asyncio.gather(*(attempt(k, ls) for k, ls in calls))
    for key in keys:
        stored = await book.lines_of(key)
        assert stored in candidates[key]  # exactly one set, whole
        totals: dict[str, int] = {}
        for line in stored:
            totals[line.amount.currency] = totals.get(line.amount.currency, 0) + line.amount.minor
        assert all(total == 0 for total in totals.values())
        mine = [(ls, a) for k, ls, a in answers if k == key]
        wrote = [a for ls, a in mine if isinstance(a, int) and a > 0]
        assert wrote == [len(stored)]  # one post wrote the lines, once
        for lines, answer in mine:
            if lines == stored:
                assert answer in (0, len(stored))
            else:
                assert answer == "X_LEDGER_POSTING_CONFLICT"


async def test_a_worker_posts_through_the_postgres_book(
    pg_driver: PostgresJobDriver, book: PostgresLedgerBook
) -> None:
    post = ledger(name="payments.post", tenant="none", book=lambda: book)
    from ultimat3.core import swap_adapter
    from ultimat3.jobs.adapter import JOB_DRIVER

    with swap_adapter(JOB_DRIVER, pg_driver):
        first = await post.enqueue(PAYMENT)
        again = await post.enqueue(PAYMENT)  # the live row dedupes it
        worker = job_worker(jobs=[post], driver=pg_driver, handle_signals=False)
        await worker.start()
        try:
            for _ in range(200):
                row = await pg_driver.introspect.show(first.id)
                if row.state in ("done", "dead", "failed"):
                    break
                await asyncio.sleep(0.05)
        finally:
            await worker.stop()
    assert again.deduped
    assert row.state == "done"
    assert row.result == {"key": "pay_1", "lines": 2, "written": 2}
    assert await book.lines_of("pay_1") == lines_of_posting(PAYMENT)
