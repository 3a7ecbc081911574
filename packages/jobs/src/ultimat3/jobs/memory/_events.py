"""The memory event bus for ``step.wait_for_event``.

It reads "after the wait began" off its own sequence, and stamps an event in a transaction when
that transaction is SEEN committed — so an event committed after a wait began is that wait's,
whatever moment it was published at.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Final

from ultimat3.core import JsonValue, XError, new_id, to_json_form
from ultimat3.jobs.adapter import JobDriver

MEMORY_EVENT_POLL_MS: Final = 30_000


@dataclass(slots=True)
class _Pending:
    id: str
    event: str
    payload: JsonValue
    connection: Any


class MemoryEventBus:
    """An in-process ``EventBus`` over a list (nothing survives a restart). An event published
    with a connection (a ``MemoryTransaction``, or anything with a ``state`` of ``'open'`` /
    ``'committed'`` / ``'rolled_back'``) becomes visible once that transaction is committed and
    is dropped if it rolls back."""

    default_poll_ms: Final = MEMORY_EVENT_POLL_MS
    """Nothing pushes a waiting run awake across processes: it looks again this often."""

    def __init__(self, driver: JobDriver | None = None) -> None:
        self._driver = driver
        self._events: list[tuple[int, str, str, JsonValue]] = []
        self._pending: list[_Pending] = []
        self._seq = 0

    def __repr__(self) -> str:
        return f"MemoryEventBus(events={len(self._events)}, pending={len(self._pending)})"

    async def publish(self, event: str, payload: Any, *, connection: object | None = None) -> str:
        event_id = new_id()
        value = to_json_form(payload)
        if connection is None:
            self._append(event_id, event, value)
            await self._wake([event])
            return event_id
        state = getattr(connection, "state", None)
        if state != "open":
            raise XError(
                "X_INVARIANT",
                f"the memory event bus cannot publish inside {type(connection).__name__} "
                f"(state {state!r})",
                fix="publish inside an open MemoryTransaction, or outside any transaction",
            )
        self._pending.append(_Pending(event_id, event, value, connection))
        return event_id

    async def marker(self) -> str:
        await self.flush()
        return str(self._seq)

    async def find_after(self, event: str, marker: str, *, limit: int = 100) -> list[Any]:
        await self.flush()
        try:
            after = int(marker)
        except ValueError:
            raise XError(
                "X_INVARIANT",
                f"the memory event bus does not know the marker {marker!r}",
                fix="pass a marker this bus answered",
            ) from None
        out = [p for seq, _, name, p in self._events if seq > after and name == event]
        return out[:limit]

    async def flush(self) -> int:
        """Stamp the events whose transaction committed (dropping rolled-back ones) and wake
        their waiters; answers how many became visible."""
        woken: list[str] = []
        keep: list[_Pending] = []
        for pending in self._pending:
            state = getattr(pending.connection, "state", None)
            if state == "committed":
                self._append(pending.id, pending.event, pending.payload)
                woken.append(pending.event)
            elif state == "open":
                keep.append(pending)
        self._pending = keep
        await self._wake(woken)
        return len(woken)

    def events(self, event: str | None = None) -> list[JsonValue]:
        """Every visible payload (of ``event``), oldest first (for tests)."""
        return [p for _, _, name, p in self._events if event is None or name == event]

    def _append(self, event_id: str, event: str, payload: JsonValue) -> None:
        self._seq += 1
        self._events.append((self._seq, event_id, event, payload))

    async def _wake(self, events: list[str]) -> None:
        if self._driver is None:
            return
        for name in dict.fromkeys(events):
            await self._driver.wake_waiters(name)


def memory_event_bus(driver: JobDriver | None = None) -> MemoryEventBus:
    """A fresh memory event bus; with ``driver``, a publish makes that driver's waiting runs due
    at once."""
    return MemoryEventBus(driver)
