"""import_rows(): every rule of the spec's table, on the memory driver and a memory store."""

from __future__ import annotations

import csv
import io
import json
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from pydantic import BaseModel

from ultimat3.core import XError
from ultimat3.jobs import Retry
from ultimat3.jobs.factories.import_rows import ImportBatch, ImportErrors, import_rows
from ultimat3.jobs.testing import JobHarness, crash_proof
from ultimat3.storage import ObjectStore, memory_store


class Order(BaseModel):
    id: int
    total: int
    note: str | None = None


class In(BaseModel):
    key: str


def declare(
    store: ObjectStore,
    seen: list[ImportBatch[In, Order]],
    *,
    errors: ObjectStore | None = None,
    **options: Any,
) -> Any:
    async def handle(batch: ImportBatch[In, Order]) -> None:
        seen.append(batch)

    return import_rows(
        name=options.pop("name", "orders.import"),
        input=In,
        tenant="none",
        source=lambda i: store,
        key=lambda i: i.key,
        format=options.pop("format", "csv"),
        columns=options.pop("columns", ["id", "total", "note"]),
        schema=Order,
        handle=handle,
        errors=ImportErrors(sink=lambda i: errors, prefix=lambda i: f"errors/{i.key}")
        if errors is not None
        else None,
        **options,
    )


def rows_of(seen: list[ImportBatch[In, Order]]) -> list[tuple[int, int, str | None]]:
    return [(r.id, r.total, r.note) for b in seen for r in b.rows]


def failed_with(trace: Any, code: str) -> dict[str, Any]:
    assert trace.state in ("failed", "dead"), trace.state
    error = dict(trace.last_error)
    assert error["code"] == code, error
    return error


async def test_a_csv_is_handled_in_batches_one_step_per_page_with_text_coerced_as_a_form() -> None:
    store = memory_store()
    body = "".join(f"{i},{i * 10},{'' if i % 2 else 'n' + str(i)}\r\n" for i in range(1, 41))
    await store.put(
        "in/orders.csv",
        (
            "\ufeffnote,id,total\r\n"
            + "".join(
                f"{n},{i},{t}\r\n"
                for i, t, n in (line.split(",") for line in body.split("\r\n")[:-1])
            )
        ).encode(),
    )
    seen: list[ImportBatch[In, Order]] = []
    imp = declare(store, seen, page_bytes=64, batch=3)
    trace = await JobHarness(jobs=[imp])(imp, {"key": "in/orders.csv"})
    assert trace.state == "done", trace.last_error
    assert rows_of(seen) == [(i, i * 10, None if i % 2 else f"n{i}") for i in range(1, 41)]
    assert all(len(b.rows) <= 3 for b in seen)
    pages = sorted(name for name in trace.steps if name.startswith("page:"))
    assert trace.result == {"rows": 40, "refused": 0, "pages": len(pages), "error_prefix": None}
    assert len(pages) > 5
    assert {b.page for b in seen} <= set(range(len(pages)))
    assert len({b.page for b in seen}) > 5
    offsets = [trace.steps[p].output["offset"] for p in pages]
    assert offsets == sorted(offsets) and len(set(offsets)) == len(offsets)


@pytest.mark.parametrize(
    ("content", "needle"),
    [
        (b"id,total\n1,2\n", "missing ['note']"),
        (b"id,total,note,extra\n1,2,,3\n", "undeclared ['extra']"),
        (b"id,total,note,id\n", "named twice ['id']"),
        (b"", "empty"),
        (b"\xef\xbb\xbf", "empty"),
        (b"\n\n\r\n", "blank"),
        (b"\nid,total,note\n1,2,\n", "blank"),
    ],
)
async def test_a_header_that_does_not_name_exactly_the_columns_is_a_mismatch(
    content: bytes, needle: str
) -> None:
    store = memory_store()
    await store.put("f.csv", content)
    seen: list[ImportBatch[In, Order]] = []
    imp = declare(store, seen)
    trace = await JobHarness(jobs=[imp])(imp, {"key": "f.csv"})
    error = failed_with(trace, "X_IMPORT_HEADER_MISMATCH")
    assert needle in error["message"] and "'f.csv'" in error["message"]
    assert trace.attempts == 1  # terminal
    assert seen == []


