"""export_rows(): one part per page, the formula guard, resumable per page — and export then
import round-trips any rows."""

from __future__ import annotations

import csv
import io
import json
from collections.abc import Sequence
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from pydantic import BaseModel

from ultimat3.core import XError
from ultimat3.jobs.factories.export_rows import ExportPage, csv_cell, export_rows
from ultimat3.jobs.factories.import_rows import ImportBatch, import_rows
from ultimat3.jobs.testing import JobHarness, crash_proof
from ultimat3.storage import ObjectStore, memory_store


class In(BaseModel):
    org: str


class Row(BaseModel):
    id: int
    name: str
    note: str | None = None
    score: float
    ok: bool


COLUMNS = ["id", "name", "note", "score", "ok"]


def pager(rows: Sequence[dict[str, Any]]) -> Any:
    def read(page: ExportPage[In]) -> tuple[list[dict[str, Any]], int | None]:
        start = page.after if isinstance(page.after, int) else 0
        chunk = list(rows[start : start + page.limit])
        nxt = start + len(chunk)
        return chunk, (nxt if nxt < len(rows) else None)

    return read


def exporter(store: ObjectStore, rows: Sequence[dict[str, Any]], fmt: str, size: int) -> Any:
    return export_rows(
        name=f"rows.export.{fmt}",
        input=In,
        tenant="none",
        read=pager(rows),
        sink=lambda i: store,
        prefix=lambda i: f"exports/{i.org}",
        format=fmt,  # type: ignore[arg-type]
        columns=COLUMNS,
        page_size=size,
    )


async def import_parts(store: ObjectStore, fmt: str) -> list[Row]:
    seen: list[Row] = []

    async def handle(batch: ImportBatch[Any, Row]) -> None:
        seen.extend(batch.rows)

    class Part(BaseModel):
        key: str

    imp = import_rows(
        name=f"rows.import.{fmt}",
        input=Part,
        tenant="none",
        source=lambda i: store,
        key=lambda i: i.key,
        format=fmt,  # type: ignore[arg-type]
        columns=COLUMNS,
        schema=Row,
        handle=handle,
        page_bytes=97,
        batch=7,
        max_row_errors=0,
    )
    harness = JobHarness(jobs=[imp])
    async for info in store.list("exports/"):
        trace = await harness(imp, {"key": info.key})
        assert trace.state == "done", trace.last_error
    return seen


def guarded(text: str) -> str:
    return "'" + text if text[:1] in ("=", "+", "-", "@") else text


