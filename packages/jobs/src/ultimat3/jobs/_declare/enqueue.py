"""The ONE ambient enqueue path: every ``enqueue``, ``enqueue_many`` and ``enqueue_as`` resolves
the facade here, so "does this join the transaction?" has one answer.

- No ambient connection: the installed driver (``JOB_DRIVER``) queues the rows.
- An ambient connection the driver owns (Postgres on the app's own database): the rows are written
  on that connection, inside the caller's transaction.
- An ambient connection the driver cannot join: the rows are STAGED through the ``OUTBOX_STORE``
  adapter on that connection, and the relay publishes them once the transaction commits. No store
  for it is ``X_ADAPTER_MISSING``: enqueueing outside the transaction would be a ghost job.

Every refusal comes before the first write.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from datetime import datetime
from typing import TYPE_CHECKING, Any

from ultimat3.core import (
    Actor,
    Duration,
    XError,
    adapter,
    cross_tenant_reason,
    current_actor,
    current_connection,
    current_signal,
    installed_adapter,
    new_id,
    new_ids,
    parse_duration,
    require_lowercase_uuid,
    to_epoch_ms,
)
from ultimat3.jobs._declare.input_guard import checked_key, keys_pass
from ultimat3.jobs._declare.policy import attempts_for
from ultimat3.jobs._telemetry.spans import enqueue_span
from ultimat3.jobs._telemetry.trace_context import enqueue_trace_context
from ultimat3.jobs.adapter import (
    JOB_DRIVER,
    MAX_ENQUEUE_BATCH,
    OUTBOX_STORE,
    ColumnEnqueuer,
    EnqueueColumns,
    EnqueueRequest,
    EnqueueResult,
)

if TYPE_CHECKING:
    from ultimat3.jobs._declare.job import Job

MAX_RUN_AT_MS = 253_402_300_799_999
"""``run_at``'s bound: 9999-12-31T23:59:59.999Z, the last instant a ``datetime`` holds."""
MIN_RUN_AT_MS = -62_135_596_800_000
"""``run_at``'s floor: 0001-01-01T00:00:00Z (a past ``run_at`` is due now)."""
MAX_DELAY_MS = 36_525 * 86_400_000
"""``delay``'s bound: 100 years."""


async def enqueue_one(
    job: Job[Any, Any],
    input: object,
    *,
    run_id: str | None = None,
    tenant_id: str | None = None,
    delay: Duration | None = None,
    run_at: datetime | int | None = None,
    as_actor: tuple[Actor | None] | None = None,
) -> EnqueueResult:
    """One run of ``job``. ``as_actor`` (a 1-tuple, since ``None`` is a valid actor) is the
    ``enqueue_as`` actor."""
    _refuse_if_aborted()
    if run_id is not None:
        run_id = require_lowercase_uuid(run_id, name="run_id")
    delay_ms, run_at_ms = _schedule(job, delay, run_at)
    with enqueue_span(job.name, job.queue, 1) as traced:
        request = _request(
            job,
            input,
            run_id=run_id,
            tenant_id=tenant_id,
            delay_ms=delay_ms,
            run_at_ms=run_at_ms,
            as_actor=as_actor,
            trace_context=traced.context,
        )
        traced.sent(request.id)
        results = await _dispatch([request], single=True)
    return results[0]


async def enqueue_batch(
    job: Job[Any, Any],
    inputs: Sequence[object],
    *,
    tenant_id: str | None = None,
    delay: Duration | None = None,
    run_at: datetime | int | None = None,
    as_actor: tuple[Actor | None] | None = None,
) -> list[EnqueueResult]:
    """Many runs of ``job`` in ONE driver call (the driver chunks it per ``ENQUEUE_CHUNK``)."""
    _refuse_if_aborted()
    if isinstance(inputs, str | bytes | Mapping) or not isinstance(inputs, Sequence):
        raise XError(
            "X_INVARIANT",
            f"{job.name}.enqueue_many takes a sequence of inputs, got {type(inputs).__name__}",
            fix=f"{job.name}.enqueue_many([input1, input2, ...])",
            meta={"job": job.name},
        )
    if len(inputs) > MAX_ENQUEUE_BATCH:
        raise XError(
            "X_JOB_ENQUEUE_BATCH_TOO_LARGE",
            f"{job.name}.enqueue_many was given {len(inputs)} inputs, over MAX_ENQUEUE_BATCH "
            f"({MAX_ENQUEUE_BATCH})",
            fix=f"split the inputs into batches of at most {MAX_ENQUEUE_BATCH}, or page the "
            "source with backfill()",
            meta={"job": job.name, "count": len(inputs), "max": MAX_ENQUEUE_BATCH},
        )
    if not inputs:
        return []
    delay_ms, run_at_ms = _schedule(job, delay, run_at)
    with enqueue_span(job.name, job.queue, len(inputs)) as traced:
        trace_context = traced.context  # once per call: every row shares the one dict
        batch = _batch(
            job,
            inputs,
            tenant_id=tenant_id,
            delay_ms=delay_ms,
            run_at_ms=run_at_ms,
            as_actor=as_actor,
            trace_context=trace_context,
        )
        if isinstance(batch, EnqueueColumns):
            return await _dispatch_columns(batch)
        return await _dispatch(batch, single=False)


