"""``backfill()``: one durable step per page, the x_backfills ledger, at least once per page."""

from __future__ import annotations

import io
import json
from collections import Counter
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from pydantic import BaseModel

from ultimat3.core import XError
from ultimat3.jobs import Retry
from ultimat3.jobs.adapter import driver_backfills
from ultimat3.jobs.cli import main_async
from ultimat3.jobs.factories.backfill import BackfillBatch, BackfillPage, backfill
from ultimat3.jobs.testing import JobHarness
from ultimat3_testkit.engine_drivers import Engine


class Table:
    """A source over ``n`` numbered rows, paged by id; it counts what it was asked."""

    def __init__(self, n: int) -> None:
        self.rows: list[dict[str, Any]] = [{"id": k, "v": f"row-{k}"} for k in range(n)]
        self.reads: Counter[Any] = Counter()

    async def source(self, page: BackfillPage[Any]) -> tuple[list[dict[str, Any]], Any]:
        self.reads[page.after] += 1
        start = 0 if page.after is None else int(page.after) + 1
        chunk = [r for r in self.rows if r["id"] >= start][: page.limit]
        nxt = (
            chunk[-1]["id"]
            if len(chunk) == page.limit and chunk[-1]["id"] < len(self.rows) - 1
            else None
        )
        return chunk, nxt


async def test_every_row_is_handled_page_by_page_and_the_ledger_books_the_pass(
    engine: Engine,
) -> None:
    table = Table(1_234)
    handled: list[int] = []
    pages: list[int] = []

    def handle(batch: BackfillBatch[Any]) -> None:  # a sync callback works too
        pages.append(batch.page)
        handled.extend(r["id"] for r in batch.rows)

    job = backfill(name="bf_all", source=table.source, handle=handle, page_size=100)
    h = engine.harness([job])
    trace = await h(job, {})
    assert trace.state == "done", trace.last_error
    assert handled == list(range(1_234))
    assert pages == list(range(13))
    assert trace.result == {"rows": 1_234, "pages": 13, "backfill_id": trace.result["backfill_id"]}
    ledger = driver_backfills(engine.driver)
    assert ledger is not None
    [row] = [r for r in await ledger.list() if r.name == "bf_all"]
    assert (row.id, row.state, row.rows, row.cursor, row.job_id) == (
        trace.result["backfill_id"],
        "done",
        1_234,
        None,
        trace.id,
    )


async def test_a_retry_resumes_after_the_last_completed_page(engine: Engine) -> None:
    """Pages 0-4 completed are never read again; page 5 (its handle threw) is handled twice —
    at least once per page."""
    table = Table(1_000)
    seen: Counter[int] = Counter()
    failed: list[int] = []

    async def handle(batch: BackfillBatch[Any]) -> None:
        seen[batch.page] += 1
        if batch.page == 5 and not failed:
            failed.append(batch.page)
            raise RuntimeError("the warehouse blinked")

    job = backfill(
        name="bf_retry",
        source=table.source,
        handle=handle,
        page_size=100,
        retry=Retry(attempts=3, delay=50),
    )
    trace = await engine.harness([job])(job, {})
    assert trace.state == "done", trace.last_error
    assert trace.attempts == 2
    assert seen == Counter(dict.fromkeys(range(10), 1) | {5: 2})
    assert all(count == 1 for after, count in table.reads.items() if after != 499)
    assert table.reads[499] == 2  # page 5 read again, nothing before it
    assert trace.result["rows"] == 1_000


async def test_the_final_attempt_that_throws_marks_the_pass_failed(engine: Engine) -> None:
    async def handle(batch: BackfillBatch[Any]) -> None:
        if batch.page == 1:
            raise RuntimeError("poison row")

    job = backfill(
        name="bf_fail",
        source=Table(300).source,
        handle=handle,
        page_size=100,
        retry=Retry(attempts=2, delay=50, dead_letter=True),
    )
    trace = await engine.harness([job])(job, {})
    assert trace.state == "dead"
    ledger = driver_backfills(engine.driver)
    assert ledger is not None
    [row] = [r for r in await ledger.list() if r.name == "bf_fail"]
    assert (row.state, row.rows, row.cursor) == ("failed", 100, 99)


class Region(BaseModel):
    region: str


async def test_the_input_names_the_pass_and_a_live_pass_dedupes(engine: Engine) -> None:
    got: list[str] = []

    def source(page: BackfillPage[Region]) -> tuple[list[str], Any]:
        return [page.input.region], None

    job = backfill(
        name="bf_region",
        input=Region,
        source=source,
        handle=lambda batch: got.extend(batch.rows),
    )
    h = engine.harness([job])
    first = await h.enqueue(job, {"region": "eu"})
    again = await h.enqueue(job, Region(region="eu"))
    other = await h.enqueue(job, {"region": "us"})
    assert again.deduped and again.id == first.id
    assert not other.deduped
    await h.drain()
    assert sorted(got) == ["eu", "us"]


