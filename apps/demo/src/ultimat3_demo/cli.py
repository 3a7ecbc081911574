"""``x demo``: the main command. On a fresh clone it starts the embedded PostgreSQL (or uses
``DATABASE_URL``), resets its own schema, runs a worker in this process over thousands of jobs
with the failures a real app meets, draws a progress bar on stderr and prints what it measured.

``x demo --stop`` stops the embedded server the demo leaves running (so that ``x jobs list`` can
look at what it did).
"""

from __future__ import annotations

import argparse
import asyncio
import collections
import shlex
import time
from typing import Any, Final, TextIO

from ultimat3.core import XError
from ultimat3.jobs.cli import Answer, Commands, Invocation, redact

DEFAULT_DATA_DIR: Final = ".x/pg"
BAR_WIDTH: Final = 28


def register(root: Commands, common: argparse.ArgumentParser) -> None:
    summary = (
        "run a realistic workload end to end: the embedded PostgreSQL (or DATABASE_URL), "
        "a worker, thousands of jobs, retries, a dedupe, a sleep, a dead letter replayed"
    )
    p = root.add_parser("demo", help=summary, description=summary, parents=[common])
    p.set_defaults(handler=cmd_demo)
    p.add_argument("--jobs", type=int, default=3000, metavar="N", help="jobs to run (3000)")
    p.add_argument(
        "--concurrency", type=int, default=32, metavar="N", help="the worker's max_in_flight (32)"
    )
    p.add_argument(
        "--batch", type=int, default=50, metavar="N", help="inputs per enqueue_many call (50)"
    )
    p.add_argument(
        "--backlog",
        type=int,
        default=50,
        metavar="N",
        help="the producer waits while this many enqueued jobs have not started (50)",
    )
    p.add_argument(
        "--timeout", type=float, default=120.0, metavar="S", help="give up after S seconds (120)"
    )
    p.add_argument(
        "--data-dir",
        default=DEFAULT_DATA_DIR,
        metavar="DIR",
        help=f"the embedded PostgreSQL's folder when DATABASE_URL is not set ({DEFAULT_DATA_DIR})",
    )
    p.add_argument(
        "--stop",
        action="store_true",
        help="stop the embedded PostgreSQL the demo left running in --data-dir, and exit",
    )


class ProgressBar:
    """``[#####-----]  1500/3000 jobs  812 jobs/s  ETA 1.8s`` on one line, rewritten with ``\\r``
    (every 0.1 s on a terminal, every second otherwise). The rate is over the last 2 s."""

    def __init__(self, stream: TextIO, *, interval_s: float | None = None) -> None:
        self.stream = stream
        try:
            tty = stream.isatty()
        except (AttributeError, ValueError):
            tty = False
        self.interval_s = interval_s if interval_s is not None else (0.1 if tty else 1.0)
        self._last_draw = -1e9
        self._points: collections.deque[tuple[float, int]] = collections.deque()
        self._width = 0
        self._finished = False
        self.drawn = False

    def rate(self, elapsed_s: float, done: int) -> float:
        points = self._points
        points.append((elapsed_s, done))
        while len(points) > 2 and elapsed_s - points[1][0] >= 2.0:
            points.popleft()
        t0, d0 = points[0]
        if elapsed_s - t0 <= 0:
            return 0.0
        return (done - d0) / (elapsed_s - t0)

    def update(self, done: int, total: int, elapsed_s: float, *, retries: int, dead: int) -> None:
        rate = self.rate(elapsed_s, done)
        now = time.monotonic()
        if done < total and now - self._last_draw < self.interval_s:
            return
        if done >= total and self._finished:
            return
        self._finished = done >= total
        self._last_draw = now
        filled = BAR_WIDTH * done // total if total else BAR_WIDTH
        eta = "--" if rate <= 0 else f"{(total - done) / rate:.1f}s"
        if done >= total:
            eta = "0.0s"
        digits = len(str(total))
        line = (
            f"  [{'#' * filled}{'-' * (BAR_WIDTH - filled)}] {done:>{digits}}/{total} jobs"
            f"  {rate:5.0f} jobs/s  ETA {eta:>6}  retries {retries}  dead {dead}"
        )
        pad = max(0, self._width - len(line))
        self._width = len(line)
        self.stream.write("\r" + line + " " * pad)
        self.stream.flush()
        self.drawn = True

    def finish(self) -> None:
        if self.drawn:
            self.stream.write("\n")
            self.stream.flush()
            self.drawn = False


