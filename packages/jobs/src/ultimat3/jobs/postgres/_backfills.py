"""``BackfillLedger`` over ``x_backfills``: one row per ``backfill()`` pass."""

from __future__ import annotations

from typing import Any, Final

from ultimat3.core import XError, is_lowercase_uuid, new_id
from ultimat3.jobs.adapter import MAX_JOB_PAGE, BackfillRow
from ultimat3.jobs.postgres._db import Database
from ultimat3.jobs.postgres._rows import backfill_row, check_text, to_json_text

BACKFILL_STATES: Final = ("running", "done", "failed", "cancelled")


def _never_begun(backfill_id: str) -> XError:
    return XError(
        "X_INVARIANT",
        f"backfill {backfill_id} was never begun on this ledger",
        fix="use the id begin() answered",
    )


class PostgresBackfillLedger:
    """``begin`` opens a pass (``running``), ``advance`` adds the rows a page handled and moves
    the cursor, ``finish`` closes it; ``list`` is newest first."""

    def __init__(self, db: Database) -> None:
        self._db = db

    async def begin(self, name: str, *, job_id: str | None, cursor: Any) -> BackfillRow:
        check_text(name, what="backfill begin: the name")
        row = await self._db.fetchone(
            "backfill_begin",
            {
                "id": new_id(),
                "name": name,
                "job_id": check_text(job_id, what=f"backfill {name!r}: job_id", optional=True),
                "cursor": to_json_text(cursor, what=f"backfill {name!r} cursor"),
            },
            what=f"beginning backfill {name!r}",
        )
        assert row is not None
        return backfill_row(row)

    async def advance(self, backfill_id: str, *, rows: int, cursor: Any) -> None:
        if isinstance(rows, bool) or not isinstance(rows, int) or rows < 0:
            raise XError(
                "X_INVARIANT",
                f"backfill {backfill_id}: rows {rows!r} is not a count",
                fix="pass the number of rows this page handled (0 or more)",
            )
        cursor_json = to_json_text(cursor, what=f"backfill {backfill_id} cursor")
        if not is_lowercase_uuid(backfill_id):
            raise _never_begun(backfill_id)
        n = await self._db.rowcount(
            "backfill_advance",
            {"id": backfill_id, "rows": rows, "cursor": cursor_json},
            what=f"advancing backfill {backfill_id}",
        )
        if n == 0:
            raise _never_begun(backfill_id)

    async def finish(self, backfill_id: str, *, state: str) -> None:
        if state not in BACKFILL_STATES or state == "running":
            raise XError(
                "X_INVARIANT",
                f"backfill {backfill_id}: cannot finish in state {state!r}",
                fix="finish with state='done', 'failed' or 'cancelled'",
            )
        if not is_lowercase_uuid(backfill_id):
            raise _never_begun(backfill_id)
        n = await self._db.rowcount(
            "backfill_finish",
            {"id": backfill_id, "state": state},
            what=f"finishing backfill {backfill_id}",
        )
        if n == 0:
            raise _never_begun(backfill_id)

    async def list(self, *, limit: int = 200) -> list[BackfillRow]:
        if isinstance(limit, bool) or not isinstance(limit, int) or not 1 <= limit <= MAX_JOB_PAGE:
            raise XError(
                "X_JOB_PAGE_INVALID",
                f"backfill list: limit {limit!r} is not 1..{MAX_JOB_PAGE}",
                fix=f"ask for at most {MAX_JOB_PAGE} rows",
            )
        rows = await self._db.fetchall("backfill_list", {"limit": limit}, what="backfill list")
        return [backfill_row(r) for r in rows]
