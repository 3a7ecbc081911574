"""The overview: one row per queue (its jobs by state, paused, workers serving it), the last
hour's settle counters by job, and the live workers. Five reads, whatever the queue holds:
``now_ms``, ``stats``, ``paused_queues``, ``workers``, ``counters``."""

from __future__ import annotations

from collections import defaultdict

from ultimat3.jobs.adapter import CounterRow, QueueStats, WorkerRow

from ._context import Ctx, View
from ._html import Node, clip, el, table, when

REFRESH_S = 5
COUNTER_WINDOW_MS = 3_600_000
QUEUE_STATES = ("ready", "delayed", "running", "suspended", "failed", "dead")


def _num(value: int, href: str | None = None) -> Node:
    text = str(value)
    return el("a", text, href=href) if href and value else text


async def overview(ctx: Ctx) -> View:
    now_ms = await ctx.driver.now_ms()
    stats = {s.queue: s for s in await ctx.driver.stats()}
    intro = ctx.intro
    paused: set[str] = set()
    workers: list[WorkerRow] = []
    counters: list[CounterRow] = []
    if intro is not None:
        paused = set(await intro.paused_queues())
        workers = list(await intro.workers())
        counters = list(await intro.counters(since_ms=now_ms - COUNTER_WINDOW_MS))
    serving: dict[str, int] = defaultdict(int)
    for w in workers:
        for q in w.queues:
            serving[q] += 1
    queues = sorted(set(stats) | paused | set(serving))
    body: list[Node] = [_queues(ctx, queues, stats, paused, serving)]
    if intro is None:
        body.append(
            el(
                "p",
                f"the {ctx.driver.name} driver has no introspect: counters, workers and "
                "pausing are not available",
                class_="muted",
            )
        )
    else:
        body += [_counters(counters), _workers(workers)]
    body.append(el("p", f"refreshes every {REFRESH_S} s", class_="muted"))
    return View("Queues", "/", body, refresh_s=REFRESH_S)


def _queues(
    ctx: Ctx,
    queues: list[str],
    stats: dict[str, QueueStats],
    paused: set[str],
    serving: dict[str, int],
) -> Node:
    if not queues:
        return el("p", "no queue holds jobs yet", class_="muted")
    rows = []
    for q in queues:
        s = stats.get(q) or QueueStats(queue=q)
        counts = [
            el(
                "span",
                _num(getattr(s, st), ctx.url("/jobs", {"queue": q, "state": st})),
                data_count=f"{q} {st}",
            )
            for st in QUEUE_STATES
        ]
        is_paused = q in paused
        action = (
            ctx.form("resume", "Resume", {"queue": q})
            if is_paused
            else ctx.form("pause", "Pause", {"queue": q})
        )
        rows.append(
            [
                el("a", q, href=ctx.url("/jobs", {"queue": q})),
                *counts,
                el("span", "paused" if is_paused else "no", data_paused=q),
                str(serving.get(q, 0)),
                action,
            ]
        )
    headers = ["Queue", *(st.capitalize() for st in QUEUE_STATES), "Paused", "Workers"]
    if ctx.actions:
        headers.append("")
    return table(headers, rows, id="queues")


def _counters(rows: list[CounterRow]) -> Node:
    by_job: dict[str, list[int]] = defaultdict(lambda: [0, 0, 0, 0, 0])
    for r in rows:
        acc = by_job[r.job]
        acc[0] += r.done
        acc[1] += r.retried
        acc[2] += r.failed
        acc[3] += r.dead
        acc[4] += r.duration_ms
    totals = [sum(v[i] for v in by_job.values()) for i in range(5)]
    lines = [
        [clip(job, 48), *(str(n) for n in v[:4]), _mean(v[4], v[0])]
        for job, v in sorted(by_job.items())
    ]
    lines.append(
        [el("strong", "all jobs"), *(str(n) for n in totals[:4]), _mean(totals[4], totals[0])]
    )
    return [
        el("h2", "Last hour"),
        table(
            ["Job", "Completed", "Retried", "Failed", "Dead", "Mean run"],
            lines,
            id="counters",
        ),
    ]


def _mean(duration_ms: int, done: int) -> str:
    return f"{duration_ms // done} ms" if done else "-"


def _workers(rows: list[WorkerRow]) -> Node:
    if not rows:
        return [el("h2", "Workers"), el("p", "no live workers", class_="muted")]
    return [
        el("h2", "Workers"),
        table(
            ["Worker", "Host", "Queues", "Slots", "In flight", "Started", "Last heartbeat"],
            [
                [
                    clip(w.id, 40),
                    clip(w.host, 32),
                    clip(", ".join(w.queues), 40),
                    "-" if w.slots is None else str(w.slots),
                    str(len(w.in_flight)),
                    when(w.started_at),
                    when(w.last_heartbeat_at),
                ]
                for w in rows
            ],
            id="workers",
        ),
    ]
