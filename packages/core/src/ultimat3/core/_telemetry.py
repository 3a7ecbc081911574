"""Telemetry: the OpenTelemetry tracer and meter, and structured log events."""

from __future__ import annotations

import logging
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from types import MappingProxyType
from typing import Any

from opentelemetry import metrics, trace

from ._errors import XError

LOGGER_NAME = "ultimat3"
_logger = logging.getLogger(LOGGER_NAME)

EVENT_LEVELS = MappingProxyType(
    {
        "jobs.lease.lost": "error",
        "jobs.heartbeat.failed": "warning",
        "jobs.timeout.abandoned": "warning",
        "jobs.settle.unowned": "warning",
        "jobs.claim.exhausted": "warning",
        "jobs.wake.live": "info",
        "jobs.enqueue.probing": "info",
        "jobs.wake.unverified": "warning",
        "jobs.outbox.publish-failed": "error",
        "jobs.on-settled.failed": "error",
        "jobs.driver.unavailable": "warning",
        "jobs.wake.lost": "warning",
        "jobs.wake.event-failed": "warning",
        "jobs.slot.lost": "error",
        "jobs.slot.renew-failed": "warning",
        "jobs.slot.release-failed": "warning",
        "jobs.progress.failed": "warning",
        "jobs.run.crashed": "error",
        "jobs.sample.failed": "warning",
        # crash accounting (issue 23): a lapse whose worker was known dead
        "jobs.job.crashed": "error",
        "jobs.job.isolation-deferred": "info",
        # consumer(): a re-arm pass, a committed batch, a lag callback that answered no count
        "jobs.consumer.armed": "info",
        "jobs.consumer.batch": "debug",
        "jobs.consumer.lag-invalid": "warning",
        # webhooks (issue 19): ultimat3.http's receiver app and the webhook() factory
        "http.webhook.accepted": "debug",
        "http.webhook.refused": "warning",
        "http.webhook.unavailable": "error",
        "http.xerror": "warning",
        "jobs.webhook.attempt": "info",
        "jobs.webhook.disabled": "warning",
        "jobs.webhook.declared": "debug",
        # the worker's per-attempt lines (issue 17)
        "jobs.attempt.failed": "warning",
        "jobs.run.dead-lettered": "error",
        "jobs.run.failed": "error",
        "jobs.run.completed": "debug",
        "jobs.outbox.relay-failed": "warning",
        "jobs.redis.reset": "error",
        # retention: the hourly built-in x.purge (issue 17)
        "jobs.purge.done": "info",
        "jobs.purge.failed": "warning",
        "jobs.purge.unsupported": "warning",
    }
)
"""The default level of each known event; an unknown event logs at ``info``."""

_LEVELS = {
    "debug": logging.DEBUG,
    "info": logging.INFO,
    "warning": logging.WARNING,
    "error": logging.ERROR,
    "critical": logging.CRITICAL,
}
_captures: list[list[dict[str, Any]]] = []
_captures_lock = threading.Lock()


def tracer() -> trace.Tracer:
    """The ``ultimat3`` tracer (a no-op until the app installs an SDK)."""
    return trace.get_tracer(LOGGER_NAME)


def meter() -> metrics.Meter:
    """The ``ultimat3`` meter (a no-op until the app installs an SDK)."""
    return metrics.get_meter(LOGGER_NAME)


def log_event(name: str, *, level: str | None = None, **fields: Any) -> None:
    """Log the structured event ``name`` with ``fields`` on the ``ultimat3`` logger."""
    chosen = level if level is not None else EVENT_LEVELS.get(name, "info")
    levelno = _LEVELS.get(chosen)
    if levelno is None:
        raise XError(
            "X_INVARIANT",
            f"log_event {name!r}: unknown level {chosen!r}",
            fix="use level='debug', 'info', 'warning', 'error' or 'critical'",
        )
    if _captures:  # read without the lock first: most events have no capture open
        with _captures_lock:
            captures = list(_captures)
        for capture in captures:
            capture.append({"event": name, "level": chosen, **fields})
    if _logger.isEnabledFor(levelno):
        text = " ".join([name, *(f"{k}={v}" for k, v in fields.items())])
        _logger.log(levelno, "%s", text, extra={"event": name, "x_fields": dict(fields)})


@contextmanager
def capture_log_events() -> Iterator[list[dict[str, Any]]]:
    """Collect ``{'event', 'level', **fields}`` for every ``log_event`` in the block."""
    captured: list[dict[str, Any]] = []
    with _captures_lock:
        _captures.append(captured)
    try:
        yield captured
    finally:
        with _captures_lock:
            for i, capture in enumerate(_captures):
                if capture is captured:
                    del _captures[i]
                    break
