"""The dead letter: the newest dead jobs grouped by name and error code, each group with a
retry for all of it and each job with its own. One read (``MAX_JOB_PAGE`` rows at most)."""

from __future__ import annotations

from dataclasses import dataclass, field

from ultimat3.jobs.adapter import MAX_JOB_PAGE, JobIntrospection, JobRow

from ._context import Ctx, View
from ._html import Node, clip, el, table, when
from ._jobs_list import error_code

SHOWN_PER_GROUP = 5


@dataclass(slots=True)
class Group:
    name: str
    code: str
    rows: list[JobRow] = field(default_factory=list)


async def dead_groups(intro: JobIntrospection) -> tuple[list[Group], bool]:
    """The groups of the newest ``MAX_JOB_PAGE`` dead jobs, biggest first, and whether older
    dead jobs exist beyond them."""
    rows = list(await intro.list(state="dead", limit=MAX_JOB_PAGE))
    groups: dict[tuple[str, str], Group] = {}
    for r in rows:
        code = error_code(r)
        groups.setdefault((r.name, code), Group(r.name, code)).rows.append(r)
    ordered = sorted(groups.values(), key=lambda g: (-len(g.rows), g.name, g.code))
    return ordered, len(rows) == MAX_JOB_PAGE


async def dead_letter(ctx: Ctx) -> View:
    groups, more = await dead_groups(ctx.need_intro())
    if not groups:
        return View("Dead letter", "/dead", el("p", "no dead jobs", class_="muted"))
    rows = []
    for g in groups:
        newest = g.rows[0]
        message = (newest.last_error or {}).get("message")
        ids: list[Node] = [
            el(
                "div",
                el("a", r.id, href=ctx.url(f"/jobs/{r.id}")),
                " ",
                ctx.form("retry", "Retry", {"id": r.id, "back": "/dead"}),
            )
            for r in g.rows[:SHOWN_PER_GROUP]
        ]
        if len(g.rows) > SHOWN_PER_GROUP:
            ids.append(
                el(
                    "a",
                    f"all {len(g.rows)}…",
                    href=ctx.url("/jobs", {"state": "dead", "name": g.name}),
                )
            )
        rows.append(
            [
                clip(g.name, 40),
                el("code", g.code),
                str(len(g.rows)),
                clip(message, 80),
                when(newest.updated_at),
                ids,
                ctx.form(
                    "retry-group",
                    f"Retry all {len(g.rows)}",
                    {"name": g.name, "code": g.code},
                ),
            ]
        )
    headers = ["Job", "Error code", "Dead", "Newest error", "Newest at", "Jobs"]
    if ctx.actions:
        headers.append("")
    body: list[Node] = [table(headers, rows, id="dead")]
    if more:
        body.append(
            el(
                "p",
                f"grouping the newest {MAX_JOB_PAGE} dead jobs; older ones: ",
                el("a", "the job list", href=ctx.url("/jobs", {"state": "dead"})),
                class_="muted",
            )
        )
    body.append(
        el(
            "p",
            "retry requeues the job: completed steps replay from storage, the failed step runs "
            "again",
            class_="muted",
        )
    )
    return View("Dead letter", "/dead", body)
