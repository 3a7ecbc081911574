"""The memory job driver: the whole driver SPI in one process, held to the same conformance
suite as Postgres and Redis. Nothing survives a restart; it is what tests and the harness run on.

It imports ``ultimat3.jobs.adapter`` only.
"""

from __future__ import annotations

from ._driver import MemoryJobDriver, memory_job_driver
from ._events import MEMORY_EVENT_POLL_MS, MemoryEventBus, memory_event_bus
from ._outbox import MemoryOutboxStore, MemoryTransaction, memory_outbox_store

__all__ = [
    "MEMORY_EVENT_POLL_MS",
    "MemoryEventBus",
    "MemoryJobDriver",
    "MemoryOutboxStore",
    "MemoryTransaction",
    "memory_event_bus",
    "memory_job_driver",
    "memory_outbox_store",
]
