"""``job()``: the declaration, its refusals, and the ``Job`` handle every projection hangs off.

A declaration is checked whole: every cause is named in one ``X_JOB_DECLARATION_INVALID`` (a
missing ``idempotency_key`` is its own code, ``X_IDEMPOTENCY_REQUIRED``). The handle lifts every
declared field already resolved (``retry`` with the defaults merged, durations in ms), and its
``enqueue`` / ``enqueue_many`` / ``enqueue_as`` all go through the ONE ambient facade.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping, Sequence
from datetime import datetime
from typing import TYPE_CHECKING, Any, Final, Generic, Literal, TypeVar, overload

from pydantic import TypeAdapter, ValidationError

from ultimat3.core import Actor, Duration, XError
from ultimat3.jobs._declare.checks import (
    _UNSET,
    _Causes,
    _check_concurrency,
    _check_duration,
    _check_input,
    _check_name,
    _check_retry,
    _only,
    _type_name,
)
from ultimat3.jobs._declare.enqueue import enqueue_batch, enqueue_one
from ultimat3.jobs._declare.input_guard import (
    MAX_INPUT_BYTES,
    MAX_INPUT_BYTES_CEILING,
    checked_payload,
    flat_forms_pass,
)
from ultimat3.jobs._declare.policy import (
    DEFAULT_MAX_CRASHES,
    MAX_CONCURRENCY_KEY,
    MAX_CRASHES_CEILING,
    Concurrency,
    Retry,
    WhenBusy,
)
from ultimat3.jobs._declare.result import job_result
from ultimat3.jobs._declare.sync_body import as_async_body
from ultimat3.jobs.adapter import EnqueueResult

if TYPE_CHECKING:
    from ultimat3.jobs._run.context import JobContext
    from ultimat3.jobs._run.steps import Step

I = TypeVar("I")  # noqa: E741 - the input type, as the spec names it
R = TypeVar("R")

Body = Callable[[I, "Step", "JobContext"], Awaitable[R]]
"""A job's body: ``async def body(input, step, ctx) -> result``."""

TenantOf = Callable[[I], str] | Literal["none"]
OnSettled = Callable[[Any], Awaitable[object] | None]
"""``on_settled``: ``hook(settled: Settled)``, async or a plain function."""


