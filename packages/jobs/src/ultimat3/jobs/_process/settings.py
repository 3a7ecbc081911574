"""``WorkerSettings``: a worker's tuning knobs as one typed value (as httpx groups ``Limits`` and
``Timeout``), so an app builds them once — from its configuration — and hands them to
``job_worker(settings=...)``, ``x worker`` or ``run_jobs``.

Every field has the default ``job_worker`` has always had; ``job_worker``'s own keywords still
work, and one given both ways with two different values is refused (``X_CONFIG_INVALID``).
"""

from __future__ import annotations

import dataclasses
import enum
from dataclasses import dataclass
from typing import Any, Final, Literal

from ultimat3.core import XError
from ultimat3.jobs._process.sampler import DEFAULT_DEPTH_SAMPLE_INTERVAL_MS
from ultimat3.jobs._run.outcome import DEFAULT_ABANDON_GRACE_MS, DEFAULT_DRAIN_TIMEOUT_MS

DEFAULT_CLAIM_BATCH: Final = 10
"""Rows one claim asks for when the worker has no ``max_in_flight`` cap."""


class _Unset(enum.Enum):
    UNSET = "unset"

    def __repr__(self) -> str:
        return "UNSET"


UNSET: Final = _Unset.UNSET
"""A ``job_worker`` keyword left out (so ``settings=`` decides)."""
Unset = Literal[_Unset.UNSET]


@dataclass(frozen=True, slots=True, kw_only=True)
class WorkerSettings:
    """How a worker polls, leases, heartbeats, drains and claims. Milliseconds throughout."""

    poll_interval_ms: int = 250
    """The pause between passes while work keeps coming (and a busy key's retry delay)."""
    idle_poll_max_ms: int = 2000
    """The ceiling the idle poll doubles up to (5 s while the driver's wake is proven)."""
    visibility_timeout_ms: int = 30_000
    """A claim's lease: a run not renewed within it is re-offered to another worker."""
    heartbeat_interval_ms: int | None = None
    """How often a run's lease is renewed; ``None``: a third of the visibility timeout."""
    drain_timeout_ms: int = DEFAULT_DRAIN_TIMEOUT_MS
    """On SIGTERM / ``drain()``: how long runs in flight get to finish before they are aborted."""
    abandon_grace_ms: int = DEFAULT_ABANDON_GRACE_MS
    """After an abort: how long a body gets to stop before its run is abandoned."""
    claim_batch: int = DEFAULT_CLAIM_BATCH
    """Rows one claim asks for when the worker has no ``max_in_flight`` cap."""
    depth_sample_interval_ms: int = DEFAULT_DEPTH_SAMPLE_INTERVAL_MS
    """How often the ``queue_depth`` / ``queue_demand`` gauges' sample is taken."""

    def merged(self, given: dict[str, Any]) -> WorkerSettings:
        """These settings with ``given`` (keywords passed to ``job_worker`` beside them)
        applied; a knob given both ways with two different values is refused."""
        changes: dict[str, Any] = {}
        for name, value in given.items():
            if value is UNSET:
                continue
            mine = getattr(self, name)
            default = WORKER_DEFAULTS[name]
            if mine != default and value != mine:
                raise XError(
                    "X_CONFIG_INVALID",
                    f"job_worker: {name} is {value!r} as a keyword and {mine!r} in settings=",
                    fix=f"give {name} once: in WorkerSettings({name}=...) or as job_worker's "
                    "keyword",
                )
            changes[name] = value
        return dataclasses.replace(self, **changes) if changes else self


WORKER_DEFAULTS: Final[dict[str, Any]] = {
    f.name: f.default for f in dataclasses.fields(WorkerSettings)
}
