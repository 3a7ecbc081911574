"""The page splitter against Python's own readers: whatever the page size, the records found on
bytes, page after page, are the ones ``csv`` (or ``json.loads`` per line) reads from the whole."""

from __future__ import annotations

import csv
import io
import json
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from ultimat3.core import XError
from ultimat3.jobs.factories._bulk_records import BOM, Format, Record, read_page

CELL_CHARS = st.sampled_from([*"ab ,\"\n\r'=é€😀\t;", "x", "1", "-"])
cells = st.text(CELL_CHARS, max_size=8)


def rfc4180(row: list[str]) -> str:
    """One record as RFC 4180 writes it: a field holding a comma, a quote, CR or LF is quoted
    (quotes doubled); a lone empty field is quoted so the record is not a blank line. (Python's
    csv.writer leaves a CR unquoted under lineterminator='\\n', which its reader then reads as
    a line end.)"""

    def one(cell: str) -> str:
        if any(c in cell for c in ',"\r\n') or (cell == "" and len(row) == 1):
            return '"' + cell.replace('"', '""') + '"'
        return cell

    return ",".join(one(c) for c in row)


@st.composite
def csv_files(draw: st.DrawFn) -> tuple[bytes, list[list[str]]]:
    width = draw(st.integers(1, 4))
    rows = draw(st.lists(st.lists(cells, min_size=width, max_size=width), max_size=12))
    header = [f"c{i}" for i in range(width)]
    end = draw(st.sampled_from(["\n", "\r\n"]))
    out = io.StringIO(newline="")
    out.write(rfc4180(header) + end)
    blank_at = draw(st.sets(st.integers(1, len(rows) + 1), max_size=2))
    for i, row in enumerate(rows, start=1):
        if i in blank_at:
            out.write(end)
        out.write(rfc4180(row) + end)
    text = out.getvalue()
    if draw(st.booleans()):  # no line end after the last record
        text = text.removesuffix("\r\n").removesuffix("\n")
    data = text.encode()
    if draw(st.booleans()):
        data = BOM + data
    return data, [header, *rows]


async def read_all(
    data: bytes, page_bytes: int, format: Format, max_record_bytes: int = 1 << 20
) -> tuple[list[Record], int]:
    """Every record, page after page, as import_rows reads them; and how many pages."""

    async def get(start: int, stop: int) -> bytes:
        return data[start:stop]

    offset, line, pages = 0, 1, 0
    records: list[Record] = []
    while True:
        page = await read_page(
            get,
            offset=offset,
            line=line,
            size=len(data),
            page_bytes=page_bytes,
            format=format,
            key="file",
            max_record_bytes=max_record_bytes,
        )
        pages += 1
        records += page.records  # read lazily: end and line are final after this
        assert page.end > offset or page.end == len(data), "a page must move forward"
        offset, line = page.end, page.line
        if offset >= len(data):
            return records, pages


def python_csv(data: bytes) -> list[list[str]]:
    """The non-blank records, as the csv module reads the whole file."""
    text = data.removeprefix(BOM).decode()
    return [fields for fields in csv.reader(io.StringIO(text, newline="")) if fields]


def first_record_at(data: bytes, offset: int) -> list[str]:
    """The csv module's first record reading from ``offset``: the offset is a record start."""
    text = data[offset:].decode()
    return next(fields for fields in csv.reader(io.StringIO(text, newline="")) if fields)


@settings(max_examples=300, suppress_health_check=[HealthCheck.too_slow])
@given(csv_files(), st.data())
async def test_csv_records_equal_the_csv_module_reading_the_whole_file(
    file: tuple[bytes, list[list[str]]], data: st.DataObject
) -> None:
    raw, rows = file
    page_bytes = data.draw(st.integers(1, len(raw) + 4), label="page_bytes")
    records, _ = await read_all(raw, page_bytes, "csv")
    got = [r for r in records if r.problem is None]
    assert [r.values for r in got] == python_csv(raw) == rows
    for r in got:  # each record's offset and line are where it starts (lines end with LF)
        assert first_record_at(raw, r.offset) == r.values
        assert r.line == 1 + raw[: r.offset].count(b"\n")