class Job(Generic[I, R]):
    """A declared job: the handle every projection is a method of. Never built directly — use
    ``job()``. Every declared field is lifted here, resolved."""

    kind: Final[Literal["job"]] = "job"

    def __init__(
        self,
        *,
        name: str,
        input: type[I],
        adapter: TypeAdapter[I],
        idempotency_key: Callable[[I], str],
        tenant: TenantOf[I],
        queue: str,
        retry: Retry,
        concurrency: int | None,
        concurrency_key: Callable[[I], str] | None,
        when_busy: WhenBusy | None,
        timeout_ms: int | None,
        step_timeout_ms: int | None,
        event_poll_ms: int | None,
        compensates: bool,
        on_settled: OnSettled | None,
        on_settled_timeout_ms: int,
        body: Body[I, R],
        max_input_bytes: int = MAX_INPUT_BYTES,
        max_crashes: int = DEFAULT_MAX_CRASHES,
    ) -> None:
        self.name: Final = name
        self.input: Final = input
        self.queue: Final = queue
        self.retry: Final = retry
        self.concurrency: Final = concurrency
        self.when_busy: Final = when_busy
        self.timeout_ms: Final = timeout_ms
        self.step_timeout_ms: Final = step_timeout_ms
        self.event_poll_ms: Final = event_poll_ms
        self.compensates: Final = compensates
        self.on_settled: Final = on_settled
        self.on_settled_timeout_ms: Final = on_settled_timeout_ms
        self.tenant: Final = tenant
        self.max_input_bytes: Final = max_input_bytes
        self.max_crashes: Final = max_crashes
        """Isolated runs that may crash their process before the job is dead, X_JOB_CRASHED."""
        self._adapter = adapter
        self._list_adapter: TypeAdapter[list[I]] | None = None
        self._key = idempotency_key
        self._concurrency_key = concurrency_key
        self._body: Body[I, R] = as_async_body(body)

    def __repr__(self) -> str:
        return f"<Job {self.name!r} queue={self.queue!r}>"

    # --- the payload ------------------------------------------------------------------------

    def parse(self, raw: object) -> I:
        """Validate ``raw`` (the model itself, a dict, or a stored JSON payload) against the
        declared input; ``X_BODY_INVALID`` naming the job and the fields otherwise."""
        try:
            return self._adapter.validate_python(raw)
        except RecursionError:
            raise XError(
                "X_BODY_INVALID",
                f"job {self.name!r}: the input nests too deep to validate",
                fix="flatten the input: at most 64 levels (MAX_INPUT_DEPTH)",
                meta={"job": self.name, "path": "$"},
            ) from None
        except ValidationError as exc:
            problems = [
                f"{'.'.join(str(p) for p in e['loc']) or '$'}: {e['msg']}"
                for e in exc.errors(include_url=False)
            ]
            raise XError(
                "X_BODY_INVALID",
                f"job {self.name!r}: the input is not a valid {_type_name(self.input)}: "
                + "; ".join(problems),
                fix=f"pass {self.name}.enqueue() a {_type_name(self.input)} (or a dict of its "
                "fields) the declared input accepts",
                meta={"job": self.name, "errors": problems},
            ) from None

    def payload_of(self, value: I, *, where: str = "") -> Any:
        """The JSON form an input is queued as (what ``parse`` reads back on the worker);
        ``X_BODY_INVALID`` naming the path for a hostile value or one over ``max_input_bytes``."""
        return checked_payload(
            self.name, self._adapter, value, max_bytes=self.max_input_bytes, where=where
        )

    def parse_many(self, raws: Sequence[object]) -> list[I] | None:
        """``[parse(r) for r in raws]`` in one validation; ``None`` when any input is invalid
        (``parse`` that one for the refusal naming it)."""
        try:
            return self._many().validate_python(raws if type(raws) is list else list(raws))
        except (ValidationError, RecursionError):
            return None

    def payloads_of(self, values: list[I]) -> list[Any]:
        """``[payload_of(v) for v in values]`` in one serialisation (each form checked as
        ``payload_of`` checks it; a refusal names the input's index)."""
        out: list[Any] = self._many().dump_python(values, mode="json")
        if flat_forms_pass(out, max_bytes=self.max_input_bytes):
            return out  # every form passes the guard, settled over the batch at once
        for i, (value, form) in enumerate(zip(values, out, strict=True)):
            checked_payload(
                self.name,
                self._adapter,
                value,
                max_bytes=self.max_input_bytes,
                where=f" (input {i})",
                form=form,
            )
        return out

    def _many(self) -> TypeAdapter[list[I]]:
        many = self._list_adapter
        if many is None:
            many = self._list_adapter = TypeAdapter(list[self.input])  # type: ignore[name-defined]
        return many

    def idempotency_key_for(self, input: I | Mapping[str, Any]) -> str:
        """Whatever the declared ``idempotency_key`` answers; ``X_INVARIANT`` for an empty or
        non-string key (an empty key would make every enqueue a duplicate of every other)."""
        key = self._key(self.parse(input))
        if not isinstance(key, str) or not key:
            raise XError(
                "X_INVARIANT",
                f"job {self.name!r}: idempotency_key answered {key!r}; it must be a non-empty str",
                fix="derive a non-empty key from the input only, e.g. "
                "idempotency_key=lambda i: f'onboard:{i.org_id}'",
                meta={"job": self.name},
            )
        return key

    def concurrency_key_for(self, input: I | Mapping[str, Any]) -> str | None:
        """``concurrency.key(input)`` for a keyed cap, ``None`` otherwise. An empty or non-string
        key, or one over 200 characters, is ``X_JOB_DECLARATION_INVALID``."""
        if self._concurrency_key is None:
            return None
        key = self._concurrency_key(self.parse(input))
        if not isinstance(key, str) or not key or len(key) > MAX_CONCURRENCY_KEY:
            shown = repr(key) if not isinstance(key, str) or len(key) <= 40 else f"{key[:37]!r}..."
            why = (
                "is not a str"
                if not isinstance(key, str)
                else "is empty"
                if not key
                else f"is {len(key)} characters, over {MAX_CONCURRENCY_KEY}"
            )
            raise XError(
                "X_JOB_DECLARATION_INVALID",
                f"job {self.name!r}: concurrency.key answered {shown}, which {why}",
                fix="answer a non-empty str of at most 200 characters derived from the input, "
                "e.g. Concurrency(key=lambda i: str(i.account_id))",
                meta={"job": self.name, "causes": [f"concurrency.key {why}"]},
            )
        return key

    def tenant_of(self, input: I) -> str | None:
        """The declared tenant of a parsed input (``None`` for ``tenant='none'``)."""
        if self.tenant == "none":
            return None
        value: object = self.tenant(input)
        if value is None:
            return None
        if not isinstance(value, str):
            value = str(value)  # a UUID org id reads as its canonical string
        if not value:
            raise XError(
                "X_INVARIANT",
                f"job {self.name!r}: tenant(input) answered an empty string",
                fix="answer the org id the run acts as, or declare tenant='none'",
                meta={"job": self.name},
            )
        return value

    # --- the projections ------------------------------------------------------------------

    async def enqueue(
        self,
        input: I | Mapping[str, Any],
        *,
        run_id: str | None = None,
        tenant_id: str | None = None,
        delay: Duration | None = None,
        run_at: datetime | int | None = None,
    ) -> EnqueueResult:
        """Queue one run through the ambient facade: inside a transaction it joins it (or stages
        into the outbox); answers ``EnqueueResult(id, run_id, deduped)``."""
        return await enqueue_one(
            self, input, run_id=run_id, tenant_id=tenant_id, delay=delay, run_at=run_at
        )

    async def enqueue_many(
        self,
        inputs: Sequence[I | Mapping[str, Any]],
        *,
        tenant_id: str | None = None,
        delay: Duration | None = None,
        run_at: datetime | int | None = None,
    ) -> list[EnqueueResult]:
        """Queue many runs of this job in one driver call per ``ENQUEUE_CHUNK``; results in
        input order; every refusal comes before the first write."""
        return await enqueue_batch(self, inputs, tenant_id=tenant_id, delay=delay, run_at=run_at)

    async def enqueue_as(
        self,
        actor: Actor | None,
        input: I | Mapping[str, Any],
        *,
        run_id: str | None = None,
        delay: Duration | None = None,
        run_at: datetime | int | None = None,
    ) -> EnqueueResult:
        """The spec's ``.as()``: queue on ``actor``'s behalf, the row's tenant from their org
        (``None``, or an actor with no org, leaves it unset). It queues; it never runs inline."""
        return await enqueue_one(
            self, input, run_id=run_id, delay=delay, run_at=run_at, as_actor=(actor,)
        )

    async def result(self, job_id: str, *, timeout: Duration = "30s") -> Any:  # noqa: ASYNC109 (pinned: PYTHON-API.md)
        """The stored result of run ``job_id`` once it settles (woken by the settle where the
        driver pushes it). A dead, failed or cancelled run raises its ``XError``; past
        ``timeout`` it is ``X_JOB_RESULT_TIMEOUT``."""
        return await job_result(self, job_id, timeout=timeout)

    async def run(self, input: I, step: Step, ctx: JobContext) -> R:
        """The body itself. The worker's ``execute_job`` calls it; app code does not — a direct
        call carries no attempt counter, step store, timeout or lease."""
        return await self._body(input, step, ctx)

    def describe(self) -> dict[str, Any]:
        """The manifest row: never a key value (keys are computed from inputs: app data)."""
        concurrency: dict[str, Any] | None = None
        if self.concurrency is not None:
            concurrency = {
                "limit": self.concurrency,
                "keyed": self._concurrency_key is not None,
                "when_busy": self.when_busy or "wait",
            }
        return {
            "name": self.name,
            "input": self._adapter.json_schema(),
            "queue": self.queue,
            "retry": {"attempts": self.retry.attempts, "backoff": self.retry.backoff},
            "steps": [],
            "idempotent": True,
            "concurrency": concurrency,
        }