async def test_a_header_in_any_order_reads_the_rows_by_name() -> None:
    store = memory_store()
    await store.put("f.csv", b"total,note,id\n5,hi,1\n")
    seen: list[ImportBatch[In, Order]] = []
    imp = declare(store, seen)
    await JobHarness(jobs=[imp])(imp, {"key": "f.csv"})
    assert rows_of(seen) == [(1, 5, "hi")]


async def test_an_unclosed_quote_is_too_large_at_its_byte_offset() -> None:
    store = memory_store()
    await store.put("f.csv", b'id,total,note\n1,2,ok\n3,4,"never closed\n' + b"5,6,x\n" * 200)
    seen: list[ImportBatch[In, Order]] = []
    imp = declare(store, seen, max_record_bytes=256, page_bytes=128)
    trace = await JobHarness(jobs=[imp])(imp, {"key": "f.csv"})
    error = failed_with(trace, "X_IMPORT_RECORD_TOO_LARGE")
    assert error["meta"]["offset"] == 21
    assert "byte offset 21" in error["message"]


async def test_refused_rows_are_line_field_code_parts_per_page_never_the_value() -> None:
    store, reports = memory_store(), memory_store()
    await store.put(
        "f.csv",
        b"id,total,note\n1,10,\nSECRET-ID,20,\n3,lots-SECRET,\n4,40,a,b\n5,50,\n",
    )
    seen: list[ImportBatch[In, Order]] = []
    imp = declare(store, seen, errors=reports, page_bytes=30)
    harness = JobHarness(jobs=[imp])
    trace = await harness(imp, {"key": "f.csv"})
    assert trace.state == "done", trace.last_error
    assert rows_of(seen) == [(1, 10, None), (5, 50, None)]
    prefix = f"errors/f.csv/{trace.run_id}"
    assert trace.result == {
        "rows": 2,
        "refused": 3,
        "pages": trace.result["pages"],
        "error_prefix": prefix,
    }
    parts = [info.key async for info in reports.list(prefix + "/")]
    assert parts and all(p.startswith(prefix + "/errors-") and p.endswith(".ndjson") for p in parts)
    report = [json.loads(line) for p in parts for line in (await reports.get(p)).splitlines()]
    assert sorted(report, key=lambda r: r["line"]) == [
        {"line": 3, "field": "id", "code": "int_parsing"},
        {"line": 4, "field": "total", "code": "int_parsing"},
        {"line": 5, "field": None, "code": "csv_field_count"},
    ]
    for p in parts:
        assert b"SECRET" not in await reports.get(p)
        page = int(p.rsplit("-", 1)[1].split(".")[0])
        assert f"page:{page:05d}" in trace.steps


async def test_past_max_row_errors_the_run_fails_and_the_crossing_batch_is_not_handled() -> None:
    store, reports = memory_store(), memory_store()
    await store.put("f.csv", b"id,total,note\n1,1,\n2,2,\nx,3,\n4,4,\ny,5,\n6,6,\n")
    seen: list[ImportBatch[In, Order]] = []
    imp = declare(store, seen, errors=reports, batch=2, max_row_errors=1)
    trace = await JobHarness(jobs=[imp])(imp, {"key": "f.csv"})
    error = failed_with(trace, "X_IMPORT_TOO_MANY_ERRORS")
    assert "max_row_errors=1" in error["message"]
    assert rows_of(seen) == [(1, 1, None), (2, 2, None), (4, 4, None)]  # not the 5/6 batch
    report = await reports.get(f"errors/f.csv/{trace.run_id}/errors-00000.ndjson")
    assert [json.loads(x)["line"] for x in report.splitlines()] == [4, 6]


async def test_max_row_errors_zero_fails_on_the_first_refused_row() -> None:
    store = memory_store()
    await store.put("f.csv", b"id,total,note\n1,1,\nbad,2,\n")
    seen: list[ImportBatch[In, Order]] = []
    imp = declare(store, seen, max_row_errors=0)
    trace = await JobHarness(jobs=[imp])(imp, {"key": "f.csv"})
    failed_with(trace, "X_IMPORT_TOO_MANY_ERRORS")
    assert seen == []


