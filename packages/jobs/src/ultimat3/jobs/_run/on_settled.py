"""``job(on_settled=hook)``: one hook for every ending of a run.

Called once the row settled AND the settle landed — ``completed`` (the ack), ``dead-lettered``,
``dropped`` (``retry.dead_letter=False``) or ``refused`` (``when_busy='fail'`` over a busy key) —
under the job's tenant and actor, with three tries back to back inside ONE ``on_settled_timeout``:
at the deadline ``settled.signal`` aborts with ``X_JOB_TIMEOUT`` and the hook's task is
cancelled. A hook that keeps failing is ``X_JOB_ON_SETTLED_FAILED``, logged
(``jobs.on-settled.failed``); the job's outcome never changes. Never called for a retry, a
suspension, a drain, a cancel, a lost lease or a settle that did not land, and at most once per
ending: a worker killed between the settle and the hook never runs it.
"""

from __future__ import annotations

import asyncio
import contextlib
import inspect
from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Final, Generic, Literal, TypeVar

from ultimat3.core import (
    AbortController,
    Actor,
    Signal,
    XError,
    format_duration,
    log_event,
    use_actor,
    use_signal,
    use_tenant,
)
from ultimat3.jobs.adapter import ClaimedJob

if TYPE_CHECKING:
    from ultimat3.jobs._declare.job import Job

I = TypeVar("I")  # noqa: E741 - the input type, as the spec names it
R = TypeVar("R")

SettledOutcome = Literal["completed", "dead-lettered", "dropped", "refused"]
ON_SETTLED_TRIES: Final = 3
ON_SETTLED_GRACE_S: Final = 1.0
"""How long a hook cancelled at its deadline gets to stop before the worker moves on."""


@dataclass(frozen=True, slots=True)
class Settled(Generic[I, R]):
    """What ``on_settled`` receives."""

    outcome: SettledOutcome
    job: str
    job_id: str
    run_id: str
    attempt: int
    tenant_id: str | None
    input: I | None
    """The parsed input; ``None`` when the stored payload no longer parses."""
    result: R | None
    """What the body returned (``completed`` only)."""
    error: Mapping[str, Any] | None
    """The row's ``last_error`` (every outcome but ``completed``)."""
    code: str | None
    """``error['code']``, when it has one."""
    signal: Signal
    """Live while the hook runs; aborts with ``X_JOB_TIMEOUT`` at ``on_settled_timeout``."""


async def notify_settled(
    job: Job[Any, Any],
    claimed: ClaimedJob,
    *,
    outcome: SettledOutcome,
    input: Any,
    result: Any = None,
    error: Mapping[str, Any] | None = None,
) -> bool:
    """Call ``job.on_settled``; answers whether a try succeeded. Never raises (but a cancel)."""
    hook = job.on_settled
    if hook is None:
        return True
    timeout_ms = job.on_settled_timeout_ms
    controller = AbortController()
    settled: Settled[Any, Any] = Settled(
        outcome=outcome,
        job=job.name,
        job_id=claimed.id,
        run_id=claimed.run_id,
        attempt=claimed.attempt,
        tenant_id=claimed.tenant_id,
        input=input,
        result=result,
        error=error,
        code=(error or {}).get("code") if error is not None else None,
        signal=controller.signal,
    )
    actor = Actor(id=f"job:{job.name}", org_id=claimed.tenant_id, kind="job")

    async def call() -> None:
        with use_signal(controller.signal), use_actor(actor), use_tenant(claimed.tenant_id):
            answer = hook(settled)
            if inspect.isawaitable(answer):
                await answer

    timer = asyncio.get_running_loop().call_later(
        timeout_ms / 1000,
        controller.abort,
        XError(
            "X_JOB_TIMEOUT",
            f"the on_settled hook of job {job.name!r} ({claimed.id}) passed its "
            f"on_settled_timeout of {format_duration(timeout_ms)}",
            fix="raise job(on_settled_timeout=...) or make the hook faster",
            meta={"job_id": claimed.id, "timeout_ms": timeout_ms},
        ),
    )
    failure: BaseException | None = None
    tries = 0
    try:
        while tries < ON_SETTLED_TRIES and not controller.signal.aborted:
            tries += 1
            task = asyncio.ensure_future(call())
            waiter = asyncio.ensure_future(controller.signal.wait())
            try:
                await asyncio.wait({task, waiter}, return_when=asyncio.FIRST_COMPLETED)
            except asyncio.CancelledError:
                task.cancel()
                raise
            finally:
                waiter.cancel()
            if not task.done():  # the deadline: cancel the hook and stop trying
                task.cancel()
                await asyncio.wait({task}, timeout=ON_SETTLED_GRACE_S)
                if task.done() and not task.cancelled():
                    task.exception()
                failure = controller.signal.reason
                break
            if task.cancelled():
                failure = XError("X_ABORTED", "the on_settled hook was cancelled")
                continue
            failure = task.exception()
            if failure is None:
                return True
    finally:
        timer.cancel()
    _report(job, claimed, outcome, tries, failure)
    return False


def _report(
    job: Job[Any, Any],
    claimed: ClaimedJob,
    outcome: SettledOutcome,
    tries: int,
    failure: BaseException | None,
) -> None:
    cause = f"{type(failure).__name__}: {failure}" if failure is not None else "no try ran"
    if isinstance(failure, XError):
        cause = f"{failure.code}: {failure.message}"
    error = XError(
        "X_JOB_ON_SETTLED_FAILED",
        f"the on_settled hook of job {job.name!r} ({claimed.id}, {outcome}) failed {tries} "
        f"time(s): {cause}; the job's outcome is unchanged",
        fix="fix the hook (it runs under the job's tenant with settled.signal live until "
        "on_settled_timeout); what must be recorded for certain belongs in a step.run",
    )
    with contextlib.suppress(Exception):
        log_event(
            "jobs.on-settled.failed",
            job_id=claimed.id,
            job=job.name,
            outcome=outcome,
            tries=tries,
            code=error.code,
            error=error.message,
            fix=error.fix,
        )