class _JobDecorator(Generic[I]):
    """What ``job(...)`` answers without ``run=``: apply it to the body."""

    __slots__ = ("_fields",)

    def __init__(self, fields: dict[str, Any]) -> None:
        self._fields = fields

    def __call__(self, body: Body[I, R]) -> Job[I, R]:
        return _build(self._fields, body)


@overload
def job(
    *,
    input: type[I],
    idempotency_key: Callable[[I], str],
    name: str | None = None,
    tenant: TenantOf[I] = "none",
    queue: str = "default",
    retry: Retry | None = None,
    concurrency: int | Concurrency[I] | None = None,
    timeout: Duration | None = None,
    step_timeout: Duration | None = None,
    event_poll: Duration | None = None,
    compensates: bool = False,
    on_settled: OnSettled | None = None,
    on_settled_timeout: Duration = "30s",
    max_input_bytes: int = MAX_INPUT_BYTES,
    max_crashes: int = DEFAULT_MAX_CRASHES,
    run: Body[I, R],
) -> Job[I, R]: ...


@overload
def job(
    *,
    input: type[I],
    idempotency_key: Callable[[I], str],
    name: str | None = None,
    tenant: TenantOf[I] = "none",
    queue: str = "default",
    retry: Retry | None = None,
    concurrency: int | Concurrency[I] | None = None,
    timeout: Duration | None = None,
    step_timeout: Duration | None = None,
    event_poll: Duration | None = None,
    compensates: bool = False,
    on_settled: OnSettled | None = None,
    on_settled_timeout: Duration = "30s",
    max_input_bytes: int = MAX_INPUT_BYTES,
    max_crashes: int = DEFAULT_MAX_CRASHES,
    run: None = None,
) -> _JobDecorator[I]: ...


