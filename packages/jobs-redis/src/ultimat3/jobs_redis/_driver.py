"""The Redis job driver: every ``JobDriver`` member as one atomic Lua script on the server.

Time is the Redis server's clock (``TIME`` inside each script), never the worker's. Rows live in
hashes under the driver's prefix (a hash tag, ``{x}:``), indexed by sorted sets: the waiting rows
of a queue by ``run_at`` (ready, delayed and suspended rows: a delayed row is "promoted" simply by
its score coming due), the running rows of a queue by lease expiry (a lapsed lease is rescued by the
next claim), every row by ``(created_at, id)`` for the operator's keyset pages.
"""

from __future__ import annotations

import json
from collections import deque
from collections.abc import Callable, Collection, Mapping, Sequence
from typing import Any, Final
from urllib.parse import urlsplit, urlunsplit

from redis.asyncio import Redis
from redis.asyncio.connection import Connection as RedisConnection
from redis.asyncio.connection import UnixDomainSocketConnection
from redis.asyncio.retry import Retry
from redis.backoff import NoBackoff

from ultimat3.core import XError, from_epoch_ms, log_event, new_id
from ultimat3.jobs.adapter import (
    DEAD_RETENTION_MS,
    DEPTH_SAMPLE_CAP,
    DONE_RETENTION_MS,
    ENQUEUE_CHUNK,
    EXHAUSTED_BUFFER,
    MAX_ENQUEUE_BATCH,
    ClaimedJob,
    EnqueueRequest,
    EnqueueResult,
    ExhaustedJob,
    Imported,
    MovedJob,
    NackOutcome,
    QueueSample,
    QueueStats,
    Stepless,
    StepRecord,
    StepState,
    WorkerRow,
    sample_queue_names,
)

from ._backfills import RedisBackfillLedger
from ._codec import (
    _plain,
    compact_json,
    freeze,
    live_key,
    maybe_text,
    opt,
    pairs,
    step_records,
    text,
)
from ._guard import ServerGuard
from ._import import import_jobs
from ._introspect import RedisJobIntrospection
from ._leases import RedisLeaseStore
from ._redactions import RedisRedactionCatalog
from ._resp import RespClient
from ._scripts import Arg, ScriptRunner
from ._wake import RedisWakeListener

NACK_OUTCOMES: Final[tuple[NackOutcome, ...]] = ("retry", "dead", "failed", "suspend", "release")
STEP_STATES: Final[tuple[StepState, ...]] = ("started", "completed", "failed")
DEFAULT_CONNECT_TIMEOUT_S: Final = 0.5
DEFAULT_COMMAND_TIMEOUT_S: Final = 10.0
_PURGE_BATCH: Final = 1000
_STATE_FIELDS: Final = ("ready", "delayed", "running", "suspended", "done", "failed", "dead",
                        "cancelled")  # fmt: skip


