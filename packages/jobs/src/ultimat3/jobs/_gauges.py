"""The worker gauges: ``job_worker_in_flight`` and ``job_worker_capacity``.

Two OpenTelemetry observable gauges on core's ``meter()``, registered once per process, read
every started worker of the process (by ``worker_id``) when the SDK collects: the runs it holds,
and its ``max_in_flight`` (a worker with no process cap reports no capacity).
"""

from __future__ import annotations

import threading
import weakref
from collections.abc import Iterable
from typing import TYPE_CHECKING, Any

from opentelemetry.metrics import CallbackOptions, Observation

from ultimat3.core import meter

if TYPE_CHECKING:
    from ._worker import JobWorker

_workers: weakref.WeakSet[JobWorker] = weakref.WeakSet()
_lock = threading.Lock()
_registered: list[Any] = []


def watch_worker(worker: JobWorker) -> None:
    """Report ``worker`` on the gauges (registering them on first use)."""
    with _lock:
        if not _registered:
            m = meter()
            _registered.append(
                m.create_observable_gauge(
                    "job_worker_in_flight",
                    callbacks=[observe_in_flight],
                    description="runs a worker process holds now",
                )
            )
            _registered.append(
                m.create_observable_gauge(
                    "job_worker_capacity",
                    callbacks=[observe_capacity],
                    description="a worker process's max_in_flight",
                )
            )
        _workers.add(worker)


def unwatch_worker(worker: JobWorker) -> None:
    with _lock:
        _workers.discard(worker)


def _watched() -> list[JobWorker]:
    with _lock:
        return sorted(_workers, key=lambda w: w.id)


def observe_in_flight(options: CallbackOptions) -> Iterable[Observation]:
    return [Observation(len(w.held()), {"worker_id": w.id}) for w in _watched()]


def observe_capacity(options: CallbackOptions) -> Iterable[Observation]:
    return [
        Observation(w.max_in_flight, {"worker_id": w.id})
        for w in _watched()
        if w.max_in_flight is not None
    ]
