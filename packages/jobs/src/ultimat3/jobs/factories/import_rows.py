"""``import_rows()``: a bulk file (csv or ndjson) read back from object storage, a page at a time.

One ``step.run`` per page, checkpointed at the byte offset the next page starts at: a killed
attempt resumes at the first page with no stored outcome, re-reads it from its first byte, and
hands its rows to ``handle`` again (at least once per page — write with upserts). Rows are
validated by the pydantic ``schema`` in one ``TypeAdapter(list[schema])`` call per batch; a
refused row becomes ``{line, field, code}`` in the page's errors part, never its value.
"""

from __future__ import annotations

import json
import types
import typing
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Generic, Literal, TypeVar

from pydantic import BaseModel, TypeAdapter, ValidationError

from ultimat3.core import Duration, JsonValue, Signal, XError
from ultimat3.jobs import Job, JobContext, Retry, Step, job

from ._bulk_common import Causes, call, check_name, input_digest_key, storage
from ._bulk_records import Format, Record, read_page

if TYPE_CHECKING:
    from ultimat3.storage import ObjectStore

I = TypeVar("I")  # noqa: E741 - the input type
M = TypeVar("M", bound=BaseModel)

DEFAULT_PAGE_BYTES = 1_048_576
DEFAULT_BATCH = 500
DEFAULT_MAX_RECORD_BYTES = 65_536
DEFAULT_MAX_ROW_ERRORS = 1_000


@dataclass(frozen=True, slots=True)
class ImportErrors(Generic[I]):
    """Where refused rows are reported: ``sink(input)`` the store,
    ``prefix(input)`` the key prefix; parts land at ``<prefix>/<run_id>/errors-NNNNN.ndjson``."""

    sink: Callable[[I], ObjectStore | Awaitable[ObjectStore]]
    prefix: Callable[[I], str | Awaitable[str]]


@dataclass(frozen=True, slots=True)
class ImportBatch(Generic[I, M]):
    """What ``handle`` gets: at most ``batch`` validated rows of one page."""

    rows: list[M]
    input: I
    page: int
    """The 0-based page index."""
    signal: Signal


def _nullable(annotation: object) -> bool:
    if annotation is None or annotation is type(None) or annotation is Any:
        return True
    origin = typing.get_origin(annotation)
    if origin is typing.Annotated:
        return _nullable(typing.get_args(annotation)[0])
    if origin is typing.Union or origin is types.UnionType:
        return any(_nullable(a) for a in typing.get_args(annotation))
    return False


def _optional_columns(schema: type[BaseModel]) -> frozenset[str]:
    """The columns whose empty text reads as ``None`` (fields that accept ``None``), by the
    name the row carries (the field's alias when it has one)."""
    out = set()
    for name, info in schema.model_fields.items():
        if _nullable(info.annotation):
            out.add(
                info.validation_alias
                if isinstance(info.validation_alias, str)
                else info.alias or name
            )
    return frozenset(out)


def _header_mismatch(
    key: str, header: list[str] | None, columns: Sequence[str], why: str
) -> XError:
    meta: dict[str, Any] = {"key": key, "columns": list(columns)}
    if header is not None:
        meta["header"] = header
    return XError(
        "X_IMPORT_HEADER_MISMATCH",
        f"{key!r}: {why}; the header must name exactly {list(columns)} (any order)",
        fix="send a first line naming every declared column (any order) and no other",
        meta=meta,
    )


def _check_header(key: str, first: Record | None, columns: Sequence[str]) -> list[str]:
    if first is None:
        raise _header_mismatch(key, None, columns, "the file is empty (no header line)")
    if first.problem == "blank":
        raise _header_mismatch(key, [], columns, f"line {first.line} (the header) is blank")
    if first.problem is not None or first.values is None:
        raise _header_mismatch(key, None, columns, "the header line is not readable csv")
    header: list[str] = first.values
    missing = [c for c in columns if c not in header]
    undeclared = [h for h in header if h not in columns]
    doubled = sorted({h for h in header if header.count(h) > 1})
    if missing or undeclared or doubled:
        parts = []
        if missing:
            parts.append(f"missing {missing}")
        if undeclared:
            parts.append(f"undeclared {undeclared}")
        if doubled:
            parts.append(f"named twice {doubled}")
        raise _header_mismatch(key, header, columns, "the header has " + ", ".join(parts))
    return header