async def enqueue_requests(requests: Sequence[EnqueueRequest]) -> list[EnqueueResult]:
    """Queue prepared requests through the facade (the scheduler's and factories' path)."""
    _refuse_if_aborted()
    if len(requests) > MAX_ENQUEUE_BATCH:
        raise XError(
            "X_JOB_ENQUEUE_BATCH_TOO_LARGE",
            f"{len(requests)} requests is over MAX_ENQUEUE_BATCH ({MAX_ENQUEUE_BATCH})",
            fix=f"split them into batches of at most {MAX_ENQUEUE_BATCH}",
        )
    if not requests:
        return []
    trace_context = enqueue_trace_context()
    if trace_context is not None:
        requests = [
            r
            if r.trace_context is not None
            else dataclasses.replace(r, trace_context=trace_context)
            for r in requests
        ]
    return await _dispatch(list(requests), single=len(requests) == 1)


# --- internals -------------------------------------------------------------------------------


def _refuse_if_aborted() -> None:
    """A cancelled body writes nothing: under an aborted ambient signal, rethrow its reason."""
    signal = current_signal()
    if signal is not None and signal.reason is not None:
        raise signal.reason


def _schedule(
    job: Job[Any, Any], delay: Duration | None, run_at: datetime | int | None
) -> tuple[int | None, int | None]:
    if delay is not None and run_at is not None:
        raise XError(
            "X_INVARIANT",
            f"{job.name}.enqueue was given both delay and run_at",
            fix="pass delay= (relative) or run_at= (absolute), not both",
            meta={"job": job.name},
        )
    delay_ms = None if delay is None else parse_duration(delay, name="delay", allow_zero=True)
    if delay_ms is not None and delay_ms > MAX_DELAY_MS:
        raise XError(
            "X_DURATION_INVALID",
            f"{job.name}.enqueue: delay {delay!r} is over 100 years (MAX_DELAY_MS)",
            fix="pass a delay of at most 100 years, or run_at= a date before year 10000",
            meta={"job": job.name, "max_ms": MAX_DELAY_MS},
        )
    run_at_ms = None if run_at is None else to_epoch_ms(run_at, name="run_at")
    if run_at_ms is not None and not MIN_RUN_AT_MS <= run_at_ms <= MAX_RUN_AT_MS:
        raise XError(
            "X_INVARIANT",
            f"{job.name}.enqueue: run_at {run_at!r} is outside years 1..9999 (epoch ms "
            f"{MIN_RUN_AT_MS}..{MAX_RUN_AT_MS}), the range every driver and reader can hold",
            fix="pass run_at as an aware datetime or epoch MILLISECONDS within years 1..9999",
            meta={"job": job.name, "min_ms": MIN_RUN_AT_MS, "max_ms": MAX_RUN_AT_MS},
        )
    return delay_ms, run_at_ms


def _request(
    job: Job[Any, Any],
    input: object,
    *,
    run_id: str | None,
    tenant_id: str | None,
    delay_ms: int | None,
    run_at_ms: int | None,
    as_actor: tuple[Actor | None] | None,
    trace_context: dict[str, str] | None = None,
    index: int | None = None,
) -> EnqueueRequest:
    where = f" (input {index})" if index is not None else ""
    parsed = job.parse(input)
    try:
        key = job._key(parsed)  # parsed already: no second validation
        if type(key) is not str or not key:
            key = job.idempotency_key_for(parsed)  # raises, naming the key
        key = checked_key(job.name, key)
        concurrency_key = job.concurrency_key_for(parsed)
    except XError as exc:
        if index is None:
            raise
        raise XError(
            exc.code, exc.message + where, fix=exc.fix, meta={**exc.meta, "index": index}
        ) from exc
    tenant = _tenant(job, parsed, tenant_id=tenant_id, as_actor=as_actor, where=where)
    if run_id is None:
        id_, run_id = new_ids(2)  # one clock read and one urandom for both
    else:
        id_ = new_id()
    return EnqueueRequest(
        id=id_,
        run_id=run_id,
        name=job.name,
        queue=job.queue,
        payload=job.payload_of(parsed, where=where),
        idempotency_key=key,
        max_attempts=attempts_for(job),  # retry.attempts, plus the unwind's margin
        tenant_id=tenant,
        concurrency_key=concurrency_key,
        delay_ms=delay_ms,
        run_at_ms=run_at_ms,
        trace_context=trace_context,
    )


