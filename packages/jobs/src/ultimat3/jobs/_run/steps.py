"""Durable steps: ``step.run``, ``step.sleep``, ``step.wait_for_event``.

The step is the retry unit. ``step.run(name, fn)`` executes ``fn`` once ever: its JSON form is
stored under ``(job id, name)`` through the driver's step store, and a replay answers it without
calling ``fn``. ``sleep`` and ``wait_for_event`` record what they wait for and SUSPEND the run:
the attempt is handed back uncounted and the run resumes, replaying, in any worker.
"""

from __future__ import annotations

import asyncio
import inspect
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Final, TypeVar, overload

from pydantic import TypeAdapter, ValidationError

from ultimat3.core import (
    DeadlineSignal,
    Duration,
    JsonValue,
    Signal,
    XError,
    any_signal,
    deadline_signal,
    format_duration,
    installed_adapter,
    parse_duration,
    to_json_form,
)
from ultimat3.jobs._run.observe import RunEvent, RunEventKind, RunObserver
from ultimat3.jobs._run.run_log import bounded_traceback
from ultimat3.jobs._telemetry.spans import mark_step, step_span, step_spans_on
from ultimat3.jobs.adapter import ClaimedJob, StepRecord, TransactionalStepStore

if TYPE_CHECKING:
    from ultimat3.jobs._declare.job import Job
    from ultimat3.jobs.adapter import EventBus, JobDriver

T = TypeVar("T")

RESERVED_STEP = "unwinding"
COMPENSATE_PREFIX = "compensate:"
SLEEP_PREFIX = "sleep:"
DEFAULT_EVENT_POLL_MS: Final = 30_000
"""How often a waiting run looks again on a bus with no push (any bus but Postgres's)."""
MAX_EVENTS_PER_PASS: Final = 1000
"""Events a waiting run reads past its marker in one pass."""

StepFn = Callable[[Signal], Awaitable[T]] | Callable[[Signal], T]


class StepSuspended(BaseException):
    """Raised by ``sleep`` / ``wait_for_event`` to hand the attempt back; the worker catches it.
    A ``BaseException`` so a body's ``except Exception`` cannot swallow the suspension."""


class ReplayStop(BaseException):
    """Raised in an unwinding attempt at the first step with no stored outcome: the replay has
    re-registered every compensator it can, and the body goes no further."""


@dataclass(frozen=True, slots=True)
class Compensator:
    """A completed step's undo, registered as the body passes the step (run or replayed)."""

    name: str
    fn: Callable[..., Any]
    output: Any
    unknown: bool = False
    """A once-step whose outcome is unknown: the unwind stops there."""


@dataclass(slots=True)
class Suspension:
    run_at_ms: int
    wait_event: str | None = None