def job(
    *,
    input: Any = _UNSET,
    idempotency_key: Any = _UNSET,
    name: Any = None,
    tenant: Any = "none",
    queue: Any = "default",
    retry: Any = None,
    concurrency: Any = None,
    timeout: Any = None,
    step_timeout: Any = None,
    event_poll: Any = None,
    compensates: Any = False,
    on_settled: Any = None,
    on_settled_timeout: Any = "30s",
    max_input_bytes: Any = MAX_INPUT_BYTES,
    max_crashes: Any = DEFAULT_MAX_CRASHES,
    run: Any = None,
) -> Any:
    """Declare a job: with ``run=`` it answers the ``Job``; without, a decorator for the body
    ``async def body(input, step, ctx)``. ``idempotency_key`` is required (by the type, and at
    runtime ``X_IDEMPOTENCY_REQUIRED``)."""
    fields = {
        "input": input,
        "idempotency_key": idempotency_key,
        "name": name,
        "tenant": tenant,
        "queue": queue,
        "retry": retry,
        "concurrency": concurrency,
        "timeout": timeout,
        "step_timeout": step_timeout,
        "event_poll": event_poll,
        "compensates": compensates,
        "on_settled": on_settled,
        "on_settled_timeout": on_settled_timeout,
        "max_input_bytes": max_input_bytes,
        "max_crashes": max_crashes,
    }
    if run is None:
        _build(fields, None, dry=True)  # refused at job(...), before the decorator applies
        return _JobDecorator[Any](fields)
    return _build(fields, run)