async def cmd_demo(inv: Invocation) -> Answer:
    from ultimat3.jobs.embedded import database_url_or_embedded
    from ultimat3_demo.run import DEFAULT_SCHEMA, DemoSettings, check_schema_name

    a = inv.args
    if a.stop:
        return await _stop(inv)
    choice = inv.source.choice
    if choice.kind != "postgres":
        raise XError(
            "X_CONFIG_INVALID",
            "x demo runs on PostgreSQL (the embedded one, or DATABASE_URL), not --driver redis",
            fix="drop --driver redis",
        )
    schema = choice.schema or DEFAULT_SCHEMA
    check_schema_name(schema)
    settings = DemoSettings(
        jobs=a.jobs,
        concurrency=a.concurrency,
        batch=a.batch,
        backlog=a.backlog,
        timeout_s=a.timeout,
    )
    settings.check()
    if not choice.url:
        inv.progress(
            f"x demo: DATABASE_URL is not set: starting the embedded PostgreSQL in {a.data_dir}"
        )
    started = time.perf_counter()
    url, embedded = await asyncio.to_thread(
        database_url_or_embedded,
        {"DATABASE_URL": choice.url or ""},
        data_dir=a.data_dir,
        keep_running=True,  # `x jobs list` looks at it afterwards; `x demo --stop` stops it
    )
    try:
        if embedded is not None:
            inv.progress(f"x demo: PostgreSQL up in {time.perf_counter() - started:.1f}s")
        return await _run(inv, url, schema, settings, embedded is not None)
    finally:
        if embedded is not None:
            await asyncio.to_thread(embedded.close)


async def _run(inv: Invocation, url: str, schema: str, settings: Any, embedded: bool) -> Answer:
    from ultimat3_demo.run import DemoProgress, run_demo

    a = inv.args
    inv.progress(
        f"x demo: resetting schema {schema}, then {settings.jobs} jobs through a worker with "
        f"{settings.concurrency} in flight"
    )
    bar = ProgressBar(inv.stderr)

    def on_progress(p: DemoProgress) -> None:
        bar.update(p.done, p.total, p.elapsed_s, retries=p.retries, dead=p.dead)

    try:
        summary = await run_demo(url, schema=schema, settings=settings, progress=on_progress)
    finally:
        bar.finish()
    database = {
        "embedded": embedded,
        "data_dir": a.data_dir if embedded else None,
        "url": redact(url),
        "server_version": summary.pop("server_version"),
    }
    data = {"database": database, **summary, "look": _look(inv, url, schema, summary, embedded)}
    return Answer(data, render_text(data))


def _look(
    inv: Invocation, url: str, schema: str, summary: dict[str, Any], embedded: bool
) -> dict[str, Any]:
    """The commands that show what the demo left in its schema."""
    x = "uv run x" if inv.env.get("UV") else "x"
    flags = f"--schema {shlex.quote(schema)}"
    if embedded or getattr(inv.args, "database_url", None):
        flags = f"--database-url {shlex.quote(redact(url))} {flags}"
    look = {
        "list": f"{x} jobs list {flags}",
        "show": f"{x} jobs show {summary['dead_letter']['job_id']} {flags}",
        "counters": f"{x} jobs counters {flags}",
    }
    if embedded:
        look["stop"] = f"{x} demo --stop" + (
            f" --data-dir {shlex.quote(inv.args.data_dir)}"
            if inv.args.data_dir != DEFAULT_DATA_DIR
            else ""
        )
    return look


async def _stop(inv: Invocation) -> Answer:
    from ultimat3.jobs.embedded import embedded_postgres

    handle = embedded_postgres(inv.args.data_dir)
    running = (handle.data_dir / "postmaster.pid").exists()
    await asyncio.to_thread(handle.stop)
    text = (
        f"x demo: stopped the embedded PostgreSQL in {inv.args.data_dir}"
        if running
        else f"x demo: no embedded PostgreSQL runs in {inv.args.data_dir}"
    )
    return Answer({"stopped": running, "data_dir": str(handle.data_dir)}, text)


def _n(value: int) -> str:
    return f"{value:,}"