def _batch(
    job: Job[Any, Any],
    inputs: Sequence[object],
    *,
    tenant_id: str | None,
    delay_ms: int | None,
    run_at_ms: int | None,
    as_actor: tuple[Actor | None] | None,
    trace_context: dict[str, str] | None,
) -> EnqueueColumns | list[EnqueueRequest]:
    """The batch as columns, in a few calls: one validation and one serialisation of the whole
    list, one id allocation, no per-row object. When any input fails a check (or the job has a
    keyed concurrency cap) it is ``[_request(job, input, index=i, ...) ...]`` instead, so the
    refusal is the one (and names the index) that path raises."""
    fast = _fast_requests(job, inputs, tenant_id=tenant_id, as_actor=as_actor)
    if fast is None:
        return [
            _request(
                job,
                one,
                run_id=None,
                tenant_id=tenant_id,
                delay_ms=delay_ms,
                run_at_ms=run_at_ms,
                as_actor=as_actor,
                trace_context=trace_context,
                index=i,
            )
            for i, one in enumerate(inputs)
        ]
    payloads, keys, tenants = fast
    ids = new_ids(2 * len(payloads))
    return EnqueueColumns(
        name=job.name,
        queue=job.queue,
        max_attempts=attempts_for(job),  # retry.attempts, plus the unwind's margin
        ids=ids[0::2],
        run_ids=ids[1::2],
        payloads=payloads,
        idempotency_keys=keys,
        tenant_ids=tenants,
        delay_ms=delay_ms,
        run_at_ms=run_at_ms,
        trace_context=trace_context,
    )


def _fast_requests(
    job: Job[Any, Any],
    inputs: Sequence[object],
    *,
    tenant_id: str | None,
    as_actor: tuple[Actor | None] | None,
) -> tuple[list[Any], list[str], list[str | None]] | None:
    """Payloads, idempotency keys and tenants of every input, or ``None`` when any check fails
    (or the job has a keyed concurrency cap: its keys take the one-by-one path)."""
    if job._concurrency_key is not None:
        return None
    parsed = job.parse_many(inputs)
    if parsed is None:
        return None
    try:
        key_of = job._key
        keys = [key_of(p) for p in parsed]
        if not keys_pass(keys):  # else one by one: a key that is not a str, or too long ...
            if not all(type(k) is str and k for k in keys):
                return None
            for k in keys:
                checked_key(job.name, k)
        if job.tenant == "none":  # the row's tenant does not depend on the input
            tenant = _tenant(job, None, tenant_id=tenant_id, as_actor=as_actor, where="")
            tenants: list[str | None] = [tenant] * len(parsed)
        else:
            tenants = [
                _tenant(job, p, tenant_id=tenant_id, as_actor=as_actor, where="") for p in parsed
            ]
        payloads = job.payloads_of(parsed)
    except Exception:
        return None  # the one-by-one path raises the refusal, naming the input's index
    return payloads, keys, tenants


def _mismatch(job: Job[Any, Any], declared: str, other: str, source: str, where: str) -> XError:
    return XError(
        "X_JOB_TENANT_MISMATCH",
        f"job {job.name!r}{where}: the input's tenant is {declared!r} but {source} is {other!r}",
        fix="enqueue with the payload's own tenant; an ambient cross-tenant enqueue needs "
        "cross_tenant('<why>', fn) by an actor holding tenancy:cross",
        meta={"job": job.name, "tenant": declared, "other": other, "source": source},
    )


