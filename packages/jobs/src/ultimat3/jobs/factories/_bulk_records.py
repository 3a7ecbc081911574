"""Records of a bulk file, found on bytes: the page splitter ``import_rows()`` reads with.

A page is the bytes ``[offset, offset + n)`` of the object. Lines are cut on ``b"\\n"`` (a
``\\n`` byte is never inside a UTF-8 multibyte sequence) and decoded one by one, so a character
split by the page edge sits in the cut-off tail and arrives whole with the next page. csv
records are then read by Python's own ``csv`` module over those lines, which is what makes the
split quote-aware: a newline inside ``"..."`` is data, ``""`` is a quote, CRLF ends a record.

The last record of a page that is not the end of the object may be cut short (or still open
inside quotes): it is never taken. The page ends where it starts, and the next page reads it
again from its first byte — nothing is carried between pages but the offset and the line.
"""

from __future__ import annotations

import codecs
import csv
import json
from collections.abc import Awaitable, Callable, Iterator
from dataclasses import dataclass
from itertools import accumulate
from typing import Any, Literal

from ultimat3.core import XError

BOM = b"\xef\xbb\xbf"

Format = Literal["csv", "ndjson"]


@dataclass(slots=True)
class Record:
    """One record: the 1-based line it starts on, its byte offset, and its values — csv fields,
    or the decoded ndjson object — or ``problem`` (a refusal code) when it cannot be read."""

    line: int
    offset: int
    values: Any
    problem: str | None = None


class Page:
    """A page's whole records, read lazily (a batch at a time is all a page ever holds as
    rows), then where the next page starts: ``end`` (a byte offset) and ``line`` (1-based).
    ``end`` and ``line`` are final once ``records`` is exhausted."""

    __slots__ = ("end", "line", "records")

    def __init__(self, end: int, line: int) -> None:
        self.records: Iterator[Record] = iter(())
        self.end = end
        self.line = line


def too_large(key: str, offset: int, limit: int, line: int) -> XError:
    return XError(
        "X_IMPORT_RECORD_TOO_LARGE",
        f"{key!r}: the record at byte offset {offset} (line {line}) is larger than "
        f"max_record_bytes={limit}; usually an unclosed quote",
        fix=f"close the quote of the record at byte offset {offset}, or raise max_record_bytes",
        meta={"key": key, "offset": offset, "line": line, "max_record_bytes": limit},
    )


def not_utf8(key: str, offset: int, byte: int) -> XError:
    return XError(
        "X_IMPORT_ENCODING_INVALID",
        f"{key!r} is not UTF-8: byte 0x{byte:02x} at offset {offset} does not decode",
        fix=f"save the file as UTF-8 (the first bad byte is at offset {offset}) and import it "
        "again",
        meta={"key": key, "offset": offset},
    )


def _decode(piece: bytes, start: int, key: str, *, final: bool) -> str:
    try:
        if final:
            return piece.decode("utf-8")
        return codecs.getincrementaldecoder("utf-8")().decode(piece, final=False)
    except UnicodeDecodeError as exc:
        raise not_utf8(key, start + exc.start, piece[exc.start]) from None


def split_page(
    data: bytes,
    *,
    offset: int,
    line: int,
    eof: bool,
    format: Format,
    key: str,
    max_record_bytes: int,
) -> Page | None:
    """The whole records of ``data`` (the object's bytes from ``offset``; ``eof`` when they run
    to its end). ``None`` when ``data`` holds no whole record: read a longer page. A record
    (its line end included) over ``max_record_bytes`` is ``X_IMPORT_RECORD_TOO_LARGE`` at its
    byte offset; a byte that is not UTF-8 is ``X_IMPORT_ENCODING_INVALID`` at its offset.

    csv blank lines come back as records with ``problem='blank'`` (the header check needs to
    see one in first place); the caller drops them elsewhere, as ``csv.DictReader`` does."""
    if offset == 0 and data.startswith(BOM):
        data = data[3:]
        offset = 3
    pieces = data.split(b"\n")
    tail = pieces.pop()  # the bytes after the last b"\n": b"" when data ends with one
    starts = list(accumulate((len(p) + 1 for p in pieces), initial=offset))
    # starts[i]: the offset of pieces[i]; starts[-1]: the tail's
    end = offset + len(data)
    if format == "ndjson":
        return _ndjson(pieces, tail, starts, end, line, eof, key, max_record_bytes)
    body = data[: len(data) - len(tail)]  # the whole lines, each ending with b"\n"
    return _csv(body, tail, starts, end, line, eof, key, max_record_bytes)


def _ndjson(
    pieces: list[bytes],
    tail: bytes,
    starts: list[int],
    end: int,
    line: int,
    eof: bool,
    key: str,
    limit: int,
) -> Page | None:
    if tail and not eof and len(tail) > limit:
        raise too_large(key, starts[-1], limit, line + len(pieces))
    if tail and eof:
        pieces.append(tail)
    if not pieces and not eof:
        return None
    page = Page(end if eof else starts[len(pieces)], line + len(pieces))
    page.records = _ndjson_records(pieces, starts, end, line, key, limit)
    return page


