"""The job list: the filters of ``x jobs list``, newest first, keyset pages through
``job_cursor``. At most three reads a page: the page and, like the CLI, one probe each way."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from ultimat3.core import XError
from ultimat3.jobs.adapter import ALL_STATES, MAX_JOB_PAGE, JobRow, job_cursor

from ._context import Ctx, View, state_badge
from ._html import Node, clip, el, table, when

DEFAULT_PAGE = 50
FILTERS = ("queue", "name", "state", "tenant", "id_prefix", "created_from", "created_to")


def _moment(field: str, raw: str) -> datetime | None:
    if not raw:
        return None
    try:
        value = datetime.fromisoformat(raw)
    except ValueError as exc:
        raise XError(
            "X_INVARIANT",
            f"{field} {raw!r} is not a date-time",
            fix=f"{field}=2026-03-01T12:00 (ISO 8601; UTC unless it names an offset)",
            status=400,
        ) from exc
    return value if value.tzinfo is not None else value.replace(tzinfo=UTC)


def _limit(raw: str) -> int:
    if not raw:
        return DEFAULT_PAGE
    try:
        return int(raw)
    except ValueError as exc:
        raise XError(
            "X_JOB_PAGE_INVALID",
            f"limit {raw!r} is not a whole number",
            fix=f"limit=1..{MAX_JOB_PAGE}",
        ) from exc


def _state(raw: str) -> Any:
    if raw and raw not in ALL_STATES:
        raise XError(
            "X_INVARIANT",
            f"state {raw!r} is not a job state",
            fix=f"state= one of {', '.join(ALL_STATES)}",
            status=400,
        )
    return raw or None


def list_filters(query: dict[str, str]) -> dict[str, Any]:
    """The introspection filters a query string names; refusals name the bad parameter."""
    return {
        "queue": query.get("queue") or None,
        "name": query.get("name") or None,
        "state": _state(query.get("state", "")),
        "tenant_id": query.get("tenant") or None,
        "id_prefix": query.get("id_prefix") or None,
        "created_from": _moment("created_from", query.get("created_from", "")),
        "created_to": _moment("created_to", query.get("created_to", "")),
    }


def _form(ctx: Ctx, query: dict[str, str]) -> Node:
    def text(field: str, label: str, kind: str = "text") -> Node:
        return el("label", label, el("input", type=kind, name=field, value=query.get(field, "")))

    options = [el("option", "any state", value="")] + [
        el("option", st, value=st, selected=query.get("state") == st) for st in ALL_STATES
    ]
    return el(
        "form",
        text("queue", "Queue"),
        text("name", "Name"),
        el("label", "State", el("select", options, name="state")),
        text("tenant", "Tenant"),
        text("id_prefix", "Id prefix"),
        text("created_from", "Created from (UTC)"),
        text("created_to", "Created to (UTC)"),
        text("limit", "Rows"),
        el("button", "Filter", type="submit"),
        method="get",
        action=ctx.url("/jobs"),
        class_="filters",
    )


def error_code(row: JobRow) -> str:
    err = row.last_error
    if not err:
        return "-"
    code = err.get("code")
    return str(code) if code else "unclassified"


def job_table(ctx: Ctx, rows: list[JobRow]) -> Node:
    return table(
        ["Id", "Name", "Queue", "State", "Tries", "Run at", "Created", "Last error"],
        [
            [
                el("a", r.id, href=ctx.url(f"/jobs/{r.id}")),
                clip(r.name, 40),
                clip(r.queue, 24),
                state_badge(r.state),
                f"{r.attempts}/{r.max_attempts}",
                when(r.run_at),
                when(r.created_at),
                el("code", error_code(r)) if r.last_error else "-",
            ]
            for r in rows
        ],
        id="jobs",
    )


async def jobs_list(ctx: Ctx) -> View:
    intro = ctx.need_intro()
    query = ctx.request.query
    filters = list_filters(query)
    limit = _limit(query.get("limit", ""))
    after, before = query.get("after") or None, query.get("before") or None
    rows = list(await intro.list(**filters, limit=limit, after=after, before=before))
    older = newer = None
    if rows:
        last, first = job_cursor(rows[-1]), job_cursor(rows[0])
        if await intro.list(**filters, limit=1, after=last):
            older = last
        if (after or before) and await intro.list(**filters, limit=1, before=first):
            newer = first
    kept = {k: query.get(k) for k in (*FILTERS, "limit")}
    pager = el(
        "p",
        el("a", "← newer", href=ctx.url("/jobs", {**kept, "before": newer})) if newer else None,
        el("a", "older →", href=ctx.url("/jobs", {**kept, "after": older})) if older else None,
        class_="pager",
    )
    body: list[Node] = [_form(ctx, query)]
    body.append(job_table(ctx, rows) if rows else el("p", "no jobs match", class_="muted"))
    body.append(pager)
    return View("Jobs", "/jobs", body)