async def test_a_file_that_is_not_utf8_fails_naming_the_byte_offset() -> None:
    store = memory_store()
    await store.put("f.csv", "id,total,note\n1,2,café\n".encode("latin-1"))
    seen: list[ImportBatch[In, Order]] = []
    imp = declare(store, seen)
    trace = await JobHarness(jobs=[imp])(imp, {"key": "f.csv"})
    error = failed_with(trace, "X_IMPORT_ENCODING_INVALID")
    assert error["meta"]["offset"] == 21 and "offset 21" in error["message"]
    assert trace.attempts == 1
    assert seen == []


async def test_ndjson_rows_and_lines_that_are_not_objects_are_refused() -> None:
    store, reports = memory_store(), memory_store()
    await store.put(
        "f.ndjson",
        b'{"id": 1, "total": 2}\n[1]\n\n{"id": 3, "total": "x"}\nnot json\r\n'
        b'{"id": 4, "total": 5, "note": "n", "other": 1}\r\n',
    )
    seen: list[ImportBatch[In, Order]] = []
    imp = declare(store, seen, format="ndjson", errors=reports, page_bytes=16)
    trace = await JobHarness(jobs=[imp])(imp, {"key": "f.ndjson"})
    assert trace.state == "done", trace.last_error
    assert rows_of(seen) == [(1, 2, None), (4, 5, "n")]
    parts = [i.key async for i in reports.list("errors/")]
    lines = [x for p in parts for x in (await reports.get(p)).splitlines()]
    report = sorted((json.loads(x) for x in lines), key=lambda r: r["line"])
    assert report == [
        {"line": 2, "field": None, "code": "ndjson_not_object"},
        {"line": 4, "field": "total", "code": "int_parsing"},
        {"line": 5, "field": None, "code": "json_invalid"},
    ]


class Vanishing:
    """A store whose object disappears after the first page was read."""

    def __init__(self, inner: ObjectStore) -> None:
        self.inner = inner
        self.name = "vanishing"
        self.stats = 0

    async def stat(self, key: str) -> Any:
        self.stats += 1
        if self.stats > 1:
            await self.inner.delete(key)
        return await self.inner.stat(key)

    async def get(self, key: str, *, range: Any = None) -> bytes:
        return await self.inner.get(key, range=range)


async def test_a_source_object_that_vanishes_between_pages_retries_then_dead_letters() -> None:
    inner = memory_store()
    await inner.put("f.csv", b"id,total,note\n" + b"1,1,\n" * 50)
    store = Vanishing(inner)
    seen: list[ImportBatch[In, Order]] = []
    imp = declare(store, seen, page_bytes=64, retry=Retry(attempts=3))  # type: ignore[arg-type]
    trace = await JobHarness(jobs=[imp])(imp, {"key": "f.csv"})
    error = failed_with(trace, "X_STORAGE_NOT_FOUND")
    assert "'f.csv'" in error["message"]
    assert trace.attempts == 3 and trace.state == "dead"


async def test_an_object_rewritten_between_pages_is_treated_as_gone() -> None:
    store = memory_store()
    await store.put("f.csv", b"id,total,note\n" + b"1,1,\n" * 50)
    seen: list[ImportBatch[In, Order]] = []

    async def handle(batch: ImportBatch[In, Order]) -> None:
        seen.append(batch)
        await store.put("f.csv", b"id,total,note\n" + b"2,2,\n" * 50)

    imp = import_rows(
        name="rewritten",
        input=In,
        tenant="none",
        source=lambda i: store,
        key=lambda i: i.key,
        format="csv",
        columns=["id", "total", "note"],
        schema=Order,
        handle=handle,
        page_bytes=64,
        retry=Retry(attempts=1),
    )
    trace = await JobHarness(jobs=[imp])(imp, {"key": "f.csv"})
    error = failed_with(trace, "X_STORAGE_NOT_FOUND")
    assert "changed between pages" in error["message"]


@pytest.mark.parametrize("key", ["../escape.csv", "/abs.csv", "a//b.csv", "a\\b.csv"])
async def test_a_key_that_escapes_the_store_is_refused_before_anything_is_read(key: str) -> None:
    store = memory_store()
    seen: list[ImportBatch[In, Order]] = []
    imp = declare(store, seen)
    trace = await JobHarness(jobs=[imp])(imp, {"key": key})
    failed_with(trace, "X_STORAGE_KEY_INVALID")
    assert trace.steps == {} and trace.attempts == 1


