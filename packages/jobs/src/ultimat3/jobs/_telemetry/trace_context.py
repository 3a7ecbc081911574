"""The enqueuing request's trace context, carried on the job row to the run that serves it.

At enqueue the facade asks :func:`enqueue_trace_context` ONCE per call (not per row): with a
valid current span, the OpenTelemetry propagators installed in the process (W3C
``traceparent`` / ``tracestate`` by default) write it into a small ``dict[str, str]``; with none,
the answer is ``None`` and nothing else happens. The dict rides the ``EnqueueRequest`` (and the
outbox row, so it survives a transaction the driver could not join), is stored on the row
(``x_jobs.trace_context`` on Postgres, a hash field on Redis) and comes back on the
``ClaimedJob``; the run's span links to it (:func:`linked_span_context`).
"""

from __future__ import annotations

from collections.abc import Mapping

from opentelemetry import propagate, trace


def enqueue_trace_context() -> dict[str, str] | None:
    """The current span's context as propagation headers, or ``None`` without a valid span."""
    if not trace.get_current_span().get_span_context().is_valid:
        return None
    carrier: dict[str, str] = {}
    propagate.inject(carrier)
    return carrier or None


def linked_span_context(stored: Mapping[str, str] | None) -> trace.SpanContext | None:
    """The enqueuing span's context read back from a row's stored headers; ``None`` when
    nothing (or nothing valid) was stored."""
    if not stored:
        return None
    try:
        context = propagate.extract(stored)
    except Exception:  # a foreign row's headers: no link rather than a failed run
        return None
    span_context = trace.get_current_span(context).get_span_context()
    return span_context if span_context.is_valid else None
