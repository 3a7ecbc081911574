"""What ``execute_job`` is given (``ExecutionSettings``) and what it answers (``RunOutcome``)."""

from __future__ import annotations

import random
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Literal

if TYPE_CHECKING:
    from ultimat3.jobs._run.ack_batcher import Settler
    from ultimat3.jobs._run.limiter import ConcurrencyLimiter
    from ultimat3.jobs._run.observe import RunObserver
    from ultimat3.jobs.adapter import ClaimedJob, EventBus

Outcome = Literal["done", "retry", "dead", "failed", "suspend", "release", "lost", "abandoned"]

DEFAULT_DRAIN_TIMEOUT_MS = 25_000
DEFAULT_ABANDON_GRACE_MS = 1_000
DEFAULT_BUSY_DELAY_MS = 250
"""How long a run over a ``'wait'`` concurrency cap is handed back for: one poll."""


@dataclass(frozen=True, slots=True)
class ExecutionSettings:
    """How ``execute_job`` runs one claim (the worker passes its own)."""

    visibility_timeout_ms: int = 30_000
    heartbeat_interval_ms: int | None = None
    """Default: a third of the visibility window."""
    drain_timeout_ms: int = DEFAULT_DRAIN_TIMEOUT_MS
    """How long a draining body gets to stop before it is cancelled."""
    abandon_grace_ms: int = DEFAULT_ABANDON_GRACE_MS
    """How long a cancelled body gets to stop before it is named abandoned."""
    monotonic: Callable[[], float] | None = None
    """The worker's monotonic clock in seconds (``time.monotonic``); a test harness passes the
    frozen clock's, so ``step.sleep`` wake times are exact."""
    rng: random.Random | None = None
    """The backoff jitter's randomness (seeded in tests)."""
    app: Any = None
    event_bus: EventBus | None = None
    """The bus ``step.wait_for_event`` waits on; default: the one installed on ``EVENT_BUS``."""
    fallback_event_bus: EventBus | None = None
    """The bus a wait uses when there is neither ``event_bus`` nor one installed: the worker
    passes its driver's own (``driver.event_bus()``)."""
    settler: Settler | None = None
    """How acks and renewals reach the driver (the worker batches them over ``BatchSettler``);
    default: one driver call each."""
    busy_delay_ms: int = DEFAULT_BUSY_DELAY_MS
    """A run over a ``'wait'`` cap (or whose slot was lost) is handed back, uncounted, due this
    much later: the worker passes its ``poll_interval_ms``."""
    observer: RunObserver | None = None
    """Told about the run as it goes (``crash_proof`` and ``simulate_jobs``); ``None`` in apps."""
    limiter: ConcurrencyLimiter | None = None
    """Starts per window per tenant (``job_worker(limiter=concurrency_limiter(...))``): a run
    over its tenant's rate is handed back uncounted, due when the window lets it start."""
    body_ended: Callable[[ClaimedJob], None] | None = None
    """Called once a run's body has ended (returned, raised or stopped), before its settle: the
    worker claims its next batch while the settles travel."""


@dataclass(frozen=True, slots=True)
class RunOutcome:
    """How one claimed attempt ended, and whether its settle landed."""

    job_id: str
    name: str
    queue: str
    attempt: int
    outcome: Outcome
    landed: bool
    error: Mapping[str, Any] | None = None
    delay_ms: int | None = None
    due_in_ms: int | None = None
    """A ``retry``, ``release`` or ``suspend`` that landed: the ms until the run falls due again
    (the worker arms its due timer for it)."""