@dataclass(slots=True)
class RunState:
    """What one attempt knows while its body runs; owned by ``execute_job``."""

    job: Job[Any, Any]
    claimed: ClaimedJob
    driver: JobDriver
    signal: Signal
    stored: dict[str, StepRecord]
    monotonic: Callable[[], float]
    claim_mono: float
    event_bus: EventBus | None = None
    """The bus passed to the worker; resolved on the first wait (``bus()``) otherwise."""
    fallback_bus: EventBus | None = None
    """The worker's driver's own bus, when neither one was passed nor one is installed."""
    used: set[str] | None = None
    """The step names taken so far (made at the first step)."""
    sleeps: int = 0
    ended: bool = False
    suspension: Suspension | None = None
    failed_step: str | None = None
    """The step whose ``fn`` raised last, so the row's error can name it."""
    observer: RunObserver | None = None
    compensators: list[Compensator] | None = None
    """Registered in the order the steps completed; the unwind runs them last-in first-out
    (made at the first registration)."""
    replaying: bool = False
    """An unwinding attempt: steps answer stored outputs and never call ``fn``."""
    unwind_step: str | None = None
    """The ``compensate:<name>`` step the unwind is in (or ``unwinding`` while it replays)."""

    async def notice(
        self,
        kind: RunEventKind,
        name: str | None = None,
        state: str | None = None,
        *,
        once: bool = False,
    ) -> None:
        if self.observer is not None:
            await self.observer.observe(RunEvent(kind, self.claimed, name, state, once))

    def bus(self) -> EventBus | None:
        """The bus a wait uses: the one passed, else the one installed on ``EVENT_BUS``, else
        the driver's own (``fallback_bus``)."""
        if self.event_bus is None:
            from ultimat3.jobs.adapter import EVENT_BUS

            self.event_bus = installed_adapter(EVENT_BUS) or self.fallback_bus
        return self.event_bus

    def register(
        self, name: str, fn: Callable[..., Any] | None, output: Any, *, unknown: bool = False
    ) -> None:
        if fn is not None:
            if self.compensators is None:
                self.compensators = []
            self.compensators.append(Compensator(name, fn, output, unknown))

    def now_ms(self) -> int:
        """The driver's clock at the claim plus the time elapsed since, on the worker's monotonic
        clock: a worker whose wall clock is off still sleeps the right length."""
        return self.claimed.claimed_at_ms + int((self.monotonic() - self.claim_mono) * 1000)

    def refuse_if_over(self, what: str) -> None:
        """Past the cancel (or after the attempt ended) a step refuses to write: ``X_ABORTED``."""
        if self.ended:
            raise XError(
                "X_ABORTED",
                f"{what} refused: the attempt of job {self.job.name!r} had already ended",
                fix="await every step inside the body; work meant to outlive the attempt goes "
                "in run_to_completion(fn)",
                meta={"job_id": self.claimed.id},
            )
        reason = self.signal.reason
        if reason is not None:
            raise XError(
                "X_ABORTED",
                f"{what} refused: the run was cancelled ({reason.code}: {reason.message})",
                fix="stop at the cancellation: pass ctx.signal on and throw_if_aborted(ctx) "
                "between steps",
                meta={"job_id": self.claimed.id, "reason": reason.code},
            )

    def claim_name(self, name: str, what: str) -> None:
        used = self.used
        if used is None:
            used = self.used = set()
        elif name in used:
            raise XError(
                "X_STEP_DUPLICATE",
                f"job {self.job.name!r}: {what} {name!r} is used twice in one run",
                fix="rename one step; step names are the persistence key (enumerate names in a "
                "loop: f'sync:{row.id}')",
                meta={"job": self.job.name, "step": name},
            )
        used.add(name)

    async def record(
        self, name: str, state: str, *, output: Any = None, error: Any = None, once: bool = False
    ) -> None:
        landed = await self.driver.steps.record(
            self.claimed.id,
            name,
            state=state,  # type: ignore[arg-type]
            worker_id=self.claimed.worker_id,
            claim=self.claimed.claim,
            output=output,
            error=error,
        )
        if not landed:
            raise XError(
                "X_JOB_LEASE_LOST",
                f"step {name!r} of job {self.job.name!r} did not land: this claim no longer "
                "holds the run",
                meta={"job_id": self.claimed.id, "step": name},
            )
        await self.notice("record", name, state, once=once)

    def suspend(self, run_at_ms: int, wait_event: str | None = None) -> StepSuspended:
        self.suspension = Suspension(run_at_ms, wait_event)
        return StepSuspended(run_at_ms)


def _check_step_name(state: RunState, name: object, what: str) -> str:
    if not isinstance(name, str) or not name:
        raise XError(
            "X_JOB_DECLARATION_INVALID",
            f"job {state.job.name!r}: {what} name {name!r} is not a non-empty str",
            fix="name every step with a stable string: step.run('provision', fn)",
            meta={"job": state.job.name, "causes": [f"{what} name {name!r}"]},
        )
    if name == RESERVED_STEP or name.startswith(COMPENSATE_PREFIX):
        raise XError(
            "X_JOB_DECLARATION_INVALID",
            f"job {state.job.name!r}: the {what} name {name!r} is reserved ('unwinding' and "
            "'compensate:*' are the framework's)",
            fix="rename the step",
            meta={"job": state.job.name, "causes": [f"{what} name {name!r} is reserved"]},
        )
    return name


async def _call(fn: Callable[[Signal], Any], signal: Signal) -> Any:
    """``fn(signal)``: a coroutine function on the loop; anything else in a thread (its
    result awaited on the loop when it is awaitable, as a lambda returning a coroutine is)."""
    if inspect.iscoroutinefunction(fn):
        return await fn(signal)
    result = await asyncio.to_thread(fn, signal)
    if inspect.isawaitable(result):
        result = await result
    return result


