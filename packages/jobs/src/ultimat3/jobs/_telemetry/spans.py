"""The spans of a job: one CONSUMER span per run (linked to the request that enqueued it), one
child span per step, and the PRODUCER span of an enqueue made under a recording span.

Attributes follow the OpenTelemetry messaging semantic conventions where they fit
(``messaging.system``, ``messaging.destination.name`` = the queue, ``messaging.message.id`` = the
job id, ``messaging.operation.type`` / ``.name``), plus ``ultimat3.*`` ones (job name, run id,
attempt, outcome; a step's name and whether it was replayed).

Link, not parent. A run starts a NEW trace whose span links to the enqueuing request's span (the
context stored on the row at enqueue). The run may start hours after the request ended, runs once
per attempt (retries, resumes after a sleep) and may serve a batch enqueued by one request: as a
child it would stretch the request's trace over days and hang every retry under it, which is why
the messaging conventions recommend links for asynchronous and batch consumers. A tracing UI
follows the link both ways.
"""

from __future__ import annotations

from contextlib import AbstractContextManager
from typing import TYPE_CHECKING, Any, Final

from opentelemetry import context as otel_context
from opentelemetry import propagate
from opentelemetry import trace as otel_trace
from opentelemetry.trace import Link, SpanKind, Status, StatusCode

from ultimat3.core import tracer
from ultimat3.jobs._telemetry.trace_context import enqueue_trace_context, linked_span_context

if TYPE_CHECKING:
    from ultimat3.jobs._run.outcome import RunOutcome
    from ultimat3.jobs.adapter import ClaimedJob

MESSAGING_SYSTEM: Final = "ultimat3"
FAILED_OUTCOMES: Final = frozenset({"retry", "dead", "failed", "lost", "abandoned"})
"""Outcomes whose run span ends with status ERROR (a suspend or a release is not a failure)."""
_ROOT: Final = otel_context.Context()
_INVALID_SPAN: Final = otel_trace.INVALID_SPAN


def run_span(spans: otel_trace.Tracer, claimed: ClaimedJob) -> AbstractContextManager[Any]:
    """The run's CONSUMER span, current for the body: a new trace, linked to the enqueuer."""
    linked = linked_span_context(claimed.trace_context)
    return spans.start_as_current_span(
        f"job {claimed.name}",
        context=_ROOT,
        kind=SpanKind.CONSUMER,
        links=None if linked is None else [Link(linked)],
        attributes={
            "messaging.system": MESSAGING_SYSTEM,
            "messaging.operation.type": "process",
            "messaging.operation.name": "run",
            "messaging.destination.name": claimed.queue,
            "messaging.message.id": claimed.id,
            "ultimat3.job": claimed.name,
            "ultimat3.job_id": claimed.id,
            "ultimat3.run_id": claimed.run_id,
            "ultimat3.queue": claimed.queue,
            "ultimat3.attempt": claimed.attempt,
            "ultimat3.max_attempts": claimed.max_attempts,
            "ultimat3.worker_id": claimed.worker_id,
        },
    )


def end_run_span(span: otel_trace.Span, outcome: RunOutcome) -> None:
    """How the run ended, on its span: the outcome and, when the attempt failed, status ERROR
    and ``error.type`` (the ``X_`` code, else the exception's type, else the outcome)."""
    span.set_attribute("ultimat3.outcome", outcome.outcome)
    span.set_attribute("ultimat3.settle_landed", outcome.landed)
    if outcome.outcome in FAILED_OUTCOMES:
        error = outcome.error or {}
        meta = error.get("meta")
        kind = error.get("code") or (meta.get("type") if isinstance(meta, dict) else None)
        error_type = str(kind or outcome.outcome)
        span.set_attribute("error.type", error_type)
        span.set_status(Status(StatusCode.ERROR, error_type))


def step_spans_on() -> bool:
    """Whether a step span is worth making: the run's own span is recording (an SDK is
    installed and sampled the run). No SDK: no step span, not even a no-op one."""
    return otel_trace.get_current_span().is_recording()


