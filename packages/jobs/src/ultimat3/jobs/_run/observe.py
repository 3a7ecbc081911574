"""``RunObserver``: what ``execute_job`` tells a test tool about one run as it goes.

``crash_proof`` and ``simulate_jobs`` (``ultimat3.jobs.testing``) hang off it: the first kills a
run right after a step's record lands and counts each step function's invocations, the second
parks every run at each step so a seeded scheduler decides who moves next. An app never needs
one; ``ExecutionSettings(observer=None)`` (the default) costs one ``is None`` per step.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import ClassVar, Literal

from ultimat3.jobs.adapter import ClaimedJob

RunEventKind = Literal["start", "step", "call", "return", "record"]
"""
- ``start``: the body is about to run (after the payload, the tenant and the concurrency slot).
- ``step``: the body reached ``step.run`` / ``step.sleep`` / ``step.wait_for_event`` ``name``
  (replayed or not).
- ``call``: a step function (or a compensator, ``compensate:<name>``) is about to be called.
- ``return``: it returned without raising.
- ``record``: a step record landed in the store (``state``; ``once`` for a once-step's
  ``started`` marker).
"""


@dataclass(frozen=True, slots=True)
class RunEvent:
    kind: RunEventKind
    claimed: ClaimedJob
    name: str | None = None
    state: str | None = None
    once: bool = False
    renew: Callable[[], Awaitable[bool]] | None = None
    """On ``start``: the run's heartbeat (its row lease and its concurrency slot), for an
    observer that ``drives_heartbeat``. ``False`` when the row's lease was refused; a refused
    slot aborts the run's signal with ``X_JOB_SLOT_LOST`` by itself."""


class RunObserver:
    """Subclass and override ``observe``; it is awaited in the run's own task, so an observer
    that does not return holds the run right there (a crash or a scheduler's gate)."""

    drives_heartbeat: ClassVar[bool] = False
    """True: the run starts no heartbeat of its own; the observer renews through
    ``RunEvent.renew`` (a simulation whose clock only moves when it says so)."""

    async def observe(self, event: RunEvent) -> None:
        return None