async def test_a_pass_starts_at_the_given_cursor() -> None:
    table = Table(50)
    handled: list[int] = []
    job = backfill(
        name="bf_from",
        source=table.source,
        handle=lambda b: handled.extend(r["id"] for r in b.rows),
        page_size=20,
        cursor=29,
    )
    async with JobHarness(jobs=[job]) as h:
        trace = await h(job, {})
    assert handled == list(range(30, 50))
    assert trace.result["rows"] == 20


@pytest.mark.parametrize(
    ("answer", "fragment"),
    [
        (["not", "a", "pair"], "not (rows, next_cursor)"),
        (([1] * 11, None), "more than page.limit 10"),
    ],
)
async def test_a_source_that_breaks_its_contract_fails_the_run_naming_it(
    answer: Any, fragment: str
) -> None:
    job = backfill(
        name="bf_bad_source",
        source=lambda page: answer,
        handle=lambda batch: None,
        page_size=10,
        retry=Retry(attempts=1),
    )
    async with JobHarness(jobs=[job]) as h:
        trace = await h(job, {})
    assert trace.state in {"dead", "failed"}
    assert trace.last_error is not None
    assert trace.last_error["code"] == "X_INVARIANT"
    assert fragment in trace.last_error["message"]


@pytest.mark.parametrize(
    ("options", "fragment"),
    [
        ({"name": ""}, "name is required"),
        ({"name": "   "}, "name is required"),
        ({"page_size": 0}, "page_size 0"),
        ({"page_size": 10_001}, "page_size 10001"),
        ({"page_size": True}, "page_size True"),
        ({"source": "rows"}, "callables"),
        ({"handle": None}, "callables"),
        ({"cursor": object()}, "cursor"),
    ],
)
def test_a_bad_declaration_is_refused_naming_what(options: dict[str, Any], fragment: str) -> None:
    base: dict[str, Any] = {
        "name": "bf_decl",
        "source": lambda page: ([], None),
        "handle": lambda batch: None,
    }
    with pytest.raises(XError) as exc:
        backfill(**(base | options))
    assert exc.value.code == "X_JOB_DECLARATION_INVALID"
    assert fragment in exc.value.message
    assert exc.value.fix


def test_the_factory_is_reachable_lazily_from_the_package() -> None:
    from ultimat3.jobs import backfill as lazy

    assert lazy is backfill


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    n=st.integers(min_value=0, max_value=120),
    page_size=st.integers(min_value=1, max_value=25),
    fail_page=st.integers(min_value=0, max_value=10),
)
async def test_any_table_any_page_size_any_failure_every_row_at_least_once(
    n: int, page_size: int, fail_page: int
) -> None:
    """Whatever the size, the page size and where one attempt dies, the rows handled cover
    every row, each page is handled at most twice (once more after the failure), and the
    result counts each row once."""
    table = Table(n)
    handled: Counter[int] = Counter()
    failed: list[int] = []

    def handle(batch: BackfillBatch[Any]) -> None:
        handled.update(r["id"] for r in batch.rows)
        if batch.page == fail_page and not failed:
            failed.append(1)
            raise RuntimeError("once")

    job = backfill(
        name="bf_prop",
        source=table.source,
        handle=handle,
        page_size=page_size,
        retry=Retry(attempts=2, delay=1),
    )
    async with JobHarness(jobs=[job]) as h:
        trace = await h(job, {})
    assert trace.state == "done", trace.last_error
    assert set(handled) == set(range(n))
    assert all(1 <= c <= 2 for c in handled.values())
    assert trace.result["rows"] == n


async def test_x_jobs_show_carries_the_runs_ledger_row() -> None:
    job = backfill(name="bf_cli", source=Table(30).source, handle=lambda b: None, page_size=10)
    async with JobHarness(jobs=[job]) as h:
        trace = await h(job, {})
        out = io.StringIO()
        code = await main_async(
            ["jobs", "show", trace.id, "--json"], driver=h.driver, stdout=out, stderr=io.StringIO()
        )
        assert code == 0
        shown = json.loads(out.getvalue())
        out = io.StringIO()
        code = await main_async(
            ["db", "backfill", "--list", "--json"],
            driver=h.driver,
            stdout=out,
            stderr=io.StringIO(),
        )
        assert code == 0
        listed = json.loads(out.getvalue())
    assert shown["backfill"]["name"] == "bf_cli"
    assert shown["backfill"]["rows"] == 30
    assert shown["backfill"]["state"] == "done"
    assert [b["job_id"] for b in listed["backfills"]] == [trace.id]
