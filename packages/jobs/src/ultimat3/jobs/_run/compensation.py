"""Compensation: once a run of a ``job(compensates=True)`` has failed for good, the compensators
of the steps it completed run last-in first-out, each as the durable step ``compensate:<name>``.

The unwind is durable. The attempt that fails for good writes the step ``unwinding`` (carrying
the original error) and hands the row straight back; every later attempt that finds it — a
retry after a compensator threw, a redelivery after a crash, ``x jobs retry`` — replays the
body only to re-register the compensators (``step.run`` answers stored outputs and never calls
``fn``; the body stops at the first step with no stored output) and continues the unwind,
skipping the compensators already recorded. The row carries ``UNWIND_MARGIN`` attempts past
``retry.attempts`` for it; its error stays the original failure until the unwind gives up.
"""

from __future__ import annotations

import asyncio
import contextlib
import inspect
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from ultimat3.core import Signal, XError, any_signal, to_json_form
from ultimat3.jobs._declare.policy import UNWIND_MARGIN
from ultimat3.jobs._run.steps import (
    COMPENSATE_PREFIX,
    RESERVED_STEP,
    Compensator,
    ReplayStop,
    RunState,
    _race,
    error_dict,
    step_ceiling,
)
from ultimat3.jobs._telemetry.spans import step_span, step_spans_on
from ultimat3.jobs.adapter import ClaimedJob, StepRecord

if TYPE_CHECKING:
    from ultimat3.jobs._declare.job import Job


@dataclass(frozen=True, slots=True)
class UnwindEnd:
    """How an unwinding attempt ended: every compensator ran (``failed_step is None``), one
    threw (``error``), or a once-step's outcome is unknown (``unknown``)."""

    failed_step: str | None = None
    error: Mapping[str, Any] | None = None
    unknown: bool = False


def forward_attempts(job: Job[Any, Any] | None, claimed: ClaimedJob) -> int:
    """The attempts the forward path may spend: the row's, less the unwind's margin."""
    margin = UNWIND_MARGIN if job is not None and job.compensates else 0
    return claimed.max_attempts - margin


def unwind_due(job: Job[Any, Any], claimed: ClaimedJob, stored: Mapping[str, StepRecord]) -> bool:
    """An attempt unwinds when ``unwinding`` is recorded, or when the forward attempts are spent
    (the final one ended without settling: its worker crashed)."""
    if not job.compensates:
        return False
    marker = stored.get(RESERVED_STEP)
    if marker is not None and marker.state == "completed":
        return True
    return claimed.attempt > forward_attempts(job, claimed)


def original_error(claimed: ClaimedJob, stored: Mapping[str, StepRecord]) -> dict[str, Any]:
    """The failure being unwound: what ``unwinding`` recorded, else the lapse of the final
    forward attempt (a worker that died before it could say why)."""
    marker = stored.get(RESERVED_STEP)
    if marker is not None and isinstance(marker.output, Mapping):
        error = marker.output.get("error")
        if isinstance(error, Mapping):
            return dict(error)
    final = claimed.max_attempts - UNWIND_MARGIN
    return XError(
        "X_JOB_LEASE_LOST",
        f"job {claimed.name!r} ({claimed.id}): its final attempt ({final}) ended without "
        "settling (the worker stopped renewing its lease), so the run unwinds",
        meta={"job_id": claimed.id, "attempts": final},
    ).to_dict()


async def mark_unwinding(state: RunState, error: Mapping[str, Any]) -> None:
    """Write ``unwinding`` with the original error: the unwind's durable start."""
    await state.record(RESERVED_STEP, "completed", output={"error": dict(error)})