def _ndjson_records(
    pieces: list[bytes], starts: list[int], end: int, line: int, key: str, limit: int
) -> Iterator[Record]:
    loads = json.loads
    for i, piece in enumerate(pieces):
        start = starts[i]
        if len(piece) + (1 if start + len(piece) < end else 0) > limit:
            raise too_large(key, start, limit, line + i)
        text = _decode(piece, start, key, final=True)
        if not text.strip():
            continue
        try:
            value = loads(text)
        except ValueError:
            yield Record(line + i, start, None, "json_invalid")
            continue
        if type(value) is dict:
            yield Record(line + i, start, value)
        else:
            yield Record(line + i, start, None, "ndjson_not_object")


def _csv(
    body: bytes,
    tail: bytes,
    starts: list[int],
    end: int,
    line: int,
    eof: bool,
    key: str,
    limit: int,
) -> Page | None:
    n = len(starts) - 1
    # one decode for the page's whole lines: an error's position is its byte offset in them
    texts = _decode(body, starts[0], key, final=True).split("\n")
    texts.pop()  # after the last "\n"
    feed = [text + "\n" for text in texts]
    del texts
    if tail:
        feed.append(_decode(tail, starts[n], key, final=eof))
    reader = csv.reader(feed, strict=False)
    state = [0]  # lines the reader has used

    def next_record() -> Record | None:
        try:
            values: list[str] | None = next(reader)
            problem = None
        except StopIteration:
            return None
        except csv.Error:
            values, problem = None, "csv_malformed"
        first = state[0]
        used = state[0] = reader.line_num
        start = starts[first]
        if (starts[used] if used <= n else end) - start > limit:
            raise too_large(key, start, limit, line + first)
        if problem is None and not values:
            problem = "blank"
        return Record(line + first, start, values, problem)

    first = next_record()
    if eof:
        page = Page(end, line)
        page.records = _csv_rest(first, next_record, page, lambda: line + state[0], None)
        return page
    # the last record may be cut by the page edge, or still open inside quotes: it is left for
    # the next page, so a page needs two records to make progress
    if first is None:
        if end - starts[0] > limit:
            raise too_large(key, starts[0], limit, line)
        return None
    second = next_record()
    if second is None:
        if end - first.offset > limit:
            raise too_large(key, first.offset, limit, first.line)
        return None
    page = Page(first.offset, first.line)  # until the records are read
    page.records = _csv_rest(first, next_record, page, None, (end, key, limit), second)
    return page


def _csv_rest(
    first: Record | None,
    next_record: Callable[[], Record | None],
    page: Page,
    eof_line: Callable[[], int] | None,
    cut: tuple[int, str, int] | None,
    second: Record | None = None,
) -> Iterator[Record]:
    """The page's records in order. At the end of the object every one is yielded; otherwise
    the last is held back and the page ends where it starts."""
    if cut is None:
        record = first
        while record is not None:
            yield record
            record = next_record()
        assert eof_line is not None
        page.line = eof_line()
        return
    end, key, limit = cut
    held = first
    record = second
    while record is not None:
        assert held is not None
        yield held
        held = record
        record = next_record()
    assert held is not None
    if end - held.offset > limit:
        raise too_large(key, held.offset, limit, held.line)
    page.end, page.line = held.offset, held.line


async def read_page(
    get: Callable[[int, int], Awaitable[bytes]],
    *,
    offset: int,
    line: int,
    size: int,
    page_bytes: int,
    format: Format,
    key: str,
    max_record_bytes: int,
) -> Page:
    """The page starting at ``offset`` of an object of ``size`` bytes, read through
    ``get(start, stop)``: ``page_bytes`` bytes, or — when they hold no whole record — up to
    ``max_record_bytes + 1``, past which the record is ``X_IMPORT_RECORD_TOO_LARGE``."""
    window = page_bytes
    while True:
        stop = min(offset + window, size)
        data = await get(offset, stop)
        if len(data) != stop - offset:
            raise XError(
                "X_STORAGE_NOT_FOUND",
                f"{key!r} answered {len(data)} bytes for the range ({offset}, {stop}): the "
                "object changed under the import",
                fix="never rewrite an object while it is imported; import the new one in a run "
                "of its own",
                meta={"key": key, "offset": offset},
            )
        page = split_page(
            data,
            offset=offset,
            line=line,
            eof=stop >= size,
            format=format,
            key=key,
            max_record_bytes=max_record_bytes,
        )
        if page is not None:
            return page
        if window > max_record_bytes:  # pragma: no cover - split_page raises first
            raise too_large(key, offset, max_record_bytes, line)
        window = max_record_bytes + 1