@st.composite
def ndjson_files(draw: st.DrawFn) -> tuple[bytes, list[dict[str, Any]]]:
    values = st.none() | st.booleans() | st.integers() | st.text(CELL_CHARS, max_size=6)
    objects = draw(
        st.lists(st.dictionaries(st.text(CELL_CHARS, max_size=3), values, max_size=3), max_size=10)
    )
    end = draw(st.sampled_from(["\n", "\r\n"]))
    lines = []
    for obj in objects:
        lines.append(json.dumps(obj, ensure_ascii=draw(st.booleans())))
        if draw(st.integers(0, 5)) == 0:
            lines.append("")
    text = end.join(lines) + (end if draw(st.booleans()) else "")
    return text.encode(), objects


@settings(max_examples=200, suppress_health_check=[HealthCheck.too_slow])
@given(ndjson_files(), st.data())
async def test_ndjson_records_equal_json_loads_per_line(
    file: tuple[bytes, list[dict[str, Any]]], data: st.DataObject
) -> None:
    raw, objects = file
    page_bytes = data.draw(st.integers(1, len(raw) + 4), label="page_bytes")
    records, _ = await read_all(raw, page_bytes, "ndjson")
    assert [r.values for r in records] == [
        json.loads(line) for line in raw.decode().split("\n") if line.strip()
    ]
    assert [r.values for r in records] == objects


async def test_a_page_uses_its_whole_read_so_pages_are_about_size_over_page_bytes() -> None:
    raw = b"h\n" + b"1\n" * 50_000  # two-byte rows
    _, pages = await read_all(raw, 10_000, "csv")
    assert pages == 11  # 100,002 bytes in 10,000-byte pages, each re-reading one record


async def test_a_character_split_by_the_page_edge_arrives_whole() -> None:
    raw = "h\n€€€\n😀\né\n".encode()
    for page_bytes in range(1, len(raw) + 1):
        records, _ = await read_all(raw, page_bytes, "csv")
        assert [r.values for r in records] == [["h"], ["€€€"], ["😀"], ["é"]], page_bytes


async def test_an_unclosed_quote_is_too_large_at_its_byte_offset_and_never_read_on() -> None:
    raw = b'h\nok\n"open\n' + b"x\n" * 5000
    reads: list[tuple[int, int]] = []

    async def get(start: int, stop: int) -> bytes:
        reads.append((start, stop))
        return raw[start:stop]

    async def read_on() -> None:
        offset, line = 0, 1
        while True:
            page = await read_page(
                get,
                offset=offset,
                line=line,
                size=len(raw),
                page_bytes=64,
                format="csv",
                key="f.csv",
                max_record_bytes=100,
            )
            for _ in page.records:
                pass
            assert page.end > offset, "the read never moved on"
            offset, line = page.end, page.line

    with pytest.raises(XError) as caught:
        await read_on()
    assert caught.value.code == "X_IMPORT_RECORD_TOO_LARGE"
    assert caught.value.meta["offset"] == 5
    assert "byte offset 5" in caught.value.message
    assert max(stop - start for start, stop in reads) <= 101


async def test_a_byte_that_is_not_utf8_is_refused_at_its_offset() -> None:
    raw = b"h\nok\ncaf\xe9\n"
    fmts: tuple[Format, ...] = ("csv", "ndjson")
    for fmt in fmts:
        with pytest.raises(XError) as caught:
            await read_all(raw, 4, fmt)
        assert caught.value.code == "X_IMPORT_ENCODING_INVALID"
        assert caught.value.meta["offset"] == 8
        assert "offset 8" in caught.value.message


async def test_an_ndjson_line_that_is_not_an_object_is_a_refused_record() -> None:
    raw = b'{"a": 1}\n[1, 2]\n{oops\n"text"\n{"a": 2}'
    records, _ = await read_all(raw, 7, "ndjson")
    assert [(r.line, r.problem) for r in records] == [
        (1, None),
        (2, "ndjson_not_object"),
        (3, "json_invalid"),
        (4, "ndjson_not_object"),
        (5, None),
    ]
