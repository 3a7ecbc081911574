"""The memory outbox: a transaction stand-in and an ``OutboxStore`` over plain lists.

An app's test (or the harness) opens a :class:`MemoryTransaction`, makes it ambient with
``use_connection(tx)``, and every enqueue inside the block is staged into it, because the memory
driver joins no transaction (``owns_connection`` answers ``False``). ``tx.commit()`` makes the
staged rows visible to the relay (``claim_batch``); ``tx.rollback()`` drops them, so a rolled-back
enqueue never existed. **Nothing survives a restart**, as with the memory driver.

    store = memory_outbox_store()
    with MemoryTransaction() as tx, use_connection(tx):   # commits on a clean exit
        await onboard_org.enqueue({"org_id": org_id})      # staged, invisible until commit
"""

from __future__ import annotations

import copy
from collections.abc import Sequence
from dataclasses import dataclass
from types import TracebackType
from typing import Literal

from ultimat3.core import Clock, XError, current_clock, new_id
from ultimat3.jobs.adapter import EnqueueRequest

TransactionState = Literal["open", "committed", "rolled_back"]


class MemoryTransaction:
    """An in-memory transaction: what is staged in it lands on ``commit()`` and vanishes on
    ``rollback()``. As a (sync or async) context manager it commits on a clean exit and rolls back
    when the block raises."""

    def __init__(self) -> None:
        self._state: TransactionState = "open"
        self._staged: list[tuple[MemoryOutboxStore, EnqueueRequest]] = []

    def __repr__(self) -> str:
        return f"MemoryTransaction(state={self._state!r}, staged={len(self._staged)})"

    @property
    def state(self) -> TransactionState:
        return self._state

    def _stage(self, store: MemoryOutboxStore, requests: Sequence[EnqueueRequest]) -> None:
        self._require_open("stage into")
        self._staged.extend((store, copy.deepcopy(req)) for req in requests)

    def commit(self) -> None:
        """Publish every staged row to its store's committed list, in staging order."""
        self._require_open("commit")
        self._state = "committed"
        staged, self._staged = self._staged, []
        for store, req in staged:
            store._append(req)

    def rollback(self) -> None:
        """Forget every staged row. Rolling back a finished transaction is a no-op."""
        if self._state == "open":
            self._state = "rolled_back"
            self._staged = []

    def _require_open(self, what: str) -> None:
        if self._state != "open":
            raise XError(
                "X_INVARIANT",
                f"cannot {what} a transaction that is already {self._state.replace('_', ' ')}",
                fix="open a new MemoryTransaction() for the next unit of work",
            )

    def _finish(self, failed: bool) -> None:
        if self._state != "open":
            return
        if failed:
            self.rollback()
        else:
            self.commit()

    def __enter__(self) -> MemoryTransaction:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self._finish(exc_type is not None)

    async def __aenter__(self) -> MemoryTransaction:
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self._finish(exc_type is not None)


@dataclass(slots=True)
class _OutboxRow:
    id: str
    request: EnqueueRequest
    leased_until_ms: int | None = None


class MemoryOutboxStore:
    """``OutboxStore`` over a list: committed, unpublished rows in staging order."""

    def __init__(self, *, clock: Clock | None = None) -> None:
        self._clock = clock
        self._rows: list[_OutboxRow] = []

    def __repr__(self) -> str:
        return f"MemoryOutboxStore(unpublished={len(self._rows)})"

    def _now_ms(self) -> int:
        return (self._clock or current_clock()).now_ms()

    def _append(self, request: EnqueueRequest) -> None:
        self._rows.append(_OutboxRow(id=new_id(), request=request))

    def accepts(self, connection: object) -> bool:
        return isinstance(connection, MemoryTransaction)

    async def stage(self, connection: object, requests: Sequence[EnqueueRequest]) -> None:
        if not isinstance(connection, MemoryTransaction):
            raise XError(
                "X_INVARIANT",
                f"the memory outbox cannot stage into {type(connection).__name__}",
                fix="make a MemoryTransaction() ambient with use_connection(tx), or install the "
                "outbox store of your database",
            )
        connection._stage(self, requests)

    async def claim_batch(self, *, limit: int, lease_ms: int) -> list[tuple[str, EnqueueRequest]]:
        """Up to ``limit`` committed, unpublished rows no other relay holds, oldest first; each is
        leased for ``lease_ms`` (a relay that dies strands them that long, no longer)."""
        if isinstance(lease_ms, bool) or not isinstance(lease_ms, int) or lease_ms <= 0:
            raise XError(
                "X_INVARIANT",
                f"claim_batch: lease_ms {lease_ms!r} is not a positive number of milliseconds",
                fix="pass lease_ms=30000",
            )
        now = self._now_ms()
        out: list[tuple[str, EnqueueRequest]] = []
        for row in self._rows:
            if len(out) >= limit:
                break
            if row.leased_until_ms is not None and row.leased_until_ms > now:
                continue
            row.leased_until_ms = now + lease_ms
            out.append((row.id, copy.deepcopy(row.request)))
        return out

    async def mark_published_many(self, row_ids: Sequence[str]) -> None:
        done = set(row_ids)
        self._rows = [r for r in self._rows if r.id not in done]

    async def release(self, row_ids: Sequence[str]) -> None:
        back = set(row_ids)
        for row in self._rows:
            if row.id in back:
                row.leased_until_ms = None

    def unpublished(self) -> list[EnqueueRequest]:
        """Every committed row not yet published, in staging order (for tests)."""
        return [copy.deepcopy(r.request) for r in self._rows]


def memory_outbox_store(*, clock: Clock | None = None) -> MemoryOutboxStore:
    """A fresh, empty outbox store for :class:`MemoryTransaction` connections."""
    return MemoryOutboxStore(clock=clock)