@overload
def _build(f: dict[str, Any], body: Any) -> Job[Any, Any]: ...
@overload
def _build(f: dict[str, Any], body: None, *, dry: Literal[True]) -> None: ...
def _build(f: dict[str, Any], body: Any, *, dry: bool = False) -> Job[Any, Any] | None:
    causes = _Causes()
    name = _check_name(f["name"], body, causes)
    label = f"job {name!r}" if name else "job()"
    if body is not None and not callable(body):
        causes.add(
            f"run is a {type(body).__name__}, not a callable",
            "pass run=an async def body(input, step, ctx)",
        )
    adapter = _check_input(f["input"], causes)
    key = f["idempotency_key"]
    if key is not _UNSET and not callable(key):
        causes.add(
            f"idempotency_key is a {type(key).__name__}, not a function of the input",
            "idempotency_key=lambda i: f'<job>:{i.id}' derived from input only",
        )
    tenant = f["tenant"]
    if tenant != "none" and not callable(tenant):
        causes.add(
            f"tenant is {tenant!r}: neither a function of the input nor 'none'",
            "tenant=lambda i: str(i.org_id), or tenant='none'",
        )
    queue = f["queue"]
    if not isinstance(queue, str) or not queue.strip():
        causes.add(f"queue {queue!r} is not a non-empty str", "queue='default' or a pool name")
    retry = _check_retry(f["retry"], causes)
    cap, ckey, when_busy = _check_concurrency(f["concurrency"], causes)
    timeout_ms = _check_duration("timeout", f["timeout"], causes)
    step_timeout_ms = _check_duration("step_timeout", f["step_timeout"], causes)
    event_poll_ms = _check_duration("event_poll", f["event_poll"], causes)
    settled_timeout_ms = _check_duration("on_settled_timeout", f["on_settled_timeout"], causes)
    if not isinstance(f["compensates"], bool):
        causes.add(f"compensates {f['compensates']!r} is not a bool", "compensates=True or False")
    max_input_bytes = f["max_input_bytes"]
    if isinstance(max_input_bytes, bool) or not isinstance(max_input_bytes, int):
        max_input_bytes = -1
    if not 1 <= max_input_bytes <= MAX_INPUT_BYTES_CEILING:
        causes.add(
            f"max_input_bytes {f['max_input_bytes']!r} is not an int in "
            f"1..{MAX_INPUT_BYTES_CEILING:,}",
            "max_input_bytes=1_048_576 (the default); queue a reference for bigger data",
        )
    max_crashes = f["max_crashes"]
    if isinstance(max_crashes, bool) or not isinstance(max_crashes, int):
        max_crashes = -1
    if not 1 <= max_crashes <= MAX_CRASHES_CEILING:
        causes.add(
            f"max_crashes {f['max_crashes']!r} is not an int in 1..{MAX_CRASHES_CEILING}",
            f"max_crashes={DEFAULT_MAX_CRASHES} (the default)",
        )
    if f["on_settled"] is not None and not callable(f["on_settled"]):
        causes.add(
            f"on_settled is a {type(f['on_settled']).__name__}, not a callable",
            "on_settled=an async def hook(settled)",
        )

    if key is _UNSET:
        raise XError(
            "X_IDEMPOTENCY_REQUIRED",
            f"{label} declares no idempotency_key"
            + (f" (also: {'; '.join(c for c, _ in causes.items)})" if causes.items else ""),
            fix="add idempotency_key=lambda input: ... derived from input only",
            meta={"job": name, "causes": ["idempotency_key is missing", *_only(causes)]},
        )
    if causes.items:
        raise XError(
            "X_JOB_DECLARATION_INVALID",
            f"{label} is invalid: " + "; ".join(c for c, _ in causes.items),
            fix="; ".join(dict.fromkeys(fx for _, fx in causes.items)),
            meta={"job": name, "causes": _only(causes)},
        )
    if dry:
        return None
    assert body is not None and adapter is not None and retry is not None and name is not None
    return Job(
        name=name,
        input=f["input"],
        adapter=adapter,
        idempotency_key=key,
        tenant=tenant,
        queue=queue,
        retry=retry,
        concurrency=cap,
        concurrency_key=ckey,
        when_busy=when_busy,
        timeout_ms=timeout_ms,
        step_timeout_ms=step_timeout_ms,
        event_poll_ms=event_poll_ms,
        compensates=f["compensates"],
        on_settled=f["on_settled"],
        on_settled_timeout_ms=settled_timeout_ms or 30_000,
        body=body,
        max_input_bytes=max_input_bytes,
        max_crashes=max_crashes,
    )
