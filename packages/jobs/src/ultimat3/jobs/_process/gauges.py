"""The worker gauges: ``job_worker_in_flight``, ``job_worker_capacity``, ``queue_depth`` and
``queue_demand``.

OpenTelemetry observable gauges on core's ``meter()``, registered once per process, read every
started worker of the process when the SDK collects: its bodies running and its ``max_in_flight``
(by ``worker_id``; a worker with no process cap reports no capacity), and per ``queue`` the last
sample its ``DepthSampler`` took (``sampler.py``; two workers of one process serving a queue
report it once, the newer sample).
"""

from __future__ import annotations

import threading
import weakref
from collections.abc import Iterable
from typing import Any, Protocol

from opentelemetry.metrics import CallbackOptions, Observation

from ultimat3.core import meter
from ultimat3.jobs._process.sampler import DepthSampler, mark_read
from ultimat3.jobs.adapter import QueueSample


class GaugedWorker(Protocol):
    """What the gauges read of a worker (``JobWorker`` is one; the gauges import no worker)."""

    @property
    def id(self) -> str: ...

    @property
    def max_in_flight(self) -> int | None: ...

    @property
    def depth_sampler(self) -> DepthSampler: ...

    def bodies(self) -> int: ...


_workers: weakref.WeakSet[GaugedWorker] = weakref.WeakSet()
_lock = threading.Lock()
_registered: list[Any] = []


def watch_worker(worker: GaugedWorker) -> None:
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
            _registered.append(
                m.create_observable_gauge(
                    "queue_depth",
                    callbacks=[observe_depth],
                    description="jobs due now that no worker holds, per queue (sampled)",
                )
            )
            _registered.append(
                m.create_observable_gauge(
                    "queue_demand",
                    callbacks=[observe_demand],
                    description="runs in flight plus the due backlog of an unpaused queue "
                    "(sampled): what the worker HPA scales on",
                )
            )
        _workers.add(worker)


def unwatch_worker(worker: GaugedWorker) -> None:
    with _lock:
        _workers.discard(worker)


def _watched() -> list[GaugedWorker]:
    with _lock:
        return sorted(_workers, key=lambda w: w.id)


def observe_in_flight(options: CallbackOptions) -> Iterable[Observation]:
    return [Observation(w.bodies(), {"worker_id": w.id}) for w in _watched()]


def observe_capacity(options: CallbackOptions) -> Iterable[Observation]:
    return [
        Observation(w.max_in_flight, {"worker_id": w.id})
        for w in _watched()
        if w.max_in_flight is not None
    ]


def _samples() -> list[QueueSample]:
    """The newest fresh sample of each queue any watched worker serves; wakes every sampler."""
    mark_read()
    newest: dict[str, tuple[float, QueueSample]] = {}
    for w in _watched():
        sampler = w.depth_sampler
        sampler.want()
        at = sampler.sampled_at
        for sample in sampler.fresh():
            seen = newest.get(sample.queue)
            if at is not None and (seen is None or seen[0] < at):
                newest[sample.queue] = (at, sample)
    return [newest[q][1] for q in sorted(newest)]


def observe_depth(options: CallbackOptions) -> Iterable[Observation]:
    return [Observation(s.depth, {"queue": s.queue}) for s in _samples()]


def observe_demand(options: CallbackOptions) -> Iterable[Observation]:
    return [Observation(s.demand, {"queue": s.queue}) for s in _samples()]
