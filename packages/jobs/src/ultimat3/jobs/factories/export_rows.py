"""``export_rows()``: a paged read streamed to object storage, one object per page.

Each page is one ``step.run``: ``read(page)`` answers the rows and the cursor of the next page,
the rows are written as ``<prefix>/part-NNNNN.csv`` (or ``.ndjson``), and the step stores the
cursor. A replay re-reads and rewrites the same part (a put replaces it whole), so a killed
export resumes at its first page with no stored outcome and never leaves a part half-written.
"""

from __future__ import annotations

import csv
import io
import json
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Generic, Literal, TypeVar

from ultimat3.core import Duration, JsonValue, Signal, XError, to_json_form
from ultimat3.jobs import Job, JobContext, Retry, Step, job

from ._bulk_common import Causes, call, check_name, input_digest_key, storage

if TYPE_CHECKING:
    from ultimat3.storage import ObjectStore

I = TypeVar("I")  # noqa: E741 - the input type

DEFAULT_PAGE_SIZE = 1_000
FORMULA_LEADS = ("=", "+", "-", "@")
"""A csv text cell starting with one of these gets a leading ``'`` (the formula guard)."""


@dataclass(frozen=True, slots=True)
class ExportPage(Generic[I]):
    """What ``read`` gets: the input, the cursor the previous page answered (``None`` first)
    and how many rows to answer at most."""

    input: I
    after: JsonValue
    limit: int


def csv_cell(value: object) -> str:
    """One value as csv text: ``None`` is empty, booleans ``true``/``false``, numbers as
    written, other values their JSON form; text that could start a formula gets ``'``."""
    if value is None:
        return ""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int | float):
        return repr(value) if isinstance(value, float) else str(value)
    text = value if isinstance(value, str) else None
    if text is None:
        form = to_json_form(value)
        text = form if isinstance(form, str) else json.dumps(form, ensure_ascii=False)
    return "'" + text if text.startswith(FORMULA_LEADS) else text


def _encode(format: str, columns: Sequence[str], rows: Sequence[Mapping[str, Any]]) -> bytes:
    if format == "ndjson":
        return "".join(
            json.dumps(to_json_form({c: row[c] for c in columns}), ensure_ascii=False) + "\n"
            for row in rows
        ).encode()
    out = io.StringIO(newline="")
    writer = csv.writer(out, lineterminator="\r\n")
    writer.writerow(columns)
    writer.writerows([csv_cell(row[c]) for c in columns] for row in rows)
    return out.getvalue().encode()


def export_rows(
    *,
    name: str,
    input: type[I],
    tenant: Callable[[I], str] | Literal["none"],
    read: Callable[
        [ExportPage[I]],
        tuple[Sequence[Mapping[str, Any]], Any]
        | Awaitable[tuple[Sequence[Mapping[str, Any]], Any]],
    ],
    sink: Callable[[I], ObjectStore | Awaitable[ObjectStore]],
    prefix: Callable[[I], str | Awaitable[str]],
    format: Literal["csv", "ndjson"],
    columns: Sequence[str],
    page_size: int = DEFAULT_PAGE_SIZE,
    idempotency_key: Callable[[I], str] | None = None,
    retry: Retry | None = None,
    queue: str = "default",
    timeout: Duration | None = None,
) -> Job[I, dict[str, JsonValue]]:
    """Declare a job that writes ``read``'s pages under ``prefix(input)`` in ``sink(input)``.
    Its result: ``{"rows": n, "parts": n, "prefix": "..."}``."""
    causes = Causes("export_rows", name)
    check_name(causes, name)
    causes.callable("read", read, "read=lambda page: (rows, next_cursor)")
    causes.callable("sink", sink, "sink=lambda i: disk('exports')")
    causes.callable("prefix", prefix, "prefix=lambda i: f'exports/{i.org_id}'")
    if format not in ("csv", "ndjson"):
        causes.add(f"format {format!r} is neither 'csv' nor 'ndjson'", "format='csv' or 'ndjson'")
    cols = list(columns) if isinstance(columns, list | tuple) else None
    if not cols or not all(isinstance(c, str) and c for c in cols) or len(set(cols)) != len(cols):
        causes.add(
            f"columns {columns!r} is not a non-empty list of distinct non-empty names",
            "columns=['id', 'total'] — the fields each row holds, in file order",
        )
    causes.whole("page_size", page_size, 1)
    if idempotency_key is not None:
        causes.callable("idempotency_key", idempotency_key, "idempotency_key=lambda i: i.key")
    causes.raise_if_any()
    assert cols is not None
    store_module = storage("export_rows")
    ext = "ndjson" if format == "ndjson" else "csv"

    async def body(inp: I, step: Step, ctx: JobContext) -> dict[str, JsonValue]:
        store: ObjectStore = await call(sink, inp)
        where = str(await call(prefix, inp)).strip("/")
        store_module.check_key(f"{where}/part-00000.{ext}")
        after: JsonValue = None
        page = 0
        total = 0
        while True:
            out: Any = await step.run(f"page:{page:05d}", _page_fn(page, after, inp, store, where))
            total += int(out["rows"])
            page += 1
            ctx.log.info("export_rows.page", page=page - 1, rows=total)
            nxt = out["next"]
            if nxt is None:
                break
            if nxt == after:
                raise XError(
                    "X_INVARIANT",
                    f"export_rows({name!r}): read answered the cursor {nxt!r} it was given: the "
                    "export would never end",
                    fix="answer the cursor past the last row of the page (e.g. its id), or None "
                    "after the last page",
                    meta={"job": name, "page": page - 1},
                )
            after = nxt
        return {"rows": total, "parts": page, "prefix": where}

    def _page_fn(
        index: int, after: JsonValue, inp: I, store: ObjectStore, where: str
    ) -> Callable[[Signal], Awaitable[dict[str, Any]]]:
        async def run_page(signal: Signal) -> dict[str, Any]:
            answer = await call(read, ExportPage(inp, after, page_size))
            if not (isinstance(answer, tuple) and len(answer) == 2):
                raise XError(
                    "X_INVARIANT",
                    f"export_rows({name!r}): read answered {type(answer).__name__}, not a "
                    "(rows, next_cursor) pair",
                    fix="return (rows, next_cursor) — next_cursor None after the last page",
                    meta={"job": name, "page": index},
                )
            rows, nxt = answer
            rows = list(rows)
            if len(rows) > page_size:
                raise XError(
                    "X_INVARIANT",
                    f"export_rows({name!r}): read answered {len(rows)} rows for page {index}, "
                    f"over page.limit={page_size}",
                    fix="answer at most page.limit rows per page",
                    meta={"job": name, "page": index},
                )
            for at, row in enumerate(rows):
                missing = [c for c in cols if not isinstance(row, Mapping) or c not in row]
                if missing:
                    raise XError(
                        "X_INVARIANT",
                        f"export_rows({name!r}): row {at} of page {index} lacks {missing}",
                        fix="answer mappings keyed by every declared column",
                        meta={"job": name, "page": index, "row": at, "missing": missing},
                    )
            await store.put(
                f"{where}/part-{index:05d}.{ext}",
                _encode(format, cols, rows),
                content_type="application/x-ndjson" if ext == "ndjson" else "text/csv",
            )
            return {"rows": len(rows), "next": to_json_form(nxt)}

        return run_page

    return job(
        name=name,
        input=input,
        tenant=tenant,
        idempotency_key=idempotency_key or input_digest_key(f"export_rows:{name}"),
        retry=retry,
        queue=queue,
        timeout=timeout,
        run=body,
    )
