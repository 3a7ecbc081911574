"""The Redis driver's ``BackfillLedger``: one hash per ``backfill()`` pass, newest first."""

from __future__ import annotations

from typing import Any

from ultimat3.core import XError, from_epoch_ms, new_id
from ultimat3.jobs.adapter import MAX_JOB_PAGE, BackfillRow

from ._codec import freeze, maybe_text, opt, pairs, text, thaw
from ._scripts import ScriptRunner

BACKFILL_STATES = ("running", "done", "failed", "cancelled")


def _row(flat: list[Any]) -> BackfillRow:
    h = pairs(flat)
    return BackfillRow(
        id=text(h["id"]),
        name=text(h["name"]),
        state=text(h["state"]),
        rows=int(text(h["rows"])),
        cursor=thaw(h.get("cursor")),
        started_at=from_epoch_ms(int(text(h["started_at"]))),
        updated_at=from_epoch_ms(int(text(h["updated_at"]))),
        job_id=maybe_text(h.get("job_id")),
    )


class RedisBackfillLedger:
    """``begin`` opens a pass (``running``), ``advance`` adds the rows a page handled and moves
    the cursor, ``finish`` closes it; ``list`` is newest first."""

    def __init__(self, runner: ScriptRunner) -> None:
        self._r = runner

    async def begin(self, name: str, *, job_id: str | None, cursor: Any) -> BackfillRow:
        if not name:
            raise XError("X_INVARIANT", "backfill begin: the name is empty", fix="name the pass")
        cursor_json = freeze(cursor, what=f"backfill {name!r} cursor")
        flat = await self._r.run(
            "backfill", "begin", new_id(), name, opt(job_id), cursor_json, op="begin a backfill"
        )
        return _row(flat)

    async def advance(self, backfill_id: str, *, rows: int, cursor: Any) -> None:
        if isinstance(rows, bool) or not isinstance(rows, int) or rows < 0:
            raise XError(
                "X_INVARIANT",
                f"backfill {backfill_id}: rows {rows!r} is not a count",
                fix="pass the number of rows this page handled (0 or more)",
            )
        cursor_json = freeze(cursor, what=f"backfill {backfill_id} cursor")
        reply = await self._r.run(
            "backfill", "advance", backfill_id, rows, cursor_json, op="advance a backfill"
        )
        self._found(backfill_id, reply)

    async def finish(self, backfill_id: str, *, state: str) -> None:
        if state not in BACKFILL_STATES or state == "running":
            raise XError(
                "X_INVARIANT",
                f"backfill {backfill_id}: cannot finish in state {state!r}",
                fix="finish with state='done', 'failed' or 'cancelled'",
            )
        reply = await self._r.run("backfill", "finish", backfill_id, state, op="finish a backfill")
        self._found(backfill_id, reply)

    async def list(self, *, limit: int = 200) -> list[BackfillRow]:
        if isinstance(limit, bool) or not isinstance(limit, int) or not 1 <= limit <= MAX_JOB_PAGE:
            raise XError(
                "X_JOB_PAGE_INVALID",
                f"backfill list: limit {limit!r} is not 1..{MAX_JOB_PAGE}",
                fix=f"ask for at most {MAX_JOB_PAGE} rows",
            )
        reply = await self._r.run("backfill", "list", limit, op="list backfills")
        return [_row(flat) for flat in reply]

    @staticmethod
    def _found(backfill_id: str, reply: object) -> None:
        if text(reply) == "missing":
            raise XError(
                "X_INVARIANT",
                f"backfill {backfill_id} was never begun on this ledger",
                fix="use the id begin() answered",
            )