async def _race(fn: Callable[[Signal], Any], signal: Signal, ceiling: Signal | None) -> Any:
    """Run ``fn(signal)``; at the step's ``ceiling`` cancel it and raise the ceiling's reason.
    The run's own cancellation is enforced by the worker on the body's task: a drain lets a step
    in flight finish (and land) inside the drain budget."""
    signal.throw_if_aborted()
    if ceiling is None:
        return await _call(fn, signal)
    task = asyncio.ensure_future(_call(fn, signal))
    waiter = asyncio.ensure_future(ceiling.wait())
    try:
        await asyncio.wait({task, waiter}, return_when=asyncio.FIRST_COMPLETED)
    except asyncio.CancelledError:
        task.cancel()
        waiter.cancel()
        raise
    if task.done():
        waiter.cancel()
        return task.result()
    task.cancel()
    raise waiter.result()


def _matches(match: object, raw: Any, parsed: Any) -> bool:
    if match is None:
        return True
    if isinstance(match, Mapping):
        if not isinstance(raw, Mapping):
            return False
        return all(k in raw and raw[k] == to_json_form(v) for k, v in match.items())
    return bool(match(parsed))  # type: ignore[operator]


class Step:
    """``step``: the durable operations of one run."""

    __slots__ = ("_state",)

    def __init__(self, state: RunState) -> None:
        self._state = state

    async def run(
        self,
        name: str,
        fn: StepFn[Any],
        *,
        compensate: Callable[..., Any] | None = None,
        once: bool = False,
    ) -> JsonValue:
        """Execute ``fn(signal)`` once ever and answer its stored JSON form (on the first run
        too). ``signal`` aborts at ``step_timeout`` or with the run, whichever fires first."""
        state = self._state
        job = state.job
        _check_step_name(state, name, "step")
        state.refuse_if_over(f"step.run({name!r})")
        if compensate is not None and not job.compensates:
            raise XError(
                "X_JOB_DECLARATION_INVALID",
                f"job {job.name!r}: step {name!r} declares compensate= but the job does not "
                "declare compensates=True",
                fix=f"job(..., compensates=True) on {job.name!r}, or drop compensate=",
                meta={"job": job.name, "causes": ["compensate without compensates=True"]},
            )
        if compensate is not None and not callable(compensate):
            raise XError(
                "X_JOB_DECLARATION_INVALID",
                f"job {job.name!r}: step {name!r}: compensate is a {type(compensate).__name__}, "
                "not a callable",
                fix="compensate=lambda output, signal: undo(output)",
                meta={"job": job.name, "causes": ["compensate is not callable"]},
            )
        if not callable(fn):
            raise XError(
                "X_INVARIANT",
                f"step.run({name!r}): fn is a {type(fn).__name__}, not a callable",
                fix="step.run('name', lambda signal: work())",
            )
        state.claim_name(name, "step")
        await state.notice("step", name)
        stored = state.stored.get(name)
        if stored is not None and stored.state == "completed":
            if step_spans_on():  # the replay answers it: an instant span, marked replayed
                mark_step(job.name, state.claimed.id, name, kind="run", replayed=True)
            state.register(name, compensate, stored.output)
            return stored.output  # type: ignore[no-any-return]
        if once and stored is not None:
            # the unwind cannot know whether to undo it: it stops there
            state.register(name, compensate, None, unknown=True)
            if state.replaying:
                raise ReplayStop(name)
            raise XError(
                "X_STEP_OUTCOME_UNKNOWN",
                f"once-step {name!r} of job {job.name!r} started (state {stored.state!r}) but "
                "never recorded completing: it may or may not have run",
                fix=f"x jobs resolve-step {state.claimed.id} {name} --ran --output '<json>' or "
                f"--not-ran, then x jobs retry {state.claimed.id}",
                meta={"job_id": state.claimed.id, "step": name},
            )
        if state.replaying:
            raise ReplayStop(name)  # the first step with no stored outcome: the replay ends
        if step_spans_on():
            with step_span(job.name, state.claimed.id, name, kind="run", replayed=False):
                output = await self._first_run(name, fn, once)
        else:
            output = await self._first_run(name, fn, once)
        state.register(name, compensate, output)
        return output

    async def _first_run(self, name: str, fn: Callable[[Signal], Any], once: bool) -> JsonValue:
        if once:
            await self._state.record(name, "started", once=True)
        return await self._execute(name, fn)

    async def _execute(self, name: str, fn: Callable[[Signal], Any]) -> JsonValue:
        state = self._state
        ceiling = step_ceiling(state, name)
        signal = any_signal(state.signal, ceiling) if ceiling is not None else state.signal
        try:
            await state.notice("call", name)
            result = await _race(fn, signal, ceiling)
            await state.notice("return", name)
        except BaseException as exc:
            if ceiling is not None:
                ceiling.cancel()
            if isinstance(exc, asyncio.CancelledError | StepSuspended) or state.signal.aborted:
                raise  # a half-finished step is never recorded: the run was cancelled
            state.failed_step = name
            await state.record(name, "failed", error=error_dict(exc, step=name))
            raise
        if ceiling is not None:
            ceiling.cancel()
        try:
            output = to_json_form(result)
        except XError as exc:
            state.failed_step = name
            if not state.signal.aborted:
                await state.record(name, "failed", error=error_dict(exc, step=name))
            raise
        reason = state.signal.reason
        if state.ended or (reason is not None and reason.code != "X_DRAINING"):
            # a late completed would hand the next attempt a step it never ran
            state.refuse_if_over(f"step.run({name!r})")
        await state.record(name, "completed", output=output)
        return output

    def key(self, name: str) -> str:
        """A stable idempotency key for an effect outside the database: ``'<job id>:<name>'``,
        the same on every retry and replay of this run. Hand it to the other side (a payment
        API's ``Idempotency-Key``) so a step that ran but never recorded is not done twice."""
        _check_step_name(self._state, name, "step.key")
        return f"{self._state.claimed.id}:{name}"

    async def transaction(self, name: str, fn: Callable[[Any], Any]) -> JsonValue:
        """Run ``fn(conn)`` inside a transaction on a pool connection of the driver's database
        and record the step in THAT transaction: the effect and the checkpoint commit together
        or not at all (exactly once, even under SIGKILL). Answers ``fn``'s JSON form; a replay
        answers the stored one without calling ``fn``. Postgres; memory runs ``fn(None)`` and
        records at once; a driver that cannot (Redis) is ``X_CONFIG_INVALID``."""
        state = self._state
        job = state.job
        _check_step_name(state, name, "step")
        state.refuse_if_over(f"step.transaction({name!r})")
        if not callable(fn):
            raise XError(
                "X_INVARIANT",
                f"step.transaction({name!r}): fn is a {type(fn).__name__}, not a callable",
                fix="step.transaction('name', lambda conn: conn.execute(...))",
            )
        store = state.driver.steps
        if not isinstance(store, TransactionalStepStore):
            raise XError(
                "X_CONFIG_INVALID",
                f"step.transaction({name!r}) of job {job.name!r}: the {state.driver.name!r} "
                "driver cannot commit a step's record and an effect in one transaction",
                fix="use step.run(name, fn) and hand step.key(name) to the other side as the "
                "effect's idempotency key, or run the job on the Postgres driver",
                meta={"job": job.name, "step": name, "driver": state.driver.name},
            )
        state.claim_name(name, "step")
        await state.notice("step", name)
        stored = state.stored.get(name)
        if stored is not None and stored.state == "completed":
            if step_spans_on():
                mark_step(job.name, state.claimed.id, name, kind="transaction", replayed=True)
            return stored.output  # type: ignore[no-any-return]
        if state.replaying:
            raise ReplayStop(name)
        if step_spans_on():
            with step_span(job.name, state.claimed.id, name, kind="transaction", replayed=False):
                return await self._transact(store, name, fn)
        return await self._transact(store, name, fn)

    async def _transact(
        self, store: TransactionalStepStore, name: str, fn: Callable[[Any], Any]
    ) -> JsonValue:
        state = self._state

        async def inside(conn: Any) -> JsonValue:
            state.signal.throw_if_aborted()
            result = fn(conn)
            if inspect.isawaitable(result):
                result = await result
            return to_json_form(result)  # refused inside: the transaction rolls back

        try:
            await state.notice("call", name)
            landed, output = await store.record_in_transaction(
                state.claimed.id,
                name,
                worker_id=state.claimed.worker_id,
                claim=state.claimed.claim,
                fn=inside,
            )
            await state.notice("return", name)
        except BaseException as exc:
            if isinstance(exc, asyncio.CancelledError | StepSuspended) or state.signal.aborted:
                raise
            state.failed_step = name
            await state.record(name, "failed", error=error_dict(exc, step=name))
            raise
        if not landed:
            raise XError(
                "X_JOB_LEASE_LOST",
                f"step {name!r} of job {state.job.name!r} did not land: this claim no longer "
                "holds the run (its transaction rolled back)",
                meta={"job_id": state.claimed.id, "step": name},
            )
        await state.notice("record", name, "completed")
        return output  # type: ignore[no-any-return]

    async def sleep(self, duration: Duration) -> None:
        """Suspend the run for ``duration``; it resumes (replaying) in any worker after it."""
        state = self._state
        state.refuse_if_over("step.sleep")
        ms = parse_duration(duration, name="step.sleep", allow_zero=True)
        state.sleeps += 1
        name = f"{SLEEP_PREFIX}{state.sleeps}"
        state.claim_name(name, "sleep")
        stored = state.stored.get(name)
        now = state.now_ms()
        await state.notice("step", name)
        if step_spans_on():
            replayed = stored is not None and stored.state == "completed"
            mark_step(state.job.name, state.claimed.id, name, kind="sleep", replayed=replayed)
        if stored is not None and stored.state == "completed" and isinstance(stored.output, dict):
            if state.replaying:
                return
            wake_at = int(stored.output["wake_at_ms"])
        else:
            if state.replaying:
                raise ReplayStop(name)
            wake_at = now + ms
            await state.record(name, "completed", output={"wake_at_ms": wake_at})
        if now >= wake_at:
            return
        raise state.suspend(wake_at)

    @overload
    async def wait_for_event(
        self,
        name: str,
        event: str,
        *,
        schema: type[T],
        match: Callable[[T], bool] | Mapping[str, Any] | None = None,
        timeout: Duration | None = None,  # noqa: ASYNC109 - a durable timeout, not asyncio's
    ) -> T | None: ...

    @overload
    async def wait_for_event(
        self,
        name: str,
        event: str,
        *,
        schema: Any,
        match: Callable[[Any], bool] | Mapping[str, Any] | None = None,
        timeout: Duration | None = None,  # noqa: ASYNC109
    ) -> Any: ...

    async def wait_for_event(
        self,
        name: str,
        event: str,
        *,
        schema: Any = None,
        match: Callable[[Any], bool] | Mapping[str, Any] | None = None,
        timeout: Duration | None = None,  # noqa: ASYNC109
    ) -> Any:
        """Suspend until ``event`` is published with a payload ``schema`` accepts (and ``match``
        matches), and answer it parsed; ``None`` once ``timeout`` passes. An event published
        after the wait began is this wait's."""
        state = self._state
        job = state.job
        _check_step_name(state, name, "wait_for_event")
        state.refuse_if_over(f"step.wait_for_event({name!r})")
        causes: list[str] = []
        if schema is None:
            causes.append("schema is required")
        given: object = event
        if not isinstance(given, str) or not given:
            causes.append(f"event {given!r} is not a non-empty str")
        matcher: object = match
        if matcher is not None and not (callable(matcher) or isinstance(matcher, Mapping)):
            causes.append("match is neither a callable nor a dict of fields")
        if causes:
            raise XError(
                "X_JOB_DECLARATION_INVALID",
                f"job {job.name!r}: step.wait_for_event({name!r}): " + "; ".join(causes),
                fix="step.wait_for_event('approval', 'order.approved', schema=Approved, "
                "match={'order_id': ...}, timeout='7d')",
                meta={"job": job.name, "causes": causes},
            )
        timeout_ms = None if timeout is None else parse_duration(timeout, name="timeout")
        adapter = _type_adapter(schema)
        state.claim_name(name, "wait_for_event")
        await state.notice("step", name)
        stored = state.stored.get(name)
        if step_spans_on():
            replayed = stored is not None and stored.state == "completed"
            mark_step(job.name, state.claimed.id, name, kind="wait_for_event", replayed=replayed)
        if stored is not None and stored.state == "completed":
            if stored.output is None:
                return None
            return _parse_event(state, adapter, name, event, stored.output)
        if state.replaying:
            raise ReplayStop(name)
        bus = state.bus()
        if bus is None:
            from ultimat3.jobs.adapter import EVENT_BUS

            raise XError(
                "X_ADAPTER_MISSING",
                f"step.wait_for_event({name!r}) has no event bus to wait on",
                fix=EVENT_BUS.fix,
                meta={"port": EVENT_BUS.name},
            )
        now = state.now_ms()
        if stored is not None and isinstance(stored.output, dict) and "marker" in stored.output:
            marker = str(stored.output["marker"])
            timeout_at = stored.output.get("timeout_at_ms")
        else:
            marker = await bus.marker()
            timeout_at = None if timeout_ms is None else now + timeout_ms
            await state.record(
                name, "started", output={"marker": marker, "timeout_at_ms": timeout_at}
            )
        for raw in await bus.find_after(event, marker, limit=MAX_EVENTS_PER_PASS):
            if isinstance(match, Mapping) and not _matches(match, raw, None):
                continue  # a dict match is read off the raw payload, before the schema
            parsed = _parse_event(state, adapter, name, event, raw)
            if callable(match) and not _matches(match, raw, parsed):
                continue
            await state.record(name, "completed", output=to_json_form(raw))
            return parsed
        if timeout_at is not None and now >= int(timeout_at):
            await state.record(name, "completed", output=None)
            return None
        poll = job.event_poll_ms or getattr(bus, "default_poll_ms", None) or DEFAULT_EVENT_POLL_MS
        wake = now + int(poll)
        if timeout_at is not None:
            wake = min(wake, int(timeout_at))
        raise state.suspend(wake, wait_event=event)


