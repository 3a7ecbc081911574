"""``PostgresJobDriver``: the default, durable ``JobDriver`` over psycopg 3 and psycopg_pool.

One statement per operation wherever one serves (sql/queries.sql names each and the index it
reads): an enqueue is one INSERT ... ON CONFLICT with its notify, a claim is one
``FOR UPDATE SKIP LOCKED`` statement that never hands out more than its limit, and every settle
is fenced on ``(worker_id, claim)`` and moves its counter in the same statement. Every time is the
database's.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import time
from collections.abc import Callable, Collection, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Final

from psycopg import errors as pg_errors

from ultimat3.core import XError, is_lowercase_uuid, log_event
from ultimat3.jobs._model import (
    ENQUEUE_CHUNK,
    MAX_ENQUEUE_BATCH,
    AckRequest,
    ClaimedJob,
    EnqueueRequest,
    EnqueueResult,
    NackOutcome,
    QueueStats,
    StepRecord,
    StepState,
    WorkerRow,
)

from ._backfills import PostgresBackfillLedger
from ._db import Conn, Database, Pool, is_psycopg_async_connection
from ._introspect import PostgresJobIntrospection, purge
from ._leases import PostgresLeaseStore
from ._rows import (
    check_text,
    check_uuid,
    is_plain_json,
    json_form,
    json_or_none,
    json_text,
    ms_param,
    step_record,
    to_json_text,
    worker_row,
)

NACK_OUTCOMES: Final[tuple[NackOutcome, ...]] = ("retry", "dead", "failed", "suspend", "release")
STEP_STATES: Final[tuple[StepState, ...]] = ("started", "completed", "failed")
if TYPE_CHECKING:
    from ._wake import QueueWake

_ENQUEUE_ROUNDS: Final = 5
_INSERTED: Final[Any] = object()
WAKE_INTERVAL_S: Final = 0.25
"""At most one notification per queue per 250 ms from one process (Postgres serialises every
notifying commit behind one lock)."""


def _positive_ms(value: object, what: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
        raise XError(
            "X_INVARIANT",
            f"{what} {value!r} is not a positive whole number of milliseconds",
            fix=f"pass {what}=30000 or another positive int",
        )
    return value


def _storable(value: object) -> bool:
    return type(value) is str and value != "" and "\x00" not in value


def _plainly_valid(req: EnqueueRequest) -> bool:
    """The fast path of a request's checks: type tests only, no message built. ``False`` sends
    the request through the checks that name what is wrong."""
    tenant, concurrency_key = req.tenant_id, req.concurrency_key
    run_at_ms, delay_ms, attempts = req.run_at_ms, req.delay_ms, req.max_attempts
    return (
        _storable(req.name)
        and _storable(req.queue)
        and _storable(req.idempotency_key)
        and (tenant is None or _storable(tenant))
        and (concurrency_key is None or _storable(concurrency_key))
        and is_lowercase_uuid(req.id)
        and is_lowercase_uuid(req.run_id)
        and type(attempts) is int
        and attempts >= 1
        and (run_at_ms is None or type(run_at_ms) is int)
        and (delay_ms is None or type(delay_ms) is int)
    )


@dataclass(slots=True)
class _PendingAck:
    job_id: str
    claim: str
    result_json: str
    duration_ms: int | None
    landed: asyncio.Future[bool] | None


def _fenced_ids(job_id: object, claim: object) -> bool:
    """Whether a settle can match at all: ids this driver hands out are lowercase UUIDs, so
    anything else is a fenced miss, answered ``False`` without a round trip."""
    return is_lowercase_uuid(job_id) and is_lowercase_uuid(claim)


class _Stepless:
    """Job ids this driver claimed that had no step at their claim (bounded, oldest dropped).

    While a claim holds a row, only its holder can record a step, and it records through this
    driver (which forgets the id first); so ``steps.load`` of such a job is ``{}`` without a
    round trip. A claim that lapsed to another worker makes the holder a zombie whose writes are
    fenced anyway."""

    def __init__(self, bound: int = 50_000) -> None:
        self._ids: dict[str, None] = {}
        self._bound = bound

    def add(self, job_id: str) -> None:
        self._ids[job_id] = None
        if len(self._ids) > self._bound:
            del self._ids[next(iter(self._ids))]

    def discard(self, job_id: str) -> None:
        self._ids.pop(job_id, None)

    def __contains__(self, job_id: object) -> bool:
        return job_id in self._ids


class PostgresStepStore:
    """``StepStore`` over ``x_job_steps``: one row per ``(job_id, name)``, fenced writes."""

    def __init__(self, db: Database, stepless: _Stepless | None = None) -> None:
        self._db = db
        self._stepless = stepless if stepless is not None else _Stepless()

    async def load(self, job_id: str) -> dict[str, StepRecord]:
        if not is_lowercase_uuid(job_id) or job_id in self._stepless:
            return {}
        rows = await self._db.fetchall("steps_load", {"job_id": job_id})
        return {r[0]: step_record(r) for r in rows}

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
        check_text(name, what=f"job {job_id}: the step name")
        output_json = to_json_text(
            output, what=f"job {job_id} step {name!r} output", code="X_STEP_OUTPUT_UNSERIALIZABLE"
        )
        error_json = json_or_none(error, what=f"job {job_id} step {name!r} error")
        if not _fenced_ids(job_id, claim):
            return False
        self._stepless.discard(job_id)
        n = await self._db.fetchone(
            "step_record",
            {
                "job_id": job_id,
                "name": name,
                "state": state,
                "executions": 1 if state in ("completed", "failed") else 0,
                "output": output_json,
                "error": error_json,
                "worker_id": worker_id,
                "claim": claim,
            },
            what=f"recording step {name!r} of job {job_id}",
        )
        return bool(n and n[0])


class PostgresJobDriver:
    """The durable ``JobDriver``: ``x_jobs`` and its siblings in one schema of one database.

    Build it with :func:`postgres_job_driver`; run :func:`migrate` once (or at every deploy — it
    is idempotent) before the first call."""

    def __init__(
        self,
        dsn_or_pool: str | Pool,
        *,
        schema: str | None = None,
        min_size: int = 1,
        max_size: int = 10,
        timeout_s: float = 10.0,
        name: str = "postgres",
    ) -> None:
        self._name = name
        self._db = Database(
            dsn_or_pool,
            schema="public" if schema is None else schema,
            min_size=min_size,
            max_size=max_size,
            timeout_s=timeout_s,
        )
        self._stepless = _Stepless()
        self._steps = PostgresStepStore(self._db, self._stepless)
        self.leases = PostgresLeaseStore(self._db)
        self.introspect = PostgresJobIntrospection(self._db)
        self.backfills = PostgresBackfillLedger(self._db)
        self._woken: dict[str, float] = {}
        self._acks: dict[str, list[_PendingAck]] = {}
        self._ack_flusher: asyncio.Task[None] | None = None

    def __repr__(self) -> str:
        return f"PostgresJobDriver(schema={self._db.schema!r})"

    @property
    def name(self) -> str:
        return self._name

    @property
    def schema(self) -> str:
        return self._db.schema

    @property
    def steps(self) -> PostgresStepStore:
        return self._steps

    @property
    def pool_size(self) -> int:
        """The most connections the driver's pool holds: a worker whose concurrency needs more
        (claims, settles, heartbeats and steps at once) should refuse to start."""
        return self._db.max_size

    async def open(self) -> None:
        """Open the owned pool now (it opens on first use otherwise); ``X_DRIVER_UNAVAILABLE``
        when the database does not answer."""
        await self._db.open()

    async def close(self) -> None:
        """Send the acks still pending, then close the pool the driver opened; a pool the caller
        passed in stays the caller's."""
        flusher = self._ack_flusher
        if flusher is not None and not flusher.done():
            with contextlib.suppress(Exception):
                await flusher
        await self._db.close()

    async def start_wake(
        self, on_wake: Callable[[str], object], *, queues: Collection[str] | None = None
    ) -> QueueWake:
        """Driver extra: start this process's LISTEN session (``start_queue_wake``), so an idle
        worker passes as soon as a job of one of its ``queues`` commits: pass ``worker.wake``.
        ``await wake.stop()`` at shutdown; ``wake.proven`` says the 5 s idle ceiling is safe."""
        from ._wake import start_queue_wake

        return await start_queue_wake(self, on_wake, queues=queues)

    async def now_ms(self) -> int:
        row = await self._db.fetchone("now_ms", {}, what="reading the database clock")
        assert row is not None
        return int(row[0])

    def owns_connection(self, connection: object) -> bool:
        """True for a psycopg ``AsyncConnection``: an enqueue given one writes on it, inside the
        caller's transaction (committed: queued; rolled back: it never existed)."""
        return is_psycopg_async_connection(connection)

    def _given(self, connection: object | None) -> Conn | None:
        if connection is None:
            return None
        if not is_psycopg_async_connection(connection):
            raise XError(
                "X_INVARIANT",
                f"postgres job driver: cannot enqueue on a {type(connection).__name__}; only a "
                "psycopg AsyncConnection joins the caller's transaction",
                fix="bind a psycopg AsyncConnection (use_connection(conn)), or let the outbox "
                "stage the enqueue",
            )
        return connection  # type: ignore[return-value]

    def _wake_due(self, queue: str) -> bool:
        """Whether this enqueue should carry the queue's notification (one per 250 ms)."""
        now = time.monotonic()
        last = self._woken.get(queue)
        if last is not None and now - last < WAKE_INTERVAL_S:
            return False
        if len(self._woken) > 10_000:
            self._woken.clear()
        self._woken[queue] = now
        return True

    # --- enqueue --------------------------------------------------------------------------

    @staticmethod
    def _checked(req: EnqueueRequest) -> Any:
        """Check one request (nothing is written); answers its payload in core's JSON form."""
        if not _plainly_valid(req):
            PostgresJobDriver._refuse(req)
        if is_plain_json(req.payload):
            return req.payload
        return json_form(req.payload, what=f"the payload of job {req.id} ({req.name})")

    @staticmethod
    def _refuse(req: EnqueueRequest) -> None:
        """The slow path of ``_checked``: raise the refusal naming what is wrong."""
        who = f"enqueue of job {req.id!r} ({req.name!r})"
        for field_name in ("id", "run_id", "name", "queue", "idempotency_key"):
            check_text(getattr(req, field_name), what=f"{who}: {field_name}")
        check_uuid(req.id, what=f"{who}: id")
        check_uuid(req.run_id, what=f"{who}: run_id")
        check_text(req.tenant_id, what=f"{who}: tenant_id", optional=True)
        check_text(req.concurrency_key, what=f"{who}: concurrency_key", optional=True)
        attempts = req.max_attempts
        if isinstance(attempts, bool) or not isinstance(attempts, int) or attempts < 1:
            raise XError(
                "X_INVARIANT",
                f"{who}: max_attempts {attempts!r} is not >= 1",
                fix="declare retry=Retry(attempts=n) with n >= 1",
            )
        ms_param(req.run_at_ms, what=f"{who}: run_at_ms")
        ms_param(req.delay_ms, what=f"{who}: delay_ms")

    def _params(self, req: EnqueueRequest) -> dict[str, Any]:
        form = self._checked(req)
        return {
            "id": req.id,
            "run_id": req.run_id,
            "name": req.name,
            "queue": req.queue,
            "payload": json_text(form, what=f"the payload of job {req.id} ({req.name})"),
            "idempotency_key": req.idempotency_key,
            "tenant_id": req.tenant_id,
            "concurrency_key": req.concurrency_key,
            "max_attempts": req.max_attempts,
            "run_at_ms": req.run_at_ms,
            "delay_ms": req.delay_ms,
        }

    async def enqueue(
        self, request: EnqueueRequest, *, connection: object | None = None
    ) -> EnqueueResult:
        """One statement, one commit (or none: on ``connection`` the caller commits)."""
        params = self._params(request)
        conn = self._given(connection)
        params["notify"] = conn is not None or self._wake_due(request.queue)
        for _ in range(3):
            row = await self._db.fetchone(
                "enqueue", params, conn=conn, what=f"enqueue of job {request.id}"
            )
            if row is not None:
                return EnqueueResult(id=row[0], run_id=row[1], deduped=row[2])
            # The row that won the key committed after this statement's snapshot: ask again.
        raise XError(
            "X_DRIVER_UNAVAILABLE",
            f"enqueue of job {request.id}: its key is held by a row this transaction cannot see",
            fix="retry the enqueue (in a READ COMMITTED transaction, or outside one)",
        )

    async def enqueue_many(
        self, requests: Sequence[EnqueueRequest], *, connection: object | None = None
    ) -> list[EnqueueResult]:
        """One statement per ``ENQUEUE_CHUNK`` distinct requests; results in input order. Every
        request is checked before the first write. Two inputs sharing a live key (or an id) are
        one job: the later is deduped onto the earlier."""
        if len(requests) > MAX_ENQUEUE_BATCH:
            raise XError(
                "X_JOB_ENQUEUE_BATCH_TOO_LARGE",
                f"enqueue_many of {len(requests)} jobs is past MAX_ENQUEUE_BATCH "
                f"({MAX_ENQUEUE_BATCH})",
                fix="page the source with backfill(), or enqueue at most 10,000 at a time",
            )
        forms = [self._checked(req) for req in requests]
        conn = self._given(connection)
        results: dict[int, EnqueueResult] = {}
        pending = list(range(len(requests)))
        for _ in range(_ENQUEUE_ROUNDS):
            pending = await self._enqueue_round(requests, forms, pending, results, conn)
            if not pending:
                break
        else:
            raise XError(
                "X_DRIVER_UNAVAILABLE",
                f"enqueue_many: {len(pending)} keys are held by rows this transaction cannot see",
                fix="retry the enqueue (in a READ COMMITTED transaction, or outside one)",
            )
        return [results[i] for i in range(len(requests))]

    async def _enqueue_round(
        self,
        requests: Sequence[EnqueueRequest],
        forms: list[Any],
        pending: list[int],
        results: dict[int, EnqueueResult],
        conn: Conn | None,
    ) -> list[int]:
        """One round over ``pending`` (input order), as the memory driver would take them one by
        one: the first input of each live key (and id) is sent, one statement per
        ``ENQUEUE_CHUNK``; a later input sharing its key is deduped onto it when it holds the key
        (inserted, or deduped onto the live holder). Answers the inputs left for another round:
        a key whose first input was deduped by its id onto a row NOT holding the key (a
        republish of a finished job), and winners whose key is held by a row this statement
        could not see yet."""
        winners: list[int] = []
        by_key: dict[tuple[str, str, str], int] = {}
        by_id: dict[str, int] = {}
        refer: dict[int, tuple[int, bool]] = {}
        for i in pending:
            req = requests[i]
            key = (req.name, req.tenant_id or "", req.idempotency_key)
            first = by_key.get(key)
            if first is not None:
                refer[i] = (first, True)
                continue
            first = by_id.get(req.id)
            if first is not None:
                refer[i] = (first, False)
                continue
            by_key[key] = i
            by_id[req.id] = i
            winners.append(i)
        # every document is built (and so every input checked) before the first statement
        chunks = [winners[at : at + ENQUEUE_CHUNK] for at in range(0, len(winners), ENQUEUE_CHUNK)]
        docs = [self._chunk_doc([requests[i] for i in c], [forms[i] for i in c]) for c in chunks]
        if refer:
            self._chunk_doc([requests[i] for i in refer], [forms[i] for i in refer])
        holds: dict[int, bool] = {}
        later: list[int] = []
        for chunk, doc in zip(chunks, docs, strict=True):
            queues = {requests[i].queue for i in chunk}
            lost = await self._enqueue_chunk(doc, len(chunk), queues, conn)
            for position, i in enumerate(chunk, start=1):
                outcome = lost.get(position, _INSERTED)
                if outcome is _INSERTED:
                    req = requests[i]
                    results[i] = EnqueueResult(id=req.id, run_id=req.run_id, deduped=False)
                    holds[i] = True
                elif outcome is None:
                    later.append(i)  # its winner committed after the statement's snapshot
                else:
                    job_id, run_id, holds_key = outcome
                    results[i] = EnqueueResult(id=job_id, run_id=run_id, deduped=True)
                    holds[i] = holds_key
        for i, (first, same_key) in refer.items():
            won = results.get(first)
            if won is None or (same_key and not holds.get(first, False)):
                later.append(i)
            else:
                results[i] = EnqueueResult(id=won.id, run_id=won.run_id, deduped=True)
        later.sort()
        return later

    @staticmethod
    def _chunk_doc(chunk: list[EnqueueRequest], forms: list[Any]) -> str:
        """A chunk as one jsonb array of positional rows (the order `enqueue_many_input` in
        queries.sql reads): one json.dumps here, one parse on the server."""
        rows = [
            [
                r.id,
                r.run_id,
                r.name,
                r.queue,
                form,
                r.idempotency_key,
                r.tenant_id,
                r.concurrency_key,
                r.max_attempts,
                r.run_at_ms,
                r.delay_ms,
            ]
            for r, form in zip(chunk, forms, strict=True)
        ]
        doc = json.dumps(rows, separators=(",", ":"), ensure_ascii=False)
        if "\\u0000" in doc:  # rare: find the payload holding a NUL, if any, and name it
            for r, form in zip(chunk, forms, strict=True):
                json_text(form, what=f"the payload of job {r.id} ({r.name})")
        return doc

    async def _enqueue_chunk(
        self, doc: str, size: int, queues: set[str], conn: Conn | None
    ) -> dict[int, tuple[str, str, bool] | None]:
        """One statement for one chunk. Answers, by 1-based position, the inputs NOT inserted:
        ``(id, run_id, holds_key)`` of the row that won (``holds_key``: it is the live holder of
        the input's key, not only its id), or ``None`` when it is not visible yet."""
        woken = [self._wake_due(q) for q in queues]  # every queue's slot, not the first only
        params = {"rows": doc, "notify": conn is not None or any(woken)}
        what = f"enqueue_many of {size} jobs"
        if conn is None:
            try:
                rows = await self._db.fetchall("enqueue_many_fresh", params, what=what)
            except pg_errors.UniqueViolation:
                # a key or id was taken meanwhile (or republished): the statement changed
                # nothing; the conflict-tolerant form settles it
                rows = await self._db.fetchall("enqueue_many", params, what=what)
        else:
            rows = await self._db.fetchall("enqueue_many", params, conn=conn, what=what)
        return {int(r[0]): (None if r[1] is None else (r[1], r[2], r[5])) for r in rows if r[0]}

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
        """One statement: at most ``limit`` due jobs of the unpaused ``queues``, oldest run_at
        first; a lapsed lease on its final attempt is buried by the statement itself and logged
        ``jobs.claim.exhausted``."""
        _positive_ms(visibility_timeout_ms, "visibility_timeout_ms")
        if isinstance(limit, bool) or not isinstance(limit, int) or limit < 0:
            raise XError("X_INVARIANT", f"claim: limit {limit!r} is not a count", fix="limit=1+")
        check_text(worker_id, what="claim: worker_id")
        if limit == 0 or not queues:
            return []
        rows = await self._db.fetchall(
            "claim",
            {
                "queues": list(queues),
                "limit": limit,
                "worker_id": worker_id,
                "visibility_timeout_ms": visibility_timeout_ms,
                "no_dead_letter": list(no_dead_letter),
            },
            what=f"claim by worker {worker_id}",
        )
        claimed: list[ClaimedJob] = []
        for r in rows:
            if r[0] == "buried":
                log_event(
                    "jobs.claim.exhausted",
                    job_id=r[1],
                    job=r[3],
                    queue=r[4],
                    attempts=r[6],
                    max_attempts=r[7],
                    state=r[15],
                    worker_id=r[16],
                )
                continue
            if r[18]:
                self._stepless.discard(r[1])
            else:
                self._stepless.add(r[1])
            claimed.append(
                ClaimedJob(
                    id=r[1],
                    run_id=r[2],
                    name=r[3],
                    queue=r[4],
                    payload=r[5],
                    attempt=r[6],
                    max_attempts=r[7],
                    claim=r[8],
                    worker_id=worker_id,
                    claimed_at_ms=r[9],
                    lease_expires_at_ms=r[10],
                    idempotency_key=r[11],
                    tenant_id=r[12],
                    concurrency_key=r[13],
                    created_at_ms=r[14],
                )
            )
        return claimed

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
        """Fenced; the done counter moves in the same statement. Acks made at the same moment
        (the runs of one batch ending together) share ONE ``ack_many`` statement: each caller
        still hears whether its own ack landed."""
        result_json = to_json_text(
            result, what=f"the result of job {job_id}", code="X_STEP_OUTPUT_UNSERIALIZABLE"
        )
        duration = ms_param(duration_ms, what=f"ack of job {job_id}: duration_ms")
        if not _fenced_ids(job_id, claim):
            return False
        self._stepless.discard(job_id)
        loop = asyncio.get_running_loop()
        landed: asyncio.Future[bool] = loop.create_future()
        flusher = self._ack_flusher
        if flusher is not None and flusher.get_loop() is not loop:
            self._acks.clear()  # a previous event loop's leftovers (it is gone)
            flusher = None
        self._acks.setdefault(worker_id, []).append(
            _PendingAck(job_id, claim, result_json, duration, landed)
        )
        if flusher is None or flusher.done():
            self._ack_flusher = loop.create_task(self._flush_acks(), name="ultimat3.jobs.acks")
        return await landed

    async def _flush_acks(self) -> None:
        """Send every pending ack, one ``ack_many`` statement per worker (and per 1,000); acks
        arriving while a statement is out join the next one."""
        while self._acks:
            pending, self._acks = self._acks, {}
            for worker_id, items in pending.items():
                for at in range(0, len(items), ENQUEUE_CHUNK):
                    chunk = items[at : at + ENQUEUE_CHUNK]
                    try:
                        landed = await self._ack_prepared(chunk, worker_id)
                    except BaseException as exc:  # every waiter hears it, the flusher goes on
                        for item in chunk:
                            if item.landed is not None and not item.landed.done():
                                item.landed.set_exception(exc)
                        if not isinstance(exc, Exception):
                            raise
                        continue
                    for item in chunk:
                        if item.landed is not None and not item.landed.done():
                            item.landed.set_result(item.job_id in landed)

    async def _ack_prepared(self, items: Sequence[_PendingAck], worker_id: str) -> set[str]:
        """ONE statement: the acks of one worker; answers the ids whose ack landed."""
        # ids and claims are checked lowercase UUIDs and results JSON text already: the array
        # is joined as text, with no second encoding of the results
        doc = (
            "["
            + ",".join(
                f'["{a.job_id}","{a.claim}",{a.result_json},'
                f"{'null' if a.duration_ms is None else int(a.duration_ms)}]"
                for a in items
            )
            + "]"
        )
        rows = await self._db.fetchall(
            "ack_many",
            {"rows": doc, "worker_id": worker_id},
            what=(
                f"ack of job {items[0].job_id}"
                if len(items) == 1
                else f"ack_many of {len(items)} jobs by worker {worker_id}"
            ),
        )
        return {r[0] for r in rows}

    async def ack_many(self, acks: Sequence[AckRequest], *, worker_id: str) -> list[bool]:
        """``BatchSettler``: a batch of acks by one worker in ONE statement (one commit);
        answers, per input, whether that ack landed (each is fenced like ``ack``)."""
        if not acks:
            return []
        items = [
            _PendingAck(
                a.job_id,
                a.claim,
                to_json_text(
                    a.result,
                    what=f"the result of job {a.job_id}",
                    code="X_STEP_OUTPUT_UNSERIALIZABLE",
                ),
                ms_param(a.duration_ms, what=f"ack of job {a.job_id}: duration_ms"),
                None,
            )
            for a in acks
        ]
        live = [item for item in items if _fenced_ids(item.job_id, item.claim)]
        for item in live:
            self._stepless.discard(item.job_id)
        landed: set[str] = set()
        for at in range(0, len(live), ENQUEUE_CHUNK):
            landed |= await self._ack_prepared(live[at : at + ENQUEUE_CHUNK], worker_id)
        return [_fenced_ids(a.job_id, a.claim) and a.job_id in landed for a in acks]

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
        error_json = json_or_none(error, what=f"job {job_id} error")
        check_text(wait_event, what=f"nack of job {job_id}: wait_event", optional=True)
        if not _fenced_ids(job_id, claim):
            return False
        self._stepless.discard(job_id)
        row = await self._db.fetchone(
            "nack",
            {
                "id": job_id,
                "worker_id": worker_id,
                "claim": claim,
                "outcome": outcome,
                "error": error_json,
                "delay_ms": ms_param(delay_ms, what=f"nack of job {job_id}: delay_ms"),
                "run_at_ms": ms_param(run_at_ms, what=f"nack of job {job_id}: run_at_ms"),
                "wait_event": wait_event,
            },
            what=f"nack ({outcome}) of job {job_id}",
        )
        return bool(row and row[0])

    async def heartbeat(
        self, job_id: str, *, worker_id: str, claim: str, visibility_timeout_ms: int
    ) -> bool:
        _positive_ms(visibility_timeout_ms, "visibility_timeout_ms")
        if not _fenced_ids(job_id, claim):
            return False
        n = await self._db.rowcount(
            "heartbeat",
            {
                "id": job_id,
                "worker_id": worker_id,
                "claim": claim,
                "visibility_timeout_ms": visibility_timeout_ms,
            },
            what=f"heartbeat of job {job_id}",
        )
        return n > 0

    async def heartbeat_many(
        self,
        leases: Sequence[tuple[str, str]],
        *,
        worker_id: str,
        visibility_timeout_ms: int,
    ) -> list[bool]:
        """Driver extra: renew every ``(job_id, claim)`` one worker holds in ONE statement;
        answers, per input, whether that renewal landed."""
        _positive_ms(visibility_timeout_ms, "visibility_timeout_ms")
        live = [(j, c) for j, c in leases if _fenced_ids(j, c)]
        if not live:
            return [False] * len(leases)
        rows = await self._db.fetchall(
            "heartbeat_many",
            {
                "ids": [j for j, _ in live],
                "claims": [c for _, c in live],
                "worker_id": worker_id,
                "visibility_timeout_ms": visibility_timeout_ms,
            },
            what=f"heartbeat_many of {len(live)} jobs by worker {worker_id}",
        )
        landed = {r[0] for r in rows}
        return [j in landed and _fenced_ids(j, c) for j, c in leases]

    async def progress(
        self, job_id: str, *, worker_id: str, claim: str, progress: Mapping[str, Any]
    ) -> bool:
        progress_json = to_json_text(dict(progress), what=f"job {job_id} progress")
        if not _fenced_ids(job_id, claim):
            return False
        n = await self._db.rowcount(
            "progress",
            {"id": job_id, "worker_id": worker_id, "claim": claim, "progress": progress_json},
            what=f"progress of job {job_id}",
        )
        return n > 0

    async def wake_waiters(self, event: str) -> int:
        check_text(event, what="wake_waiters: the event")
        row = await self._db.fetchone(
            "wake_waiters", {"event": event}, what=f"waking the waiters of {event!r}"
        )
        return int(row[0]) if row else 0

    async def stats(self) -> list[QueueStats]:
        rows = await self._db.fetchall("stats", {}, what="queue stats")
        return [
            QueueStats(
                queue=r[0],
                ready=r[1],
                delayed=r[2],
                running=r[3],
                suspended=r[4],
                done=r[5],
                failed=r[6],
                dead=r[7],
                cancelled=r[8],
            )
            for r in rows
        ]

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
        _positive_ms(visibility_timeout_ms, "visibility_timeout_ms")
        check_text(worker_id, what="register_worker: the worker id")
        row = await self._db.fetchone(
            "register_worker",
            {
                "id": worker_id,
                "host": host,
                "queues": list(queues),
                "slots": slots,
                "visibility_timeout_ms": visibility_timeout_ms,
            },
            what=f"registering worker {worker_id}",
        )
        assert row is not None
        return worker_row(row)

    async def worker_heartbeat(self, worker_id: str, *, in_flight: Sequence[str]) -> bool:
        n = await self._db.rowcount(
            "worker_heartbeat",
            {"id": worker_id, "in_flight": list(in_flight)},
            what=f"heartbeat of worker {worker_id}",
        )
        return n > 0

    async def deregister_worker(self, worker_id: str) -> bool:
        n = await self._db.rowcount(
            "deregister_worker", {"id": worker_id}, what=f"deregistering worker {worker_id}"
        )
        return n > 0

    async def record_task_fire(self, task: str, occurrence_ms: int) -> bool:
        check_text(task, what="record_task_fire: the task name")
        n = await self._db.rowcount(
            "record_task_fire",
            {"task": task, "occurrence_ms": occurrence_ms},
            what=f"recording a fire of task {task!r}",
        )
        return n > 0

    async def purge(
        self,
        *,
        done_older_than_ms: int | None = None,
        dead_older_than_ms: int | None = None,
    ) -> int:
        """Delete ``done`` rows finished 14 days ago and ``failed`` / ``dead`` / ``cancelled``
        ones 90 days ago (with their steps), in batches; drop expired workers, lease slots and
        counter buckets. Answers how many jobs were deleted. Run it hourly."""
        return await purge(
            self._db, done_older_than_ms=done_older_than_ms, dead_older_than_ms=dead_older_than_ms
        )


def postgres_job_driver(
    dsn_or_pool: str | Pool,
    *,
    schema: str | None = None,
    min_size: int = 1,
    max_size: int = 10,
    timeout_s: float = 10.0,
) -> PostgresJobDriver:
    """The durable driver over ``dsn_or_pool``: a DSN (the driver owns a pool, opened on first
    use or by ``await driver.open()``, closed by ``close()``) or the caller's
    ``psycopg_pool.AsyncConnectionPool`` (opened and closed by the caller). Tables live in
    ``schema`` (default ``public``); run :func:`migrate` first."""
    return PostgresJobDriver(
        dsn_or_pool, schema=schema, min_size=min_size, max_size=max_size, timeout_s=timeout_s
    )