def import_rows(
    *,
    name: str,
    input: type[I],
    tenant: Callable[[I], str] | Literal["none"],
    source: Callable[[I], ObjectStore | Awaitable[ObjectStore]],
    key: Callable[[I], str | Awaitable[str]],
    format: Format,
    columns: Sequence[str],
    schema: type[M],
    handle: Callable[[ImportBatch[I, M]], Awaitable[object] | object],
    errors: ImportErrors[I] | None = None,
    page_bytes: int = DEFAULT_PAGE_BYTES,
    batch: int = DEFAULT_BATCH,
    max_record_bytes: int = DEFAULT_MAX_RECORD_BYTES,
    max_row_errors: int = DEFAULT_MAX_ROW_ERRORS,
    idempotency_key: Callable[[I], str] | None = None,
    retry: Retry | None = None,
    queue: str = "default",
    timeout: Duration | None = None,
) -> Job[I, dict[str, JsonValue]]:
    """Declare a job that imports the object ``key(input)`` of ``source(input)`` into the app,
    ``batch`` validated rows per ``handle`` call. Its result:
    ``{"rows": handled, "refused": n, "pages": n, "error_prefix": "<prefix>/<run_id>" | None}``.
    """
    causes = Causes("import_rows", name)
    check_name(causes, name)
    causes.callable("source", source, "source=lambda i: disk('imports')")
    causes.callable("key", key, "key=lambda i: i.key")
    causes.callable("handle", handle, "handle=an async def handle(batch) that upserts batch.rows")
    if format not in ("csv", "ndjson"):
        causes.add(f"format {format!r} is neither 'csv' nor 'ndjson'", "format='csv' or 'ndjson'")
    cols = list(columns) if isinstance(columns, list | tuple) else None
    if not cols or not all(isinstance(c, str) and c for c in cols) or len(set(cols)) != len(cols):
        causes.add(
            f"columns {columns!r} is not a non-empty list of distinct non-empty names",
            "columns=['id', 'total'] — the exact header names",
        )
    given_schema: object = schema  # checked at runtime: callers need not be typed
    given_errors: object = errors
    if not (isinstance(given_schema, type) and issubclass(given_schema, BaseModel)):
        causes.add(
            f"schema {schema!r} is not a pydantic model class", "schema=a BaseModel subclass"
        )
    if given_errors is not None and not isinstance(given_errors, ImportErrors):
        causes.add(
            f"errors is a {type(given_errors).__name__}, not ImportErrors",
            "errors=ImportErrors(sink=lambda i: store, prefix=lambda i: f'errors/{i.key}')",
        )
    causes.whole("page_bytes", page_bytes, 1)
    causes.whole("batch", batch, 1)
    causes.whole("max_record_bytes", max_record_bytes, 1)
    causes.whole("max_row_errors", max_row_errors, 0)
    if idempotency_key is not None:
        causes.callable("idempotency_key", idempotency_key, "idempotency_key=lambda i: i.key")
    causes.raise_if_any()
    assert cols is not None
    store_module = storage("import_rows")
    rows_of = TypeAdapter(list[schema])  # type: ignore[valid-type]
    optional = _optional_columns(schema) if format == "csv" else frozenset()

    async def body(inp: I, step: Step, ctx: JobContext) -> dict[str, JsonValue]:
        store: ObjectStore = await call(source, inp)
        object_key: str = store_module.check_key(await call(key, inp))
        report: tuple[ObjectStore, str] | None = None
        if errors is not None:
            prefix = str(await call(errors.prefix, inp)).strip("/")
            report = (await call(errors.sink, inp), f"{prefix}/{ctx.run_id}")
            store_module.check_key(f"{report[1]}/errors-00000.ndjson")
        state: dict[str, Any] = {
            "offset": 0,
            "line": 1,
            "rows": 0,
            "refused": 0,
            "header": None,
            "etag": None,
            "size": None,
            "done": False,
        }
        page = 0
        while not state["done"]:
            state = await step.run(  # type: ignore[assignment]
                f"page:{page:05d}",
                _page_fn(page, dict(state), inp, store, object_key, report),
            )
            ctx.progress(int(state["offset"]), int(state["size"]))
            ctx.log.info(
                "import_rows.page",
                page=page,
                offset=state["offset"],
                rows=state["rows"],
                refused=state["refused"],
            )
            page += 1
        return {
            "rows": state["rows"],
            "refused": state["refused"],
            "pages": page,
            "error_prefix": report[1] if report is not None and state["refused"] else None,
        }

    def _page_fn(
        index: int,
        prev: dict[str, Any],
        inp: I,
        store: ObjectStore,
        object_key: str,
        report: tuple[ObjectStore, str] | None,
    ) -> Callable[[Signal], Awaitable[dict[str, Any]]]:
        async def run_page(signal: Signal) -> dict[str, Any]:
            return await _run_page(signal, index, prev, inp, store, object_key, report)

        return run_page

    async def _run_page(
        signal: Signal,
        index: int,
        prev: dict[str, Any],
        inp: I,
        store: ObjectStore,
        object_key: str,
        report: tuple[ObjectStore, str] | None,
    ) -> dict[str, Any]:
        info = await store.stat(object_key)
        if prev["etag"] is not None and info.etag != prev["etag"]:
            raise XError(
                "X_STORAGE_NOT_FOUND",
                f"{object_key!r} in {store.name} changed between pages (etag {prev['etag']!r} "
                f"is now {info.etag!r}): the object this run started on is gone",
                fix="import the new object in a run of its own (a new key, or after this run "
                "ends); never rewrite an object while it is imported",
                meta={"key": object_key, "page": index},
            )

        async def get(start: int, stop: int) -> bytes:
            return await store.get(object_key, range=(start, stop))

        parsed = await read_page(
            get,
            offset=int(prev["offset"]),
            line=int(prev["line"]),
            size=info.size,
            page_bytes=page_bytes,
            format=format,
            key=object_key,
            max_record_bytes=max_record_bytes,
        )
        records = parsed.records
        header = prev["header"]
        if format == "csv" and header is None:
            header = _check_header(object_key, next(records, None), cols)
        elif format == "ndjson" and index == 0:
            header = cols
        refused_before = int(prev["refused"])
        handled = int(prev["rows"])
        lines: list[str] = []
        pending: list[tuple[int, dict[str, Any]]] = []

        def refuse(line_no: int, field: object, code: str) -> None:
            lines.append(json.dumps({"line": line_no, "field": field, "code": code}))

        async def flush() -> None:
            nonlocal handled
            if not pending:
                return
            raws = [raw for _, raw in pending]
            try:
                models = rows_of.validate_python(raws)
            except ValidationError as exc:
                bad: dict[int, tuple[object, str]] = {}
                for err in exc.errors(
                    include_url=False, include_context=False, include_input=False
                ):
                    loc = err["loc"]
                    at = int(loc[0])
                    if at not in bad:
                        bad[at] = (loc[1] if len(loc) > 1 else None, err["type"])
                for at in sorted(bad):
                    refuse(pending[at][0], *bad[at])
                models = rows_of.validate_python([r for i, r in enumerate(raws) if i not in bad])
            pending.clear()
            await over()
            if models:
                await call(handle, ImportBatch(models, inp, index, signal))
                handled += len(models)

        async def over() -> None:
            total = refused_before + len(lines)
            if total <= max_row_errors:
                return
            await write_report()
            raise XError(
                "X_IMPORT_TOO_MANY_ERRORS",
                f"{object_key!r}: {total} rows refused, over max_row_errors={max_row_errors} "
                f"(page {index}); the batch that crossed it was not handled",
                fix="read the error report"
                + (
                    f" under {report[1]!r}"
                    if report is not None
                    else " (declare errors= to keep one)"
                )
                + ", fix the file, import it again",
                meta={
                    "key": object_key,
                    "refused": total,
                    "max_row_errors": max_row_errors,
                    "error_prefix": report[1] if report is not None else None,
                },
            )

        async def write_report() -> None:
            if report is not None and lines:
                sink, where = report
                await sink.put(
                    f"{where}/errors-{index:05d}.ndjson",
                    ("\n".join(lines) + "\n").encode(),
                    content_type="application/x-ndjson",
                )

        width = len(header)
        for record in records:
            if record.problem is not None:
                if record.problem != "blank":
                    refuse(record.line, None, record.problem)
                    await over()
                continue
            values = record.values
            if format == "csv":
                if len(values) != width:
                    refuse(record.line, None, "csv_field_count")
                    await over()
                    continue
                raw = dict(zip(header, values, strict=True))
                if optional:
                    for column in optional:
                        if raw.get(column) == "":
                            raw[column] = None
            else:
                raw = {c: values[c] for c in header if c in values}
            pending.append((record.line, raw))
            if len(pending) >= batch:
                await flush()
        await flush()
        await write_report()
        return {
            "offset": parsed.end,
            "line": parsed.line,
            "rows": handled,
            "refused": refused_before + len(lines),
            "header": header,
            "etag": info.etag,
            "size": info.size,
            "done": parsed.end >= info.size,
        }

    return job(
        name=name,
        input=input,
        tenant=tenant,
        idempotency_key=idempotency_key or input_digest_key(f"import_rows:{name}"),
        retry=retry,
        queue=queue,
        timeout=timeout,
        run=body,
    )
