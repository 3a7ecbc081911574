"""``x jobs drain --to redis``: move the rows no worker holds from the Postgres driver onto the
Redis driver, a batch at a time, without losing or doubling one.

Per batch, inside ONE Postgres transaction: take up to ``--batch`` ready or delayed rows of a
queue with their steps (locked, ``FOR UPDATE SKIP LOCKED``), import them into Redis in one script
run, delete them from Postgres, commit. A crash before the commit rolls the batch back onto
Postgres; the next run takes it again and Redis answers ``present`` for every id it already holds,
so the batch is deleted and nothing is doubled. Redis's dedupe on the live key keeps one live job
per key when Redis already holds one (``deduped``).

The drained queues are paused on Postgres first, so no Postgres worker claims a row while a copy
may exist on both sides (between a batch landing on Redis and its commit, or after a crash); a
queue the drain paused is resumed once it is empty. Running rows refuse the drain (a worker holds
them); suspended ones (a sleep, a wait) stay on Postgres and are reported.
"""

from __future__ import annotations

import argparse
import time
from typing import Any, Final

from ultimat3.core import XError
from ultimat3.jobs.adapter import (
    DrainSource,
    Imported,
    JobDriver,
    JobImporter,
    JobIntrospection,
    driver_introspect,
)
from ultimat3.jobs.cli._driver import DRIVER_KINDS, DriverChoice, open_driver, redact
from ultimat3.jobs.cli._invocation import Invocation
from ultimat3.jobs.cli._output import Answer

DEFAULT_DRAIN_BATCH: Final = 500
MAX_DRAIN_BATCH: Final = 1000
DRAIN_TARGETS: Final = (*DRIVER_KINDS, "memory")


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--to",
        required=True,
        choices=DRAIN_TARGETS,
        help="the driver to move the rows onto (redis; its URL is --redis-url or $REDIS_URL)",
    )
    p.add_argument(
        "--queue",
        action="append",
        metavar="QUEUE",
        help="drain only this queue (repeat for more); default: every queue holding rows",
    )
    p.add_argument(
        "--batch",
        type=int,
        default=DEFAULT_DRAIN_BATCH,
        help=f"rows a transaction, 1..{MAX_DRAIN_BATCH} (default {DEFAULT_DRAIN_BATCH})",
    )


def _refuse_flags(inv: Invocation) -> str:
    """Every refusal that needs no connection; answers the target's URL."""
    a = inv.args
    source = inv.source.choice.kind
    if a.to == "memory":
        raise XError(
            "X_CONFIG_INVALID",
            "x jobs drain --to memory: the memory driver lives inside this command's process, so "
            "every row moved into it would be deleted from Postgres and lost when x exits",
            fix="drain onto a durable driver: x jobs drain --to redis --redis-url redis://...",
            meta={"to": a.to},
        )
    if a.to == source:
        raise XError(
            "X_CONFIG_INVALID",
            f"x jobs drain --to {a.to}: the source is the {source} driver too; a drain moves "
            "rows between two different drivers",
            fix="drain the Postgres driver onto Redis: x jobs drain --to redis (without "
            "--driver redis)",
            meta={"from": source, "to": a.to},
        )
    if source != "postgres" or a.to != "redis":
        raise XError(
            "X_NOT_IMPLEMENTED",
            f"x jobs drain moves rows from Postgres to Redis only, not from {source} to {a.to}",
            fix="requeue what you need on the target by hand (x jobs list --json lists it)",
            meta={"from": source, "to": a.to},
        )
    if isinstance(a.batch, bool) or not 1 <= a.batch <= MAX_DRAIN_BATCH:
        raise XError(
            "X_CONFIG_INVALID",
            f"x jobs drain --batch {a.batch}: a batch is 1 to {MAX_DRAIN_BATCH} rows",
            fix=f"pass --batch {DEFAULT_DRAIN_BATCH} (the default) or another count in range",
            meta={"batch": a.batch},
        )
    url = getattr(a, "redis_url", None) or inv.env.get("REDIS_URL") or None
    if not url:
        raise XError(
            "X_CONFIG_INVALID",
            "x jobs drain --to redis needs the Redis to move the rows onto: neither --redis-url "
            "nor REDIS_URL is set",
            fix="export REDIS_URL=redis://127.0.0.1:6379/0 (or pass --redis-url)",
        )
    return str(url)


def _drain_source(driver: JobDriver) -> DrainSource:
    from ultimat3.jobs.postgres import PostgresJobDriver
    from ultimat3.jobs.postgres._drain import PostgresDrainSource

    if not isinstance(driver, PostgresJobDriver):
        raise XError(
            "X_NOT_IMPLEMENTED",
            f"x jobs drain moves rows out of the Postgres driver only, not out of {driver!r}",
            fix="point x at the Postgres database the rows are in (--database-url)",
            meta={"driver": driver.name},
        )
    return PostgresDrainSource(driver)


async def _queues(inv: Invocation, driver: JobDriver) -> list[str]:
    if inv.args.queue:
        return list(dict.fromkeys(inv.args.queue))
    return [s.queue for s in await driver.stats() if s.ready or s.delayed or s.running]