def _step_attributes(job: str, job_id: str, name: str, kind: str, replayed: bool) -> Any:
    return {
        "ultimat3.job": job,
        "ultimat3.job_id": job_id,
        "ultimat3.step": name,
        "ultimat3.step.kind": kind,
        "ultimat3.step.replayed": replayed,
    }


def step_span(job: str, job_id: str, name: str, *, kind: str, replayed: bool) -> Any:
    """The span of a step that runs, a child of the run's (current while its function runs)."""
    return tracer().start_as_current_span(
        f"step {name}", attributes=_step_attributes(job, job_id, name, kind, replayed)
    )


def mark_step(job: str, job_id: str, name: str, *, kind: str, replayed: bool) -> None:
    """An instant child span for a step that runs nothing here: a replayed ``step.run`` (its
    stored output answered), or a ``step.sleep`` / ``step.wait_for_event`` reached (the run
    suspends or passes on)."""
    tracer().start_span(
        f"step {name}", attributes=_step_attributes(job, job_id, name, kind, replayed)
    ).end()


class EnqueueSpan:
    """Around one enqueue call: ``context`` is the trace context to store on its rows.

    Under a RECORDING span a PRODUCER span ``send <queue>`` is made and ITS context is stored, so
    the run links to the enqueue itself; under a valid but non-recording span, that span's
    context; with no span, ``None``, at the cost of one context lookup (no span, no dict)."""

    __slots__ = ("_count", "_name", "_open", "_queue", "context", "span")

    def __init__(
        self, name: str, queue: str, count: int, *, context: dict[str, str] | None = None
    ) -> None:
        self._name = name
        self._queue = queue
        self._count = count
        self._open: Any = None
        self.context = context
        self.span: otel_trace.Span | None = None

    def __enter__(self) -> EnqueueSpan:
        if self._open is _UNTRACED:  # made by enqueue_span() with no recording span current
            return self
        attributes: dict[str, Any] = {
            "messaging.system": MESSAGING_SYSTEM,
            "messaging.operation.type": "send",
            "messaging.operation.name": "enqueue",
            "messaging.destination.name": self._queue,
            "ultimat3.job": self._name,
        }
        if self._count != 1:
            attributes["messaging.batch.message_count"] = self._count
        self._open = tracer().start_as_current_span(
            f"send {self._queue}", kind=SpanKind.PRODUCER, attributes=attributes
        )
        self.span = self._open.__enter__()
        carrier: dict[str, str] = {}
        propagate.inject(carrier)
        self.context = carrier or None
        return self

    def sent(self, job_id: str) -> None:
        """The id of the one job this call queued, on the producer span."""
        if self.span is not None:
            self.span.set_attribute("messaging.message.id", job_id)

    def __exit__(self, *exc: Any) -> None:
        if self._open is not None and self._open is not _UNTRACED:
            self._open.__exit__(*exc)


_UNTRACED: Final[Any] = object()


def _untraced(context: dict[str, str] | None) -> EnqueueSpan:
    made = EnqueueSpan("", "", 0, context=context)
    made._open = _UNTRACED
    return made


_NO_TRACE: Final = _untraced(None)
"""Shared by every enqueue made with no span current: nothing to store, nothing to end."""


def enqueue_span(name: str, queue: str, count: int) -> EnqueueSpan:
    """The ``EnqueueSpan`` of one enqueue call. With no span current it is a shared constant
    (one context lookup, nothing allocated); under a valid but non-recording span (a remote or
    sampled-out parent) it carries that span's context; under a recording one it opens the
    PRODUCER span when entered."""
    current = otel_trace.get_current_span()
    if current is _INVALID_SPAN:  # no span at all (the common case): nothing else to ask
        return _NO_TRACE
    if current.is_recording():
        return EnqueueSpan(name, queue, count)
    if not current.get_span_context().is_valid:
        return _NO_TRACE
    return _untraced(enqueue_trace_context())