def render_text(d: dict[str, Any]) -> str:
    """The summary for a person (``--json`` prints ``d`` itself)."""
    db = d["database"]
    where = (
        f"embedded PostgreSQL {db['server_version']} in {db['data_dir']}"
        if db["embedded"]
        else f"PostgreSQL {db['server_version']} at {db['url']}"
    )
    jobs, tp, en, wk = d["jobs"], d["throughput"], d["enqueue"], d["worker"]
    qw, pk = d["queue_wait_ms"], d["pickup_ms"]
    ms, dd, sl, dl = d["multi_step"], d["dedupe"], d["sleep"], d["dead_letter"]
    others = {k: v for k, v in jobs["states"].items() if k != "done" and v}
    not_done = ", ".join(f"{v} {k}" for k, v in others.items()) or "none left in another state"
    stored = "; ".join(
        ", ".join(f"{name} {n}" for name, n in row) for row in ms["stored_executions"]
    )
    other_retries = d["retries"] - ms["failed_once"]
    dl_error = str(dl.get("error", "-")).removeprefix(f"step '{dl.get('failed_step')}' failed: ")
    dl_steps = ", ".join(f"{k} ran {v}x" for k, v in dl["step_executions"].items())
    rows = [
        (
            "throughput",
            f"{tp['jobs_per_second']:,.0f} jobs/s ({_n(tp['jobs'])} jobs in {tp['seconds']:.1f}s; "
            f"enqueue_many in batches of {en['batch']}, a worker with {wk['max_in_flight']} "
            "in flight)",
        ),
        (
            "queue wait",
            f"p50 {qw['p50']:.0f} ms, p99 {qw['p99']:.0f} ms, max {qw['max']:.0f} ms (enqueue "
            f"commit to body start of {_n(qw['measured'])} jobs queued behind the producer's "
            f"backlog of ~{en['backlog']}+: the backlog over the rate, not the pickup)",
        ),
        (
            "pickup",
            f"p50 {pk['p50']:.1f} ms, max {pk['max']:.1f} ms (enqueue commit to body start of "
            f"{pk['measured']} receipts enqueued one at a time, {pk['gap_ms']} ms apart, onto "
            "the idle worker)",
        ),
        ("every job", f"{_n(jobs['done'])} of {_n(jobs['total'])} done ({not_done})"),
        (
            "retries",
            f"{d['retries']}: {ms['failed_once']} orders whose payment gateway timed out once, "
            f"{other_retries} for the ledger export before it died",
        ),
        (
            "replay",
            f"{_n(ms['jobs'])} orders x 3 steps: reserve-stock ran {_n(ms['first_step_runs'])} "
            f"times (at most {ms['first_step_max_runs']} per order, never again on a retry), "
            f"charge-card {_n(ms['failing_step_runs'])}; {ms['checked_in_storage']} retried "
            f"orders read back from storage: {stored or '-'}",
        ),
        (
            "dedupe",
            f"{dd['job']} enqueued twice with key {dd['idempotency_key']}: one job "
            f"({d['dedupes']} dedupe{'s' if d['dedupes'] != 1 else ''}, "
            f"{'the same id' if dd['same_id'] else 'DIFFERENT ids'})",
        ),
        (
            "sleep",
            f"step.sleep({sl['requested']!r}) resumed after {sl['slept_ms'] / 1000:.2f}s, then "
            f"sent the reminder: {sl['state']}",
        ),
        (
            "dead letter",
            f"export_ledger died after {dl.get('dead_after_attempts', '?')} attempts at step "
            f"{dl.get('failed_step')} ({dl_error}); "
            + (
                f"bucket fixed, introspect.requeue(id) replayed it from {dl.get('failed_step')}: "
                f"{dl['state']} ({dl_steps})"
                if dl["replayed"]
                else f"not replayed: {dl['state']}"
            ),
        ),
    ]
    lines = [
        f"x demo: {_n(jobs['total'])} jobs on {where}, schema {d['schema']}, "
        f"in {d['seconds']:.1f}s",
        "",
    ]
    lines += [f"  {label:<12} {text}" for label, text in rows]
    look = d["look"]
    lines += ["", "Look at what it did:", f"  {look['list']}", f"  {look['show']}"]
    lines.append(f"  {look['counters']}")
    if "stop" in look:
        lines.append(f"The embedded PostgreSQL keeps running for these; `{look['stop']}` stops it.")
    return "\n".join(lines)
