"""``x jobs drain``'s target on Redis: rows moved from another driver go in with one script run
per batch (``lua/import.lua``), atomic, deduped on the id (a batch imported again after a crash
adds nothing) and on the live key (one live job per key)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Final

from ultimat3.core import XError
from ultimat3.jobs.adapter import MOVABLE_STATES, Imported, ImportOutcome, MovedJob

from ._codec import compact_json, live_key, text
from ._scripts import ScriptRunner

MAX_IMPORT_BATCH: Final = 1000
"""Rows one script run takes: the server is held while it runs."""

_OUTCOMES: Final[dict[str, ImportOutcome]] = {
    "moved": "moved",
    "present": "present",
    "deduped": "deduped",
}


def _document(job: MovedJob) -> dict[str, object]:
    who = f"importing job {job.get('id')!r} ({job.get('name')!r})"
    for name in ("id", "run_id", "name", "queue", "idempotency_key"):
        value = job.get(name)
        if not isinstance(value, str) or not value:
            raise XError("X_INVARIANT", f"{who}: {name} is empty", fix="import what a drain took")
    if job["state"] not in MOVABLE_STATES:
        raise XError(
            "X_INVARIANT",
            f"{who}: a {job['state']!r} row cannot be moved, only {' or '.join(MOVABLE_STATES)}",
            fix="move rows no worker holds; let running and suspended ones settle where they are",
        )
    for name in ("attempts", "max_attempts", "run_at", "created_at"):
        value = job.get(name)
        if isinstance(value, bool) or not isinstance(value, int):
            raise XError("X_INVARIANT", f"{who}: {name} {value!r} is not a whole number")
    return {**job, "lk": live_key(job["name"], job["tenant_id"], job["idempotency_key"])}


async def import_jobs(runner: ScriptRunner, jobs: Sequence[MovedJob]) -> list[Imported]:
    if len(jobs) > MAX_IMPORT_BATCH:
        raise XError(
            "X_JOB_ENQUEUE_BATCH_TOO_LARGE",
            f"an import of {len(jobs)} jobs is past {MAX_IMPORT_BATCH} a call",
            fix=f"import at most {MAX_IMPORT_BATCH} rows at a time (x jobs drain --batch)",
        )
    if not jobs:
        return []
    doc = compact_json([_document(job) for job in jobs])
    reply = await runner.run("import", doc, op="import drained jobs")
    return [
        Imported(outcome=_OUTCOMES[text(reply[i])], holder=text(reply[i + 1]))
        for i in range(0, len(reply), 2)
    ]
