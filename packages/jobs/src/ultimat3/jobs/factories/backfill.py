"""``backfill()``: a paged pass over a source, one durable step per page, booked in ``x_backfills``.

Each page is ONE ``step.run``: it reads the page (``source``), hands its rows to ``handle`` and
books them in the driver's ``BackfillLedger`` (``advance``); the step's output is the page's row
count and the cursor past it, so a replay resumes after the last page that completed and never
reads a completed page again. ``handle`` runs before its checkpoint lands: an attempt that dies
between the two hands that page to the next one (at least once per page), so write through
``upsert_all`` / ``update`` or a statement whose second run changes nothing.

The ledger row is begun in a step of its own (a replay keeps the same row) and finished ``done``
at the end, or ``failed`` when the final attempt throws. The ledger is the installed driver's
(``install_job_driver``); a driver with none runs the pass with no bookkeeping.
"""

from __future__ import annotations

import hashlib
import inspect
import json
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from typing import Any, Final, Generic, TypeVar, cast

from pydantic import BaseModel, ConfigDict

from ultimat3.core import Signal, XError, to_json_form
from ultimat3.jobs import Job, JobContext, Retry, Step, job
from ultimat3.jobs.adapter import driver_backfills, installed_job_driver

I = TypeVar("I")  # noqa: E741 - the input type, as the spec names it

MAX_PAGE_SIZE: Final = 10_000
"""The most rows one page may ask for (a page is one step: its rows live in memory at once)."""


class NoInput(BaseModel):
    """The input of a backfill declared without ``input=``: nothing (``{}``)."""

    model_config = ConfigDict(extra="forbid", frozen=True)


@dataclass(frozen=True, slots=True)
class BackfillPage(Generic[I]):
    """What ``source`` is asked: the pass's input, the cursor the previous page returned
    (``None`` for the first page) and how many rows to answer at most."""

    input: I
    after: Any
    limit: int


@dataclass(frozen=True, slots=True)
class BackfillBatch(Generic[I]):
    """What ``handle`` gets: one page's rows, the pass's input, the page's index (0-based) and
    the run's cancellation signal."""

    rows: Sequence[Any]
    input: I
    page: int
    signal: Signal


Source = Callable[
    [BackfillPage[Any]], "tuple[Sequence[Any], Any] | Awaitable[tuple[Sequence[Any], Any]]"
]
Handle = Callable[[BackfillBatch[Any]], "object | Awaitable[object]"]


def _invalid(name: object, message: str, fix: str) -> XError:
    return XError("X_JOB_DECLARATION_INVALID", f"backfill({name!r}): {message}", fix=fix)


async def _answer(value: Any) -> Any:
    return await value if inspect.isawaitable(value) else value


def backfill(
    *,
    name: str,
    source: Source,
    handle: Handle,
    input: type[Any] | None = None,
    tenant: Any = "none",
    page_size: int = 500,
    cursor: Any = None,
    retry: Retry | None = None,
    queue: str | None = None,
) -> Job[Any, dict[str, Any]]:
    """A job that pages through ``source`` and hands each page to ``handle``; see the module.

    ``source(page)`` answers ``(rows, next_cursor)``; a ``next_cursor`` of ``None`` ends the
    pass. ``cursor`` is where the first page starts (``page.after``; default ``None``). The input
    (``input=``, default none) names a pass: the same input enqueued while its pass is live
    dedupes onto it. The result: ``{"rows": n, "pages": n, "backfill_id": id | None}``.
    """
    if not isinstance(name, str) or not name.strip():
        raise _invalid(name, "name is required (a durable queue key)", "backfill(name='...', ...)")
    if not callable(source) or not callable(handle):
        raise _invalid(
            name,
            "source and handle must be callables",
            "source=lambda page: (rows, next_cursor), handle=lambda batch: ...",
        )
    if (
        isinstance(page_size, bool)
        or not isinstance(page_size, int)
        or not 1 <= page_size <= MAX_PAGE_SIZE
    ):
        raise _invalid(
            name,
            f"page_size {page_size!r} is not a whole number from 1 to {MAX_PAGE_SIZE}",
            "page_size=500",
        )
    try:
        start = to_json_form(cursor)
    except (TypeError, ValueError, XError) as exc:
        raise _invalid(
            name, f"cursor {cursor!r} has no JSON form ({exc})", "start from a str, int or dict"
        ) from exc
    model: type[Any] = NoInput if input is None else input

    def key(i: Any) -> str:
        form = json.dumps(to_json_form(i), sort_keys=True, separators=(",", ":"))
        return f"backfill:{name}:{hashlib.sha256(form.encode()).hexdigest()[:32]}"

    async def run(i: Any, step: Step, ctx: JobContext) -> dict[str, Any]:
        driver = installed_job_driver()
        ledger = driver_backfills(driver) if driver is not None else None

        async def begin(signal: Signal) -> str | None:
            if ledger is None:
                return None
            row = await ledger.begin(name, job_id=ctx.job_id, cursor=start)
            return row.id

        backfill_id = cast("str | None", await step.run("backfill:begin", begin))
        after, rows, page = start, 0, 0
        try:
            while True:

                async def one_page(signal: Signal, page: int = page, after: Any = after) -> Any:
                    got = await _answer(source(BackfillPage(input=i, after=after, limit=page_size)))
                    if not isinstance(got, tuple) or len(got) != 2:
                        raise XError(
                            "X_INVARIANT",
                            f"backfill({name!r}): source answered {type(got).__name__}, not "
                            "(rows, next_cursor)",
                            fix="return (rows, next_cursor) from source; None ends the pass",
                        )
                    page_rows, next_cursor = got
                    page_rows = list(page_rows)
                    if len(page_rows) > page_size:
                        raise XError(
                            "X_INVARIANT",
                            f"backfill({name!r}): page {page} answered {len(page_rows)} rows, "
                            f"more than page.limit {page_size}",
                            fix="answer at most page.limit rows",
                        )
                    if page_rows:
                        await _answer(
                            handle(BackfillBatch(rows=page_rows, input=i, page=page, signal=signal))
                        )
                    if ledger is not None and backfill_id is not None:
                        await ledger.advance(backfill_id, rows=len(page_rows), cursor=next_cursor)
                    return {"rows": len(page_rows), "next": next_cursor}

                done = cast("dict[str, Any]", await step.run(f"backfill:page:{page:05d}", one_page))
                rows += int(done["rows"])
                page += 1
                if done["next"] is None:
                    break
                after = done["next"]
        except Exception:
            # the final attempt threw: the pass failed (a drain or a cancel aborts the signal
            # first, and leaves the row running for the attempt that picks it up)
            final = ctx.final_attempt and not ctx.signal.aborted
            if final and ledger is not None and backfill_id is not None:
                await ledger.finish(backfill_id, state="failed")
            raise

        async def finish(signal: Signal) -> None:
            if ledger is not None and backfill_id is not None:
                await ledger.finish(backfill_id, state="done")

        await step.run("backfill:finish", finish)
        return {"rows": rows, "pages": page, "backfill_id": backfill_id}

    options: dict[str, Any] = {}
    if queue is not None:
        options["queue"] = queue
    return job(
        name=name,
        input=model,
        idempotency_key=key,
        tenant=tenant,
        retry=retry,
        run=run,
        **options,
    )


__all__ = ["MAX_PAGE_SIZE", "BackfillBatch", "BackfillPage", "NoInput", "backfill"]