async def test_a_crash_at_every_page_boundary_resumes_and_handles_every_row() -> None:
    store = memory_store()
    await store.put("f.csv", b"id,total,note\n" + b"".join(b"%d,%d,\n" % (i, i) for i in range(60)))
    seen: list[ImportBatch[In, Order]] = []
    imp = declare(store, seen, page_bytes=60, batch=4)
    report = await crash_proof(imp, {"key": "f.csv"})
    assert report.state == "done", report.last_error
    pages = [name for name in report.steps if name.startswith("page:")]
    assert len(pages) > 5
    assert {f"{p}:completed" for p in pages} <= set(report.crashes)  # killed after every page
    assert all(report.calls[p] == 1 for p in pages)  # a landed page is never run again
    assert set(rows_of(seen)) == {(i, i, None) for i in range(60)}
    assert report.result["rows"] == 60


@pytest.mark.parametrize(
    ("options", "needle"),
    [
        ({"name": ""}, "name"),
        ({"format": "xlsx"}, "format 'xlsx'"),
        ({"columns": []}, "columns"),
        ({"columns": ["id", "id"]}, "columns"),
        ({"page_bytes": 0}, "page_bytes 0"),
        ({"batch": 0}, "batch 0"),
        ({"max_record_bytes": -1}, "max_record_bytes -1"),
        ({"max_row_errors": -1}, "max_row_errors -1"),
    ],
)
def test_a_declaration_that_cannot_run_is_refused_naming_each_cause(
    options: dict[str, Any], needle: str
) -> None:
    with pytest.raises(XError) as caught:
        declare(memory_store(), [], **options)
    assert caught.value.code == "X_JOB_DECLARATION_INVALID"
    assert needle in caught.value.message


def test_a_schema_that_is_not_a_model_and_a_handle_that_is_not_callable_are_refused() -> None:
    with pytest.raises(XError) as caught:
        import_rows(
            name="x",
            input=In,
            tenant="none",
            source=lambda i: memory_store(),
            key=lambda i: i.key,
            format="csv",
            columns=["id"],
            schema=dict,  # type: ignore[type-var]
            handle="nope",  # type: ignore[arg-type]
        )
    assert caught.value.code == "X_JOB_DECLARATION_INVALID"
    assert "schema" in caught.value.message and "handle" in caught.value.message


class Texts(BaseModel):
    a: str
    b: str
    c: str


def _rfc4180(row: list[str]) -> str:
    def one(cell: str) -> str:
        if any(ch in cell for ch in ',"\r\n'):
            return '"' + cell.replace('"', '""') + '"'
        return cell

    return ",".join(one(c) for c in row)


_cells = st.text(st.sampled_from([*'ab ,"\n\r=é€😀', "x"]), max_size=6)


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    st.lists(st.lists(_cells, min_size=3, max_size=3), max_size=15),
    st.permutations(["a", "b", "c"]),
    st.sampled_from(["\n", "\r\n"]),
    st.booleans(),
    st.data(),
)
async def test_the_rows_handled_equal_the_csv_module_reading_the_whole_file(
    rows: list[list[str]], header: list[str], end: str, bom: bool, data: st.DataObject
) -> None:
    text = end.join(_rfc4180(r) for r in [header, *rows]) + end
    raw = (b"\xef\xbb\xbf" if bom else b"") + text.encode()
    longest = max(len(_rfc4180(r).encode()) + len(end) for r in [header, *rows])
    page_bytes = data.draw(st.integers(longest, max(longest, len(raw)) + 8), label="page_bytes")
    store = memory_store()
    await store.put("f.csv", raw)
    seen: list[Texts] = []

    async def handle(batch: ImportBatch[In, Texts]) -> None:
        seen.extend(batch.rows)

    imp = import_rows(
        name="texts.import",
        input=In,
        tenant="none",
        source=lambda i: store,
        key=lambda i: i.key,
        format="csv",
        columns=["a", "b", "c"],
        schema=Texts,
        handle=handle,
        page_bytes=page_bytes,
        batch=4,
        max_row_errors=0,
    )
    trace = await JobHarness(jobs=[imp])(imp, {"key": "f.csv"})
    assert trace.state == "done", trace.last_error
    expected = list(csv.DictReader(io.StringIO(text, newline="")))
    assert [r.model_dump() for r in seen] == expected