def _positive(value: object, what: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
        raise XError(
            "X_INVARIANT",
            f"{what} {value!r} is not a positive whole number of milliseconds",
            fix=f"pass {what}=30000 or another positive int",
        )
    return value


def _redacted(url: str) -> str:
    """``url`` with any password replaced by ``***``: refusals never print a secret."""
    try:
        parts = urlsplit(url)
        if parts.password is None:
            return url
        netloc = parts.netloc.replace(":" + parts.password + "@", ":***@", 1)
        return urlunsplit(parts._replace(netloc=netloc))
    except ValueError:
        return "<an unparseable URL>"


def _lease_lost_template() -> str:
    """``XError('X_JOB_LEASE_LOST', ...).to_dict()`` as JSON, its message left for the claim
    script to fill in (it knows the attempts and the worker)."""
    return json.dumps(XError("X_JOB_LEASE_LOST", "@@MSG@@").to_dict())


class RedisStepStore:
    """``StepStore`` in Redis beside the job: one hash per job, one field per step."""

    def __init__(self, runner: ScriptRunner, stepless: Stepless | None = None) -> None:
        self._r = runner
        self._stepless = stepless if stepless is not None else Stepless()

    async def load(self, job_id: str) -> dict[str, StepRecord]:
        if job_id in self._stepless:
            return {}
        return step_records(await self._r.run("steps_load", job_id, op="load steps"))

    async def record(
        self,
        job_id: str,
        name: str,
        *,
        state: StepState,
        worker_id: str,
        claim: str,
        output: Any = None,
        error: Mapping[str, Any] | None = None,
    ) -> bool:
        if state not in STEP_STATES:
            raise XError(
                "X_INVARIANT",
                f"job {job_id} step {name!r}: {state!r} is not a step state",
                fix="record 'started', 'completed' or 'failed'",
            )
        if not name:
            raise XError("X_INVARIANT", f"job {job_id}: a step name is empty", fix="name the step")
        self._stepless.discard(job_id)
        try:
            output_json = freeze(
                output,
                what=f"job {job_id} step {name!r} output",
                code="X_STEP_OUTPUT_UNSERIALIZABLE",
            )
            error_json = None if error is None else freeze(error, what=f"job {job_id} step error")
        except XError:
            # A write that would not land answers False, as it would with a storable value.
            if not await self._r.run("fence", job_id, worker_id, claim, name, op="record a step"):
                return False
            raise
        landed = await self._r.run(
            "step_record",
            job_id,
            name,
            state,
            worker_id,
            claim,
            opt(output_json),
            opt(error_json),
            op="record a step",
        )
        return bool(landed)


class RedisJobDriver:
    """The ``JobDriver`` on Redis. Build it with :func:`redis_job_driver`."""

    def __init__(
        self,
        client: Redis,
        *,
        prefix: str,
        owns_client: bool,
        command_timeout: float | None = None,
        fast: RespClient | None = None,
        allow_eviction: bool = False,
    ) -> None:
        self._client = client
        self._owns_client = owns_client
        self._prefix = prefix
        self._r = ScriptRunner(client, prefix, timeout_s=command_timeout, fast=fast)
        self._stepless = Stepless()
        self._steps = RedisStepStore(self._r, self._stepless)
        self._lease_lost = _lease_lost_template()
        self.leases = RedisLeaseStore(self._r)
        self.introspect = RedisJobIntrospection(self._r)
        self.backfills = RedisBackfillLedger(self._r)
        self.redactions = RedisRedactionCatalog(self._r)
        self._exhausted: deque[ExhaustedJob] = deque(maxlen=EXHAUSTED_BUFFER)
        self._next_due: dict[str, int] = {}
        self.guard = ServerGuard(
            client, prefix, allow_eviction=allow_eviction, timeout_s=command_timeout
        )
        """The maxmemory-policy check and the reset marker (``guard.resets`` counts resets)."""

    def __repr__(self) -> str:
        return f"RedisJobDriver(redis={self._r.where!r}, prefix={self._prefix!r})"

    @property
    def name(self) -> str:
        return "redis"

    @property
    def prefix(self) -> str:
        """The key prefix: every key of this driver starts with ``{prefix}:``."""
        return self._prefix

    @property
    def client(self) -> Redis:
        return self._client

    @property
    def steps(self) -> RedisStepStore:
        return self._steps

    async def now_ms(self) -> int:
        """The Redis server's clock, epoch milliseconds."""
        return int(await self._r.run("now", op="read the clock"))

    def owns_connection(self, connection: object) -> bool:
        """Never: Redis joins no database transaction, so an enqueue made inside one is staged in
        the transactional outbox and the relay moves it here once the transaction commits."""
        return False

    # --- enqueue --------------------------------------------------------------------------

    def _prepare(self, req: EnqueueRequest) -> list[Arg]:
        """Check one request; answers its 13 script arguments (``enqueue.lua`` names them: the
        optional ones as ``opt()`` sends them, the trace context and the payload as JSON text).
        Nothing is written."""
        id_, run_id, name, key = req.id, req.run_id, req.name, req.idempotency_key
        attempts, delay_ms, run_at_ms = req.max_attempts, req.delay_ms, req.run_at_ms
        if not (
            type(id_) is str
            and id_
            and type(run_id) is str
            and run_id
            and type(name) is str
            and name
            and type(req.queue) is str
            and req.queue
            and type(key) is str
            and key
            and type(attempts) is int
            and attempts >= 1
            and (delay_ms is None or type(delay_ms) is int)
            and (run_at_ms is None or type(run_at_ms) is int)
        ):
            self._check(req)  # what the common case above did not settle: refuses, or passes
        payload = req.payload
        if _plain(payload):
            payload_json = compact_json(payload)
        else:
            payload_json = freeze(payload, what=f"the payload of job {id_} ({name})")
        tenant, concurrency_key, trace = req.tenant_id, req.concurrency_key, req.trace_context
        return [
            id_,
            run_id,
            name,
            req.queue,
            key,
            attempts,
            opt(tenant),
            opt(concurrency_key),
            opt(delay_ms),
            opt(run_at_ms),
            live_key(name, tenant, key),
            "" if trace is None else "=" + compact_json(trace),
            payload_json,
        ]

    @staticmethod
    def _check(req: EnqueueRequest) -> None:
        """Every field of ``req`` the script relies on, checked one by one: the refusal names the
        first that is wrong."""
        for field_name in ("id", "run_id", "name", "queue", "idempotency_key"):
            value = getattr(req, field_name)
            if not isinstance(value, str) or not value:
                raise XError(
                    "X_INVARIANT",
                    f"enqueue of job {req.id!r} ({req.name!r}): {field_name} is empty",
                    fix="enqueue through the job handle (job.enqueue), which fills every field",
                    meta={"job_id": req.id, "field": field_name},
                )
        attempts = req.max_attempts
        if isinstance(attempts, bool) or not isinstance(attempts, int) or attempts < 1:
            raise XError(
                "X_INVARIANT",
                f"enqueue of job {req.id} ({req.name}): max_attempts {attempts!r} is not >= 1",
                fix="declare retry=Retry(attempts=n) with n >= 1",
            )
        for field_name in ("delay_ms", "run_at_ms"):
            value = getattr(req, field_name)
            if value is not None and (isinstance(value, bool) or not isinstance(value, int)):
                raise XError(
                    "X_INVARIANT",
                    f"enqueue of job {req.id} ({req.name}): {field_name} {value!r} is not a "
                    "whole number of milliseconds",
                    fix="enqueue through the job handle, with delay= or run_at=",
                )

    @staticmethod
    def _results(reply: Sequence[Any]) -> list[EnqueueResult]:
        return [
            EnqueueResult(id=text(reply[i]), run_id=text(reply[i + 1]), deduped=bool(reply[i + 2]))
            for i in range(0, len(reply), 3)
        ]

    async def enqueue(
        self, request: EnqueueRequest, *, connection: object | None = None
    ) -> EnqueueResult:
        """One script run: dedupe on the live key, then on the id, else insert. The script
        answers 0 for a new row (whose ids are the request's) or the holder's ``[id, run_id]``."""
        reply = await self._r.run("enqueue", *self._prepare(request), op="enqueue")
        if reply == 0:
            return EnqueueResult(id=request.id, run_id=request.run_id, deduped=False)
        return EnqueueResult(id=text(reply[0]), run_id=text(reply[1]), deduped=True)

    async def enqueue_many(
        self, requests: Sequence[EnqueueRequest], *, connection: object | None = None
    ) -> list[EnqueueResult]:
        """All or nothing: every request is checked before the first is written, and the chunks
        (one script run per ``ENQUEUE_CHUNK`` requests) go in one ``MULTI``/``EXEC``."""
        if len(requests) > MAX_ENQUEUE_BATCH:
            raise XError(
                "X_JOB_ENQUEUE_BATCH_TOO_LARGE",
                f"enqueue_many of {len(requests)} jobs is past MAX_ENQUEUE_BATCH "
                f"({MAX_ENQUEUE_BATCH})",
                fix="page the source with backfill(), or enqueue at most 10,000 at a time",
            )
        if not requests:
            return []
        prepared = [self._prepare(req) for req in requests]
        batches: list[list[Arg]] = []
        for start in range(0, len(prepared), ENQUEUE_CHUNK):
            chunk = prepared[start : start + ENQUEUE_CHUNK]
            args: list[Arg] = [len(chunk)]
            for one in chunk:
                args.extend(one)
            batches.append(args)
        if len(batches) == 1:
            replies = [await self._r.run("enqueue_many", *batches[0], op="enqueue")]
        else:
            replies = await self._r.run_many("enqueue_many", batches, op="enqueue")
        return [result for reply in replies for result in self._results(reply)]

    # --- claim ----------------------------------------------------------------------------

    async def claim(
        self,
        *,
        queues: Sequence[str],
        limit: int,
        worker_id: str,
        visibility_timeout_ms: int,
        no_dead_letter: Collection[str] = (),
    ) -> list[ClaimedJob]:
        _positive(visibility_timeout_ms, "visibility_timeout_ms")
        if isinstance(limit, bool) or not isinstance(limit, int) or limit < 0:
            raise XError("X_INVARIANT", f"claim: limit {limit!r} is not a count", fix="limit=1+")
        if not worker_id:
            raise XError("X_INVARIANT", "claim: worker_id is empty", fix="name the worker")
        queue_list = list(queues)
        nodead = list(no_dead_letter)
        reply = await self._r.run(
            "claim",
            worker_id,
            limit,
            visibility_timeout_ms,
            new_id(),
            self._lease_lost,
            len(queue_list),
            *queue_list,
            len(nodead),
            *nodead,
            op="claim",
        )
        now = int(reply[0])
        later = reply[3] if len(reply) > 3 else None
        if later is None:
            self._next_due.pop(worker_id, None)
        else:
            self._next_due[worker_id] = max(0, int(later))
        stepless = self._stepless
        for c in reply[1]:
            if not c[14]:
                stepless.add(text(c[0]))
        for buried in reply[2]:
            job_id, name, queue, attempts, max_attempts, state, worker = (
                text(v) for v in buried[:7]
            )
            log_event(
                "jobs.claim.exhausted",
                job_id=job_id,
                job=name,
                queue=queue,
                attempts=int(attempts),
                max_attempts=int(max_attempts),
                state=state,
                worker_id=worker or None,
            )
            self._exhausted.append(
                ExhaustedJob(
                    id=job_id,
                    name=name,
                    queue=queue,
                    payload=json.loads(text(buried[8])),
                    tenant_id=maybe_text(buried[9]),
                    outcome="failed" if state == "failed" else "dead",
                    last_error=json.loads(text(buried[10])),
                    run_id=text(buried[7]),
                    attempt=int(attempts),
                )
            )
        return [
            ClaimedJob(
                id=text(c[0]),
                run_id=text(c[1]),
                name=text(c[2]),
                queue=text(c[3]),
                payload=json.loads(text(c[4])),
                attempt=int(c[5]),
                max_attempts=int(text(c[6])),
                claim=text(c[7]),
                worker_id=worker_id,
                claimed_at_ms=now,
                lease_expires_at_ms=int(c[8]),
                idempotency_key=text(c[9]),
                tenant_id=maybe_text(c[10]),
                concurrency_key=maybe_text(c[11]),
                created_at_ms=int(text(c[12])),
                trace_context=json.loads(text(c[13])) if c[13] else None,
                crash_streak=int(c[15]) if len(c) > 15 else 0,
                crashed_worker=maybe_text(c[16]) if len(c) > 16 and c[16] else None,
            )
            for c in reply[1]
        ]

    def take_exhausted(self) -> list[ExhaustedJob]:
        """``ExhaustionReporter``: the rows this driver's claims buried since the last call."""
        taken = list(self._exhausted)
        self._exhausted.clear()
        return taken

    # --- settles (fenced) -----------------------------------------------------------------

    async def ack(
        self,
        job_id: str,
        *,
        worker_id: str,
        claim: str,
        result: Any = None,
        duration_ms: int | None = None,
    ) -> bool:
        try:
            result_json = freeze(
                result, what=f"the result of job {job_id}", code="X_STEP_OUTPUT_UNSERIALIZABLE"
            )
        except XError:
            if not await self._r.run("fence", job_id, worker_id, claim, op="ack"):
                return False
            raise
        landed = await self._r.run(
            "ack", job_id, worker_id, claim, opt(result_json), opt(duration_ms), op="ack"
        )
        return bool(landed)

    async def nack(
        self,
        job_id: str,
        *,
        worker_id: str,
        claim: str,
        outcome: NackOutcome,
        error: Mapping[str, Any] | None = None,
        delay_ms: int | None = None,
        run_at_ms: int | None = None,
        wait_event: str | None = None,
    ) -> bool:
        if outcome not in NACK_OUTCOMES:
            raise XError(
                "X_INVARIANT",
                f"nack of job {job_id}: {outcome!r} is not an outcome",
                fix=f"use one of {', '.join(NACK_OUTCOMES)}",
            )
        try:
            error_json = None if error is None else freeze(error, what=f"job {job_id} error")
        except XError:
            if not await self._r.run("fence", job_id, worker_id, claim, op="nack"):
                return False
            raise
        landed = await self._r.run(
            "nack",
            job_id,
            worker_id,
            claim,
            outcome,
            opt(error_json),
            opt(delay_ms),
            opt(run_at_ms),
            opt(wait_event),
            op="nack",
        )
        return bool(landed)

    async def heartbeat(
        self, job_id: str, *, worker_id: str, claim: str, visibility_timeout_ms: int
    ) -> bool:
        _positive(visibility_timeout_ms, "visibility_timeout_ms")
        landed = await self._r.run(
            "heartbeat", job_id, worker_id, claim, visibility_timeout_ms, op="heartbeat"
        )
        return bool(landed)

    async def progress(
        self, job_id: str, *, worker_id: str, claim: str, progress: Mapping[str, Any]
    ) -> bool:
        try:
            progress_json = freeze(dict(progress), what=f"job {job_id} progress")
        except XError:
            if not await self._r.run("fence", job_id, worker_id, claim, op="progress"):
                return False
            raise
        landed = await self._r.run(
            "progress", job_id, worker_id, claim, progress_json, op="progress"
        )
        return bool(landed)

    async def import_jobs(self, jobs: Sequence[MovedJob]) -> list[Imported]:
        """Driver extra (``JobImporter``, the target of ``x jobs drain``): rows moved from another
        driver, with their steps, in one script run; an id already here or a key a live job holds
        adds nothing."""
        return await import_jobs(self._r, jobs)

    async def wake_waiters(self, event: str) -> int:
        return int(await self._r.run("wake", event, op="wake waiters"))

    async def stats(self) -> list[QueueStats]:
        reply = await self._r.run("stats", op="read stats")
        out: list[QueueStats] = []
        for i in range(0, len(reply), 2):
            counts = {k: int(text(v)) for k, v in pairs(reply[i + 1]).items()}
            counts = {k: v for k, v in counts.items() if k in _STATE_FIELDS and v > 0}
            if counts:
                out.append(QueueStats(queue=text(reply[i]), **counts))
        out.sort(key=lambda s: s.queue)
        return out

    async def sample_queues(self, queues: Sequence[str]) -> list[QueueSample]:
        """``QueueSampler``: one script run for every queue named (a ``ZCOUNT`` and a ``ZCARD``
        per queue, O(log n)), each count capped at ``DEPTH_SAMPLE_CAP``."""
        names = sample_queue_names(queues)
        if not names:
            return []
        reply = await self._r.run("sample", DEPTH_SAMPLE_CAP, *names, op="sample queue depth")
        return [
            QueueSample(queue=q, depth=int(r[0]), running=int(r[1]), paused=bool(int(r[2])))
            for q, r in zip(names, reply, strict=True)
        ]

    async def close(self) -> None:
        """Closes the client when the driver made it (from a URL); a client you passed in is
        yours to close."""
        await self._r.close()
        if self._owns_client:
            closer: Any = getattr(self._client, "aclose", None) or self._client.close  # redis 5.0.0
            await closer()

    def take_next_due(self, worker_id: str) -> int | None:
        """``DueReporter``: the ms until the earliest waiting row of ``worker_id``'s last
        claim's queues that falls due later (read by the claim script itself), or ``None``."""
        return self._next_due.pop(worker_id, None)

    async def start_wake(
        self, on_wake: Callable[[str], object], *, queues: Collection[str] | None = None
    ) -> RedisWakeListener:
        """Driver extra (``QueueWake``): a started ``redis_wake_listener`` calling
        ``on_wake('*')`` when a job of ``queues`` becomes due; ``job_worker().start()`` starts it
        with the worker's ``wake`` and stops it with the worker (``await listener.stop()``)."""
        listener = redis_wake_listener(self, lambda: on_wake("*"), queues=queues)
        await listener.start()
        return listener

    # --- workers, task fires, purge (driver extras) -----------------------------------------

    async def register_worker(
        self,
        worker_id: str,
        *,
        host: str,
        queues: Sequence[str],
        slots: int | None,
        visibility_timeout_ms: int,
    ) -> WorkerRow:
        _positive(visibility_timeout_ms, "visibility_timeout_ms")
        if not worker_id:
            raise XError("X_INVARIANT", "register_worker: the id is empty", fix="name the worker")
        await self.guard.check_policy()  # a worker's start: refuse an evicting server
        await self.guard.observe_marker()
        now = int(
            await self._r.run(
                "worker_register",
                worker_id,
                host,
                json.dumps(list(queues)),
                opt(slots),
                visibility_timeout_ms,
                op="register a worker",
            )
        )
        return WorkerRow(
            id=worker_id,
            host=host,
            started_at=from_epoch_ms(now),
            queues=tuple(queues),
            slots=slots,
            in_flight=(),
            last_heartbeat_at=from_epoch_ms(now),
        )

    async def worker_heartbeat(self, worker_id: str, *, in_flight: Sequence[str]) -> bool:
        landed = await self._r.run(
            "worker_heartbeat", worker_id, json.dumps(list(in_flight)), op="worker heartbeat"
        )
        await self.guard.observe_marker()  # the server lost its data under us?
        return bool(landed)

    async def deregister_worker(self, worker_id: str) -> bool:
        return bool(await self._r.run("worker_deregister", worker_id, op="deregister a worker"))

    async def fire_task(
        self, task: str, occurrence_ms: int, requests: Sequence[EnqueueRequest]
    ) -> bool:
        """One occurrence of a task in ONE script run (``fire_task.lua``): the watermark and the
        jobs move together, or neither does. Every request is checked before the call."""
        if not task:
            raise XError("X_INVARIANT", "fire_task: the task name is empty", fix="name it")
        if isinstance(occurrence_ms, bool) or not isinstance(occurrence_ms, int):
            raise XError(
                "X_INVARIANT",
                f"fire_task {task!r}: occurrence {occurrence_ms!r} is not epoch ms",
                fix="pass the occurrence as whole epoch milliseconds",
            )
        args: list[Arg] = [task, occurrence_ms, len(requests)]
        for req in requests:
            args.extend(self._prepare(req))
        return bool(await self._r.run("fire_task", *args, op="fire a task"))

    async def purge(
        self,
        *,
        done_older_than_ms: int = DONE_RETENTION_MS,
        dead_older_than_ms: int = DEAD_RETENTION_MS,
    ) -> int:
        """Delete ``done`` rows finished more than ``done_older_than_ms`` ago and ``failed`` /
        ``dead`` / ``cancelled`` ones past ``dead_older_than_ms`` (with their steps), 1,000 rows a
        script run so the server is never held long; then drop expired workers and counter
        buckets. Answers how many jobs were deleted."""
        for value, what in ((done_older_than_ms, "done_older_than_ms"),
                            (dead_older_than_ms, "dead_older_than_ms")):  # fmt: skip
            if isinstance(value, bool) or not isinstance(value, int) or value < 0:
                raise XError(
                    "X_INVARIANT",
                    f"purge: {what} {value!r} is not a whole number of milliseconds >= 0",
                    fix=f"pass {what}=86400000 (a day) or another int",
                )
        total = 0
        while True:
            deleted, more = await self._r.run(
                "purge", done_older_than_ms, dead_older_than_ms, _PURGE_BATCH, op="purge"
            )
            total += int(deleted)
            if not int(more):
                return total


def redis_job_driver(
    url_or_client: str | Redis,
    *,
    prefix: str = "x",
    connect_timeout: float = DEFAULT_CONNECT_TIMEOUT_S,
    command_timeout: float = DEFAULT_COMMAND_TIMEOUT_S,
    allow_eviction: bool = False,
) -> RedisJobDriver:
    """The Redis job driver over ``redis.asyncio``.

    ``url_or_client``: a ``redis://`` / ``rediss://`` / ``unix://`` URL (the driver makes the
    client, with a ``connect_timeout`` socket connect timeout and at most one immediate retry, so
    an enqueue while Redis is down is ``X_DRIVER_UNAVAILABLE`` at once; ``close()`` closes it), or
    a ``redis.asyncio.Redis`` you made (yours to configure and to close).

    ``prefix``: every key is ``{prefix}:...``; the braces are a hash tag, so every key of one
    driver lives in one Redis Cluster slot. Two drivers with different prefixes share nothing.

    ``allow_eviction``: a worker refuses to start (``X_CONFIG_INVALID``) on a server whose
    ``maxmemory-policy`` is not ``noeviction`` unless this is ``True``.
    """
    if not isinstance(allow_eviction, bool):
        raise XError(
            "X_CONFIG_INVALID",
            f"redis_job_driver: allow_eviction {allow_eviction!r} is not a bool",
            fix="pass allow_eviction=True or False",
        )
    if not isinstance(prefix, str) or not prefix or any(c in prefix for c in "{}\r\n"):
        raise XError(
            "X_CONFIG_INVALID",
            f"redis_job_driver: prefix {prefix!r} is not a usable key prefix",
            fix="pass a non-empty prefix without braces or newlines, e.g. prefix='x'",
            meta={"prefix": repr(prefix)},
        )
    for value, what in ((connect_timeout, "connect_timeout"),
                        (command_timeout, "command_timeout")):  # fmt: skip
        if isinstance(value, bool) or not isinstance(value, int | float) or not value > 0:
            raise XError(
                "X_CONFIG_INVALID",
                f"redis_job_driver: {what} {value!r} is not a positive number of seconds",
                fix=f"pass {what}=0.5 or another positive number of seconds",
                meta={what: repr(value)},
            )
    if isinstance(url_or_client, Redis):
        return RedisJobDriver(
            url_or_client, prefix=prefix, owns_client=False, allow_eviction=allow_eviction
        )
    if not isinstance(url_or_client, str) or not url_or_client:
        raise XError(
            "X_CONFIG_INVALID",
            f"redis_job_driver: {url_or_client!r} is neither a Redis URL nor a "
            "redis.asyncio.Redis client",
            fix="pass redis_job_driver('redis://127.0.0.1:6379/0') or a redis.asyncio.Redis",
        )
    try:
        client = Redis.from_url(
            url_or_client,
            socket_connect_timeout=connect_timeout,
            # No socket timeout (redis-py 8 would default to 5 s): the driver bounds each call
            # itself (asyncio.timeout around the round trip), which costs a timer, where
            # redis-py's costs a task per command sent.
            socket_timeout=None,
            retry=Retry(NoBackoff(), 1),
        )
    except ValueError as exc:
        raise XError(
            "X_CONFIG_INVALID",
            f"redis_job_driver: the URL {_redacted(url_or_client)!r} is not a Redis URL "
            f"({_redacted(str(exc))})",
            fix="pass redis://host:port/db, rediss://... or unix:///path/to/redis.sock",
            meta={"url": _redacted(url_or_client)},
        ) from exc
    return RedisJobDriver(
        client,
        prefix=prefix,
        owns_client=True,
        command_timeout=float(command_timeout),
        fast=_lean_client(client, float(connect_timeout), float(command_timeout)),
        allow_eviction=allow_eviction,
    )


def _lean_client(
    client: Redis, connect_timeout: float, command_timeout: float
) -> RespClient | None:
    """The lean pipelined connection the scripts run on, for a plain TCP or Unix-socket URL;
    ``None`` (every call through redis-py) for TLS, which stays redis-py's to configure."""
    pool = client.connection_pool
    kwargs = pool.connection_kwargs
    common: dict[str, Any] = {
        "db": int(kwargs.get("db") or 0),
        "username": kwargs.get("username") or None,
        "password": kwargs.get("password"),
        "connect_timeout": connect_timeout,
        "command_timeout": command_timeout,
    }
    if pool.connection_class is RedisConnection:
        host, port = kwargs.get("host", "localhost"), int(kwargs.get("port") or 6379)
        return RespClient(host=host, port=port, where=f"{host}:{port}/{common['db']}", **common)
    if pool.connection_class is UnixDomainSocketConnection:
        path = kwargs["path"]
        return RespClient(path=path, where=f"{path}/{common['db']}", **common)
    return None


def redis_wake_listener(
    driver: RedisJobDriver,
    wake: Callable[[], object],
    *,
    queues: Collection[str] | None = None,
) -> RedisWakeListener:
    """A listener that calls ``wake`` when a job of ``queues`` becomes due on ``driver``; see
    :class:`RedisWakeListener`."""
    if not isinstance(driver, RedisJobDriver):
        raise XError(
            "X_CONFIG_INVALID",
            f"redis_wake_listener: {driver!r} is not a Redis job driver",
            fix="pass the driver redis_job_driver(...) made",
        )
    return RedisWakeListener(
        wake, client=driver.client, fast=driver._r.fast, prefix=driver.prefix, queues=queues
    )