def _tenant(
    job: Job[Any, Any],
    parsed: object,
    *,
    tenant_id: str | None,
    as_actor: tuple[Actor | None] | None,
    where: str,
) -> str | None:
    """The row's tenant: the declared ``tenant(input)``, checked against an explicit
    ``tenant_id``, the ``enqueue_as`` actor's org and the ambient actor's org; with
    ``tenant='none'``, whatever was given explicitly (never the ambient actor's)."""
    if tenant_id is not None and (not isinstance(tenant_id, str) or not tenant_id):
        raise XError(
            "X_INVARIANT",
            f"job {job.name!r}: tenant_id {tenant_id!r} is not a non-empty str",
            fix="pass tenant_id=str(org_id), or leave it unset",
            meta={"job": job.name},
        )
    explicit: str | None = tenant_id
    explicit_source = "the tenant_id given"
    if as_actor is not None:
        actor = as_actor[0]
        explicit = actor.org_id if actor is not None else None
        explicit_source = f"the org of actor {actor.id!r}" if actor is not None else ""
    declared = job.tenant_of(parsed)
    if declared is None:
        return explicit
    if explicit is not None and explicit != declared:
        raise _mismatch(job, declared, explicit, explicit_source, where)
    if as_actor is None:
        ambient = current_actor()
        if (
            ambient is not None
            and ambient.org_id is not None
            and ambient.org_id != declared
            and cross_tenant_reason() is None
        ):
            raise _mismatch(
                job, declared, ambient.org_id, f"the ambient actor {ambient.id!r}'s org", where
            )
    return declared


async def _dispatch(requests: list[EnqueueRequest], *, single: bool) -> list[EnqueueResult]:
    driver = adapter(JOB_DRIVER)
    connection = current_connection()
    if connection is not None and not driver.owns_connection(connection):
        store = installed_adapter(OUTBOX_STORE)
        if store is None or not store.accepts(connection):
            raise XError(
                "X_ADAPTER_MISSING",
                f"an enqueue inside a transaction on {type(connection).__name__}: the job driver "
                f"{driver.name!r} cannot join it and no outbox store accepts it",
                fix="install_adapter(OUTBOX_STORE, <a store for that database>) so the enqueue "
                "commits with the transaction, or enqueue outside the transaction",
                meta={"port": OUTBOX_STORE.name, "driver": driver.name},
            )
        staged, results = _dedupe_staged(requests)
        await store.stage(connection, staged)
        return results
    if single:
        return [await driver.enqueue(requests[0], connection=connection)]
    return await driver.enqueue_many(requests, connection=connection)


async def _dispatch_columns(columns: EnqueueColumns) -> list[EnqueueResult]:
    """A batch of one job: as columns to a driver that takes them (``ColumnEnqueuer``) on its
    own pool or connection; as rows everywhere else (another driver, the outbox)."""
    driver = adapter(JOB_DRIVER)
    connection = current_connection()
    if isinstance(driver, ColumnEnqueuer) and (
        connection is None or driver.owns_connection(connection)
    ):
        return await driver.enqueue_columns(columns, connection=connection)
    return await _dispatch(columns.requests(), single=False)


def _dedupe_staged(
    requests: list[EnqueueRequest],
) -> tuple[list[EnqueueRequest], list[EnqueueResult]]:
    """Inside one staged batch, two inputs sharing a live key are one job (the second deduped
    onto the first), as the driver would answer; the relay dedupes against live rows."""
    first: dict[tuple[str, str | None, str], EnqueueRequest] = {}
    staged: list[EnqueueRequest] = []
    results: list[EnqueueResult] = []
    for request in requests:
        scope = (request.name, request.tenant_id, request.idempotency_key)
        seen = first.get(scope)
        if seen is not None:
            results.append(EnqueueResult(seen.id, seen.run_id, deduped=True))
            continue
        first[scope] = request
        staged.append(request)
        results.append(EnqueueResult(request.id, request.run_id, deduped=False))
    return staged, results


def task_requests(calls: Sequence[tuple[Job[Any, Any], object]]) -> list[EnqueueRequest]:
    """The requests one task occurrence queues, built as every enqueue builds them (checks,
    idempotency keys, tenant). The scheduler hands them to the driver's ``fire_task`` — the
    one other call into a driver's enqueue — so they move with the task's watermark."""
    _refuse_if_aborted()
    many = len(calls) > 1
    trace_context = enqueue_trace_context()  # the fire's span: each run links to its fire
    return [
        _request(
            job,
            one,
            run_id=None,
            tenant_id=None,
            delay_ms=None,
            run_at_ms=None,
            as_actor=None,
            trace_context=trace_context,
            index=i if many else None,
        )
        for i, (job, one) in enumerate(calls)
    ]