async def unwind(
    state: RunState, replay: Callable[[], Awaitable[Any]], original: Mapping[str, Any]
) -> UnwindEnd:
    """One unwinding attempt: replay the body to re-register the compensators, then run the
    ones not yet recorded, last-in first-out."""
    stored = state.stored.get(RESERVED_STEP)
    if stored is None or stored.state != "completed":
        await mark_unwinding(state, original)
    state.unwind_step = RESERVED_STEP
    state.replaying = True
    try:
        await replay()
    except ReplayStop:
        pass
    except Exception:
        pass  # what the body throws past its last stored step is the failure being unwound
    finally:
        state.replaying = False
    for comp in reversed(state.compensators or ()):
        name = COMPENSATE_PREFIX + comp.name
        done = state.stored.get(name)
        if done is not None and done.state == "completed":
            continue  # a replay skips what ran
        state.unwind_step = name
        if comp.unknown:
            return UnwindEnd(failed_step=comp.name, unknown=True)
        try:
            output = await _compensate(state, comp, name)
        except BaseException as exc:
            if isinstance(exc, asyncio.CancelledError) or state.signal.aborted:
                raise  # the verdict is the signal's (a drain, a lost lease, the deadline)
            error = error_dict(exc, step=name)
            await state.record(name, "failed", error=error)
            return UnwindEnd(failed_step=comp.name, error=error)
        await state.record(name, "completed", output=output)
    return UnwindEnd()


async def _compensate(state: RunState, comp: Compensator, name: str) -> Any:
    ceiling = step_ceiling(state, name)
    signal = any_signal(state.signal, ceiling) if ceiling is not None else state.signal
    traced = (
        step_span(state.job.name, state.claimed.id, name, kind="compensate", replayed=False)
        if step_spans_on()
        else contextlib.nullcontext()
    )
    with traced:
        try:
            await state.notice("call", name)
            result = await _race(_bound(comp.fn, comp.output), signal, ceiling)
            await state.notice("return", name)
        finally:
            if ceiling is not None:
                ceiling.cancel()
    return to_json_form(result)


def _bound(fn: Callable[..., Any], output: Any) -> Callable[[Signal], Any]:
    """``compensate(output, signal)``, or ``compensate(output)`` for a one-argument undo."""
    with_signal = _positional(fn) >= 2
    if inspect.iscoroutinefunction(fn):

        async def call_async(signal: Signal) -> Any:
            return await (fn(output, signal) if with_signal else fn(output))

        return call_async

    def call(signal: Signal) -> Any:
        return fn(output, signal) if with_signal else fn(output)

    return call


def _positional(fn: Callable[..., Any]) -> int:
    try:
        params = inspect.signature(fn).parameters.values()
    except (TypeError, ValueError):
        return 2
    count = 0
    for p in params:
        if p.kind is p.VAR_POSITIONAL:
            return 2
        if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD):
            count += 1
    return count


def compensation_failed(
    claimed: ClaimedJob, end: UnwindEnd, original: Mapping[str, Any]
) -> dict[str, Any]:
    """The row's error when the unwind gives up: ``X_JOB_COMPENSATION_FAILED`` naming the step,
    the original failure under ``meta['original']``."""
    step = end.failed_step or RESERVED_STEP
    if end.unknown:
        why = (
            f"the outcome of once-step {step!r} is unknown, so the unwind cannot tell whether "
            "to undo it"
        )
        fix = (
            f"x jobs resolve-step {claimed.id} {step} --ran --output '<json>' or --not-ran, "
            f"then x jobs retry {claimed.id} (the unwind continues)"
        )
    else:
        cause = (end.error or {}).get("message") or "it was interrupted"
        why = f"compensator {COMPENSATE_PREFIX}{step} failed: {cause}"
        fix = (
            f"fix the compensator of step {step!r}, then x jobs retry {claimed.id} (the unwind "
            "continues)"
        )
    return XError(
        "X_JOB_COMPENSATION_FAILED",
        f"job {claimed.name!r} ({claimed.id}) could not unwind: {why}",
        fix=fix,
        meta={
            "job_id": claimed.id,
            "step": step,
            "attempts": claimed.attempt,
            "original": dict(original),
            "error": dict(end.error) if end.error is not None else None,
        },
    ).to_dict()