texts = st.text(st.sampled_from([*"ab ,\"\n\r'=+-@é€😀\t", "x"]), max_size=10)
rows_strategy = st.lists(
    st.fixed_dictionaries(
        {
            "id": st.integers(-(2**40), 2**40),
            "name": texts,
            "note": st.none() | texts.filter(bool),
            "score": st.floats(allow_nan=False, allow_infinity=False),
            "ok": st.booleans(),
        }
    ),
    max_size=25,
)


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(rows_strategy, st.sampled_from(["csv", "ndjson"]), st.integers(1, 9))
async def test_export_then_import_round_trips_any_rows(
    rows: list[dict[str, Any]], fmt: str, size: int
) -> None:
    store = memory_store()
    exp = exporter(store, rows, fmt, size)
    trace = await JobHarness(jobs=[exp])(exp, {"org": "o1"})
    assert trace.state == "done", trace.last_error
    parts = max(1, -(-len(rows) // size))
    assert trace.result == {"rows": len(rows), "parts": parts, "prefix": "exports/o1"}
    got = [r.model_dump() for r in await import_parts(store, fmt)]
    if fmt == "csv":  # the formula guard aside
        rows = [
            {**r, "name": guarded(r["name"]), "note": r["note"] and guarded(r["note"])}
            for r in rows
        ]
    assert got == rows


async def test_each_page_is_one_part_with_its_header_and_formulas_are_guarded() -> None:
    store = memory_store()
    rows = [
        {"id": 1, "name": "=SUM(A1:A9)", "note": None, "score": -1.5, "ok": True},
        {"id": -2, "name": "+1", "note": "@home", "score": 2.0, "ok": False},
        {"id": 3, "name": "-x", "note": "plain", "score": 0.0, "ok": True},
    ]
    exp = exporter(store, rows, "csv", 2)
    await JobHarness(jobs=[exp])(exp, {"org": "o1"})
    keys = [i.key async for i in store.list()]
    assert keys == ["exports/o1/part-00000.csv", "exports/o1/part-00001.csv"]
    first = list(csv.reader(io.StringIO((await store.get(keys[0])).decode(), newline="")))
    assert first == [
        COLUMNS,
        ["1", "'=SUM(A1:A9)", "", "-1.5", "true"],
        ["-2", "'+1", "'@home", "2.0", "false"],
    ]
    second = list(csv.reader(io.StringIO((await store.get(keys[1])).decode(), newline="")))
    assert second == [COLUMNS, ["3", "'-x", "plain", "0.0", "true"]]


async def test_ndjson_parts_are_written_as_is() -> None:
    store = memory_store()
    rows = [{"id": 1, "name": "=1+1", "note": None, "score": 1.0, "ok": True, "extra": "dropped"}]
    exp = exporter(store, rows, "ndjson", 5)
    await JobHarness(jobs=[exp])(exp, {"org": "o"})
    body = await store.get("exports/o/part-00000.ndjson")
    assert [json.loads(x) for x in body.splitlines()] == [
        {"id": 1, "name": "=1+1", "note": None, "score": 1.0, "ok": True}
    ]


async def test_an_empty_export_writes_one_part_with_the_header_only() -> None:
    store = memory_store()
    exp = exporter(store, [], "csv", 5)
    trace = await JobHarness(jobs=[exp])(exp, {"org": "o"})
    assert trace.result == {"rows": 0, "parts": 1, "prefix": "exports/o"}
    assert await store.get("exports/o/part-00000.csv") == b"id,name,note,score,ok\r\n"


async def test_a_crash_at_every_page_boundary_reads_each_landed_page_once() -> None:
    store = memory_store()
    rows = [{"id": i, "name": f"n{i}", "note": None, "score": 0.5, "ok": True} for i in range(9)]
    exp = exporter(store, rows, "csv", 2)
    report = await crash_proof(exp, {"org": "o"})
    assert report.state == "done", report.last_error
    pages = [n for n in report.steps if n.startswith("page:")]
    assert len(pages) == 5 and all(report.calls[p] == 1 for p in pages)
    assert [i.key async for i in store.list()] == [f"exports/o/part-{n:05d}.csv" for n in range(5)]


@pytest.mark.parametrize(
    ("read", "needle"),
    [
        (lambda page: [], "not a (rows, next_cursor) pair"),
        (lambda page: ([{"id": 1}], None), "lacks ['name', 'note', 'score', 'ok']"),
        (lambda page: ([dict.fromkeys(COLUMNS, 1)] * 3, None), "over page.limit=2"),
        (lambda page: ([], page.after if page.after is not None else 0), "would never end"),
    ],
)
async def test_a_read_that_breaks_the_contract_fails_the_run_naming_it(
    read: Any, needle: str
) -> None:
    store = memory_store()
    exp = export_rows(
        name="bad.export",
        input=In,
        tenant="none",
        read=read,
        sink=lambda i: store,
        prefix=lambda i: "x",
        format="csv",
        columns=COLUMNS,
        page_size=2,
    )
    trace = await JobHarness(jobs=[exp])(exp, {"org": "o"})
    assert trace.state in ("failed", "dead")
    assert trace.last_error is not None and trace.last_error["code"] == "X_INVARIANT"
    assert needle in trace.last_error["message"]


async def test_a_prefix_that_escapes_the_store_is_refused() -> None:
    store = memory_store()
    exp = export_rows(
        name="esc.export",
        input=In,
        tenant="none",
        read=pager([]),
        sink=lambda i: store,
        prefix=lambda i: "../up",
        format="csv",
        columns=COLUMNS,
    )
    trace = await JobHarness(jobs=[exp])(exp, {"org": "o"})
    assert trace.last_error is not None and trace.last_error["code"] == "X_STORAGE_KEY_INVALID"
    assert [i.key async for i in store.list()] == []


def test_csv_cells() -> None:
    assert [csv_cell(v) for v in (None, True, 3, -3, 1.5, "=x", "@", "a", [1])] == [
        "",
        "true",
        "3",
        "-3",
        "1.5",
        "'=x",
        "'@",
        "a",
        "[1]",
    ]


@pytest.mark.parametrize(
    ("options", "needle"),
    [
        ({"name": " "}, "name"),
        ({"format": "xml"}, "format"),
        ({"page_size": 0}, "page_size 0"),
        ({"columns": "id"}, "columns"),
    ],
)
def test_a_declaration_that_cannot_run_is_refused(options: dict[str, Any], needle: str) -> None:
    fields: dict[str, Any] = {
        "name": "e",
        "input": In,
        "tenant": "none",
        "read": pager([]),
        "sink": lambda i: memory_store(),
        "prefix": lambda i: "p",
        "format": "csv",
        "columns": COLUMNS,
        **options,
    }
    with pytest.raises(XError) as caught:
        export_rows(**fields)
    assert caught.value.code == "X_JOB_DECLARATION_INVALID"
    assert needle in caught.value.message
