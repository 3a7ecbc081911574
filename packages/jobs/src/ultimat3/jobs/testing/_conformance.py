"""``JobDriverConformance``: every driver-level guarantee, as a pytest base class.

Subclass it in a test module and give it a fresh driver; every test below then runs against it::

    class TestMyDriver(JobDriverConformance):
        async def make_driver(self) -> JobDriver:
            return my_driver(...)          # over an EMPTY store: a fresh schema / db / prefix

A driver on a real server cannot freeze time, so the suite never assumes it can: a test that needs
time to pass calls ``self.elapse(ms)``, which asks ``advance_clock(ms)`` first (a driver on a
``FrozenClock`` moves it and answers ``True``) and otherwise sleeps for real. Those waits are kept
short (``visibility_timeout_ms`` is 300 ms); everything else uses ``run_at_ms`` in the past.

Optional members are declared, not guessed: a driver without a lease store sets
``supports_leases = False`` (likewise ``supports_introspect``, ``supports_backfills``,
``supports_workers`` for ``WorkerRegistry``, ``supports_task_fires`` for ``TaskFirer`` and
``supports_queue_samples`` for ``QueueSampler``),
and those tests then check that the driver really has none, instead of skipping.
"""

from __future__ import annotations

from ultimat3.jobs.testing._conformance_base import ConformanceBase
from ultimat3.jobs.testing._conformance_crashes import CrashConformance
from ultimat3.jobs.testing._conformance_inspect import InspectConformance
from ultimat3.jobs.testing._conformance_operate import OperateConformance
from ultimat3.jobs.testing._conformance_queue import QueueConformance
from ultimat3.jobs.testing._conformance_runs import RunConformance

__all__ = ["ConformanceBase", "JobDriverConformance"]


class JobDriverConformance(
    QueueConformance, RunConformance, InspectConformance, OperateConformance, CrashConformance
):
    """The driver contract as tests. Subclass it with a ``Test`` name and override
    ``make_driver`` (and ``advance_clock`` when the driver's clock can be moved)."""