_ADAPTERS: dict[Any, TypeAdapter[Any]] = {}


def _type_adapter(schema: Any) -> TypeAdapter[Any]:
    """The ``TypeAdapter`` of a wait's schema, built once per schema (building one costs far
    more than a validation)."""
    try:
        adapter = _ADAPTERS.get(schema)
    except TypeError:  # an unhashable schema: built each time
        return TypeAdapter(schema)
    if adapter is None:
        adapter = TypeAdapter(schema)
        if len(_ADAPTERS) >= 1024:
            _ADAPTERS.clear()
        _ADAPTERS[schema] = adapter
    return adapter


def step_ceiling(state: RunState, name: str) -> DeadlineSignal | None:
    """The job's ``step_timeout`` as a signal for one step (or compensator) named ``name``."""
    job = state.job
    if job.step_timeout_ms is None:
        return None
    return deadline_signal(
        job.step_timeout_ms,
        reason=XError(
            "X_JOB_TIMEOUT",
            f"step {name!r} of job {job.name!r} passed its step_timeout of "
            f"{format_duration(job.step_timeout_ms)}",
            fix="raise job(step_timeout=...) or split the step",
            meta={"job": job.name, "step": name},
        ),
    )


def _parse_event(
    state: RunState, adapter: TypeAdapter[Any], name: str, event: str, raw: Any
) -> Any:
    try:
        return adapter.validate_python(raw)
    except ValidationError as exc:
        problems = [
            f"{'.'.join(str(p) for p in e['loc']) or '$'}: {e['msg']}"
            for e in exc.errors(include_url=False)
        ]
        raise XError(
            "X_JOB_EVENT_INVALID",
            f"job {state.job.name!r}: wait {name!r} got an {event!r} event its schema refuses: "
            + "; ".join(problems),
            fix="publish a payload the schema accepts, or widen the schema; then "
            f"x jobs retry {state.claimed.id}",
            meta={"job_id": state.claimed.id, "step": name, "event": event, "errors": problems},
        ) from None


def error_dict(exc: BaseException, *, step: str | None = None) -> dict[str, Any]:
    """The stored form of an error: ``XError.to_dict()``; any other exception as a dict of the
    same shape with ``code`` ``None`` (unclassified: retryable) and its type in ``meta``. An
    exception that was raised adds ``traceback`` (bounded, newest frames kept)."""
    trace = bounded_traceback(exc)
    if isinstance(exc, XError):
        out = exc.to_dict()
        if step is not None:
            out["meta"] = {**out["meta"], "step": step}
        if trace is not None:
            out["traceback"] = trace
        return out
    meta: dict[str, Any] = {"type": type(exc).__name__}
    if step is not None:
        meta["step"] = step
    where = f"step {step!r} failed: " if step is not None else ""
    out = {
        "code": None,
        "message": f"{where}{type(exc).__name__}: {exc}",
        "fix": None,
        "meta": meta,
        "status": None,
    }
    if trace is not None:
        out["traceback"] = trace
    return out
