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
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
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


@dataclass(slots=True)
class Page:
    """What a page held: its whole records, where the next page starts (``end``, a byte offset)
    and the 1-based line it starts on (``line``)."""

    records: list[Record] = field(default_factory=list)
    end: int = 0
    line: int = 1


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
    if not pieces:
        return Page([], end, line) if eof else None
    records: list[Record] = []
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
            records.append(Record(line + i, start, None, "json_invalid"))
            continue
        if type(value) is dict:
            records.append(Record(line + i, start, value))
        else:
            records.append(Record(line + i, start, None, "ndjson_not_object"))
    return Page(records, end if eof else starts[len(pieces)], line + len(pieces))


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
    if tail:
        feed.append(_decode(tail, starts[n], key, final=eof))
    reader = csv.reader(feed, strict=False)
    records: list[Record] = []
    used = 0
    while True:
        try:
            values: list[str] | None = next(reader)
            problem = None
        except StopIteration:
            break
        except csv.Error:
            values, problem = None, "csv_malformed"
        first, used = used, reader.line_num
        start = starts[first]
        stop = starts[used] if used <= n else end
        if stop - start > limit:
            raise too_large(key, start, limit, line + first)
        if problem is None and not values:
            problem = "blank"
        records.append(Record(line + first, start, values, problem))
    if eof:
        return Page(records, end, line + used)
    # the last record may be cut by the page edge, or still open inside quotes: leave it
    if not records:
        if end - starts[0] > limit:
            raise too_large(key, starts[0], limit, line)
        return None
    last = records.pop()
    if end - last.offset > limit:
        raise too_large(key, last.offset, limit, last.line)
    if not records:
        return None
    return Page(records, last.offset, last.line)


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