async def cmd_drain(inv: Invocation) -> Answer:
    url = _refuse_flags(inv)
    started = time.monotonic()
    target = await open_driver(DriverChoice("redis", url))
    try:
        if not isinstance(target, JobImporter):
            raise XError(
                "X_NOT_IMPLEMENTED",
                f"the target {target!r} cannot take drained rows (it has no import_jobs)",
                fix="pip install -U ultimat3-jobs-redis",
            )
        await target.now_ms()  # unreachable Redis: X_DRIVER_UNAVAILABLE before anything moves
        driver = await inv.driver()  # no database URL: X_CONFIG_INVALID
        source = _drain_source(driver)
        intro = driver_introspect(driver)
        assert intro is not None  # the Postgres driver carries it
        inv.progress(f"x jobs drain: Postgres -> Redis at {redact(url)}")
        return await _drain(inv, driver, intro, source, target, started)
    finally:
        await target.close()


async def _drain(
    inv: Invocation,
    driver: JobDriver,
    intro: JobIntrospection,
    source: DrainSource,
    target: JobImporter,
    started: float,
) -> Answer:
    queues = await _queues(inv, driver)
    paused_before = set(await intro.paused_queues())
    we_paused = [q for q in queues if q not in paused_before]
    for queue in we_paused:
        await intro.pause_queue(queue)
    left = await source.left(queues) if queues else {}
    if left.get("running"):
        for queue in we_paused:
            await intro.resume_queue(queue)
        raise XError(
            "X_JOB_NOT_REMOVABLE",
            f"x jobs drain: {left['running']} running jobs on Postgres in "
            f"{', '.join(queues)}; a drain moves only rows no worker holds, and moved nothing",
            fix="stop the Postgres workers of those queues (SIGTERM hands their runs back to "
            "ready), or wait until `x jobs list --state running` is empty, then drain again",
            meta={"running": left["running"], "queues": queues},
        )
    try:
        return await _move(inv, queues, paused_before, we_paused, intro, source, target, started)
    except BaseException:
        inv.progress(
            f"x jobs drain: stopped; {', '.join(queues)} stay paused on Postgres (the batch in "
            "hand rolled back, and may be on Redis too): run the same x jobs drain again"
        )
        raise


async def _move(
    inv: Invocation,
    queues: list[str],
    paused_before: set[str],
    we_paused: list[str],
    intro: JobIntrospection,
    source: DrainSource,
    target: JobImporter,
    started: float,
) -> Answer:
    totals = {"moved": 0, "present": 0, "deduped": 0}
    deduped: list[dict[str, str]] = []
    batches = 0
    for queue in queues:
        while True:
            async with source.take(queue, inv.args.batch) as batch:
                if not batch.jobs:
                    break
                answers = await target.import_jobs(batch.jobs)
                _check(answers, len(batch.jobs))
                deleted = await batch.delete()
                if deleted != len(batch.jobs):
                    raise XError(
                        "X_INVARIANT",
                        f"x jobs drain: {deleted} of {len(batch.jobs)} rows of queue {queue!r} "
                        "were deleted; the batch is rolled back onto Postgres",
                        fix="run x jobs drain again: the rows Redis holds answer 'present'",
                    )
            batches += 1
            for job, answer in zip(batch.jobs, answers, strict=True):
                totals[answer.outcome] += 1
                if answer.outcome == "deduped":
                    deduped.append({"id": job["id"], "holder": answer.holder})
            inv.progress(
                f"x jobs drain: {queue}: batch {batches}, {len(batch.jobs)} rows "
                f"({totals['moved']} moved, {totals['present']} already on Redis, "
                f"{totals['deduped']} deduped so far)"
            )
    for queue in we_paused:
        await intro.resume_queue(queue)
    left = await source.left(queues) if queues else {}
    still_paused = sorted(q for q in queues if q in paused_before)
    data: dict[str, Any] = {
        "from": "postgres",
        "to": "redis",
        "queues": queues,
        **totals,
        "batches": batches,
        "deduped_onto": deduped,
        "left": {"suspended": left.get("suspended", 0), "running": left.get("running", 0)},
        "paused": still_paused,
        "seconds": round(time.monotonic() - started, 3),
    }
    return Answer(data, _text(data))


def _check(answers: list[Imported], expected: int) -> None:
    if len(answers) != expected:
        raise XError(
            "X_INVARIANT",
            f"x jobs drain: Redis answered {len(answers)} of {expected} rows; the batch is "
            "rolled back onto Postgres",
            fix="run x jobs drain again: the rows Redis holds answer 'present'",
        )


def _text(d: dict[str, Any]) -> str:
    lines = [
        f"drained {', '.join(d['queues']) or 'nothing (no queue holds rows)'} from Postgres onto "
        f"Redis: {d['moved']} moved, {d['present']} already on Redis (an earlier run), "
        f"{d['deduped']} deduped onto a live job holding the same key, in {d['batches']} "
        f"batches, {d['seconds']} s"
    ]
    if d["left"]["suspended"]:
        lines.append(
            f"{d['left']['suspended']} suspended jobs (a sleep or a wait in progress) stay on "
            "Postgres: run a Postgres worker until they finish, or drain again once they wake"
        )
    for queue in d["paused"]:
        lines.append(
            f"queue {queue} was paused before the drain and stays paused on Postgres: "
            f"x jobs resume {queue}"
        )
    return "\n".join(lines)
