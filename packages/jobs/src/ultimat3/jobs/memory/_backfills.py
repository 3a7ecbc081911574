"""The memory driver's ``BackfillLedger``: one row per ``backfill()`` pass."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from ultimat3.core import XError, from_epoch_ms, new_id
from ultimat3.jobs.adapter import MAX_JOB_PAGE, BackfillRow

from ._state import freeze, thaw

BACKFILL_STATES = ("running", "done", "failed", "cancelled")


@dataclass(slots=True)
class _Pass:
    id: str
    name: str
    state: str
    rows: int
    cursor_json: str
    started_at_ms: int
    updated_at_ms: int
    job_id: str | None
    seq: int

    def row(self) -> BackfillRow:
        return BackfillRow(
            id=self.id,
            name=self.name,
            state=self.state,
            rows=self.rows,
            cursor=thaw(self.cursor_json),
            started_at=from_epoch_ms(self.started_at_ms),
            updated_at=from_epoch_ms(self.updated_at_ms),
            job_id=self.job_id,
        )


class MemoryBackfillLedger:
    """``begin`` opens a pass (``running``), ``advance`` adds the rows a page handled and moves
    the cursor, ``finish`` closes it; ``list`` is newest first."""

    def __init__(self, now_ms: Callable[[], int]) -> None:
        self._now_ms = now_ms
        self._passes: dict[str, _Pass] = {}
        self._seq = 0

    async def begin(self, name: str, *, job_id: str | None, cursor: Any) -> BackfillRow:
        if not name:
            raise XError("X_INVARIANT", "backfill begin: the name is empty", fix="name the pass")
        now = self._now_ms()
        self._seq += 1
        entry = _Pass(
            id=new_id(),
            name=name,
            state="running",
            rows=0,
            cursor_json=freeze(cursor, what=f"backfill {name!r} cursor"),
            started_at_ms=now,
            updated_at_ms=now,
            job_id=job_id,
            seq=self._seq,
        )
        self._passes[entry.id] = entry
        return entry.row()

    async def advance(self, backfill_id: str, *, rows: int, cursor: Any) -> None:
        entry = self._get(backfill_id)
        if isinstance(rows, bool) or not isinstance(rows, int) or rows < 0:
            raise XError(
                "X_INVARIANT",
                f"backfill {backfill_id}: rows {rows!r} is not a count",
                fix="pass the number of rows this page handled (0 or more)",
            )
        entry.cursor_json = freeze(cursor, what=f"backfill {backfill_id} cursor")
        entry.rows += rows
        entry.updated_at_ms = self._now_ms()

    async def finish(self, backfill_id: str, *, state: str) -> None:
        entry = self._get(backfill_id)
        if state not in BACKFILL_STATES or state == "running":
            raise XError(
                "X_INVARIANT",
                f"backfill {backfill_id}: cannot finish in state {state!r}",
                fix="finish with state='done', 'failed' or 'cancelled'",
            )
        entry.state = state
        entry.updated_at_ms = self._now_ms()

    async def list(self, *, limit: int = 200) -> list[BackfillRow]:
        if isinstance(limit, bool) or not isinstance(limit, int) or not 1 <= limit <= MAX_JOB_PAGE:
            raise XError(
                "X_JOB_PAGE_INVALID",
                f"backfill list: limit {limit!r} is not 1..{MAX_JOB_PAGE}",
                fix=f"ask for at most {MAX_JOB_PAGE} rows",
            )
        newest = sorted(self._passes.values(), key=lambda p: (p.started_at_ms, p.seq), reverse=True)
        return [p.row() for p in newest[:limit]]

    def _get(self, backfill_id: str) -> _Pass:
        entry = self._passes.get(backfill_id)
        if entry is None:
            raise XError(
                "X_INVARIANT",
                f"backfill {backfill_id} was never begun on this ledger",
                fix="use the id begin() answered",
            )
        return entry
