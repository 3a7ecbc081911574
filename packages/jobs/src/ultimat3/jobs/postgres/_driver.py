"""``PostgresJobDriver``: the default, durable ``JobDriver`` over psycopg 3 and psycopg_pool.

One statement per operation wherever one serves (sql/queries/*.sql names each and the index it
reads): an enqueue is one INSERT ... ON CONFLICT with its notify, a claim is one
``FOR UPDATE SKIP LOCKED`` statement that never hands out more than its limit, and every settle
is fenced on ``(worker_id, claim)`` and moves its counter in the same statement. Every time is the
database's.
"""

from __future__ import annotations

import asyncio
from collections import deque
from collections.abc import Callable, Collection, Mapping, Sequence
from typing import Any, Final

from ultimat3.core import XError, log_event
from ultimat3.jobs.adapter import (
    DEPTH_SAMPLE_CAP,
    EXHAUSTED_BUFFER,
    AckRequest,
    ClaimedJob,
    EnqueueColumns,
    EnqueueRequest,
    EnqueueResult,
    ExhaustedJob,
    NackOutcome,
    QueueSample,
    QueueStats,
    Stepless,
    StepState,
    WorkerRow,
    sample_queue_names,
)
from ultimat3.jobs.postgres._acks import AckBatcher
from ultimat3.jobs.postgres._backfills import PostgresBackfillLedger
from ultimat3.jobs.postgres._db import Conn, Database, Pool, is_psycopg_async_connection
from ultimat3.jobs.postgres._enqueue import Enqueuer
from ultimat3.jobs.postgres._events import PostgresEventBus
from ultimat3.jobs.postgres._introspect import PostgresJobIntrospection, purge
from ultimat3.jobs.postgres._leases import PostgresLeaseStore
from ultimat3.jobs.postgres._redactions import PostgresRedactionCatalog
from ultimat3.jobs.postgres._rows import (
    check_text,
    fenced_ids,
    json_or_none,
    ms_param,
    to_json_text,
    worker_row,
)
from ultimat3.jobs.postgres._settle_watch import PostgresSettleWatch
from ultimat3.jobs.postgres._steps import PostgresStepStore
from ultimat3.jobs.postgres._wake import QueueWake

NACK_OUTCOMES: Final[tuple[NackOutcome, ...]] = ("retry", "dead", "failed", "suspend", "release")
STEP_STATES: Final[tuple[StepState, ...]] = ("started", "completed", "failed")
DEFAULT_NOTIFY_WINDOW_MS: Final = 10
"""The wake's notify window (issue 16): at most one notifying enqueue per queue per 10 ms from one
process — a stream of enqueues 20 ms apart is announced one by one (picked up in ~1-2 ms, not held
to a 250 ms window's trailing notification), and a burst still costs at most ~100 notifying
commits per queue per second (docs/postgres.md, "The wake"; the spec's 250 ms is
``notify_window_ms=250``)."""
_ENQUEUE_ROUNDS: Final = 5
_INSERTED: Final[Any] = object()


def _positive_ms(value: object, what: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
        raise XError(
            "X_INVARIANT",
            f"{what} {value!r} is not a positive whole number of milliseconds",
            fix=f"pass {what}=30000 or another positive int",
        )
    return value


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
        notify_window_ms: int = DEFAULT_NOTIFY_WINDOW_MS,
    ) -> None:
        self._name = name
        self._db = Database(
            dsn_or_pool,
            schema="public" if schema is None else schema,
            min_size=min_size,
            max_size=max_size,
            timeout_s=timeout_s,
        )
        self._stepless = Stepless()
        self._exhausted: deque[ExhaustedJob] = deque(maxlen=EXHAUSTED_BUFFER)
        self._next_due: dict[str, int] = {}
        self._steps = PostgresStepStore(self._db, self._stepless)
        self.leases = PostgresLeaseStore(self._db)
        self._settle_watch = PostgresSettleWatch(self._db)
        self.introspect = PostgresJobIntrospection(self._db)
        self.backfills = PostgresBackfillLedger(self._db)
        self.redactions = PostgresRedactionCatalog(self._db)
        if (
            isinstance(notify_window_ms, bool)
            or not isinstance(notify_window_ms, int)
            or (notify_window_ms < 0)
        ):
            raise XError(
                "X_CONFIG_INVALID",
                f"notify_window_ms {notify_window_ms!r} is not a whole number of ms >= 0",
                fix="pass notify_window_ms=10 (the default), 250 (the spec's) or 0",
            )
        self._enqueuer = Enqueuer(self._db, window_s=notify_window_ms / 1000)
        self._acker = AckBatcher(self._db, self._stepless)
        self._bus: PostgresEventBus | None = None

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
        await self._acker.idle()
        await self._enqueuer.close()
        await self._settle_watch.stop()
        await self._db.close()

    async def watch_settled(self, job_id: str) -> asyncio.Future[None]:
        """``SettleWatch``: a future resolved when ``job_id``'s final settle commits (the
        driver's one settle LISTEN session, opened on the first call)."""
        return await self._settle_watch.watch(job_id)

    def unwatch_settled(self, job_id: str, future: asyncio.Future[None]) -> None:
        self._settle_watch.unwatch(job_id, future)

    async def start_wake(
        self, on_wake: Callable[[str], object], *, queues: Collection[str] | None = None
    ) -> QueueWake:
        """Driver extra: start this process's LISTEN session (``start_queue_wake``), so an idle
        worker passes as soon as a job of one of its ``queues`` commits: pass ``worker.wake``.
        ``await wake.stop()`` at shutdown; ``wake.proven`` says the 5 s idle ceiling is safe."""
        return await start_queue_wake(self, on_wake, queues=queues)

    def event_bus(self) -> PostgresEventBus:
        """Driver extra: ``postgres_event_bus(self)`` (the same one every call), what a worker
        with no event bus of its own waits on (``step.wait_for_event``)."""
        if self._bus is None:
            self._bus = PostgresEventBus(self._db)
        return self._bus

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

    # --- enqueue --------------------------------------------------------------------------

    async def enqueue(
        self, request: EnqueueRequest, *, connection: object | None = None
    ) -> EnqueueResult:
        """Queue one job: ONE statement (an INSERT carrying its notify), one commit — or, on
        ``connection``, the caller's; a dedupe reads the row that won in a second statement
        (docs/postgres.md, "enqueue")."""
        return await self._enqueuer.enqueue(request, self._given(connection))

    async def enqueue_many(
        self, requests: Sequence[EnqueueRequest], *, connection: object | None = None
    ) -> list[EnqueueResult]:
        """One statement per ``ENQUEUE_CHUNK`` distinct requests; results in input order. Every
        request is checked before the first write. Two inputs sharing a live key (or an id) are
        one job: the later is deduped onto the earlier."""
        return await self._enqueuer.enqueue_many(requests, self._given(connection))

    async def enqueue_columns(
        self, columns: EnqueueColumns, *, connection: object | None = None
    ) -> list[EnqueueResult]:
        """``enqueue_many`` of one job's batch handed over as columns (``ColumnEnqueuer``): the
        same statements and answers, without a per-row request object on the way."""
        return await self._enqueuer.enqueue_columns(columns, self._given(connection))

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
        self._next_due.pop(worker_id, None)
        for r in rows:
            if r[0] == "next":
                self._next_due[worker_id] = max(0, int(r[9]))
                continue
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
                self._exhausted.append(
                    ExhaustedJob(
                        id=r[1],
                        name=r[3],
                        queue=r[4],
                        payload=r[5],
                        tenant_id=r[12],
                        outcome="failed" if r[15] == "failed" else "dead",
                        last_error=r[19],
                        run_id=r[2],
                        attempt=r[6],
                    )
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
                    trace_context=r[20],
                    crash_streak=r[21],
                    crashed_worker=r[22],
                )
            )
        return claimed

    def take_next_due(self, worker_id: str) -> int | None:
        """``DueReporter``: the ms until the earliest row of ``worker_id``'s last claim's queues
        that falls due later (read by the claim statement itself), or ``None``."""
        return self._next_due.pop(worker_id, None)

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
        """Fenced; the done counter moves in the same statement. Acks made at the same moment
        (the runs of one batch ending together) share ONE ``ack_many`` statement: each caller
        still hears whether its own ack landed."""
        return await self._acker.ack(
            job_id, worker_id=worker_id, claim=claim, result=result, duration_ms=duration_ms
        )

    async def ack_many(self, acks: Sequence[AckRequest], *, worker_id: str) -> list[bool]:
        """``BatchSettler``: a batch of acks by one worker in ONE statement (one commit);
        answers, per input, whether that ack landed (each is fenced like ``ack``)."""
        return await self._acker.ack_many(acks, worker_id=worker_id)

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
        if not fenced_ids(job_id, claim):
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
        if not fenced_ids(job_id, claim):
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
        live = [(j, c) for j, c in leases if fenced_ids(j, c)]
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
        return [j in landed and fenced_ids(j, c) for j, c in leases]

    async def progress(
        self, job_id: str, *, worker_id: str, claim: str, progress: Mapping[str, Any]
    ) -> bool:
        progress_json = to_json_text(dict(progress), what=f"job {job_id} progress")
        if not fenced_ids(job_id, claim):
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

    async def sample_queues(self, queues: Sequence[str]) -> list[QueueSample]:
        """``QueueSampler``: one statement for every queue named, read-only, index-only scans
        capped at ``DEPTH_SAMPLE_CAP`` rows per queue and state group."""
        names = sample_queue_names(queues)
        if not names:
            return []
        rows = await self._db.fetchall(
            "sample_queues",
            {"queues": names, "cap": DEPTH_SAMPLE_CAP},
            what=f"sampling the depth of {len(names)} queues",
        )
        return [QueueSample(queue=r[0], depth=r[1], running=r[2], paused=r[3]) for r in rows]

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

    async def fire_task(
        self, task: str, occurrence_ms: int, requests: Sequence[EnqueueRequest]
    ) -> bool:
        """One occurrence of a task in ONE statement (``fire_task`` in sql/queries/): the
        watermark and the jobs move together, or neither does. Every request is checked first;
        two sharing a live key (or an id) are one job, as in ``enqueue_many``."""
        check_text(task, what="fire_task: the task name")
        ms_param(occurrence_ms, what=f"fire_task({task!r}): occurrence_ms")
        forms = [Enqueuer.checked(req) for req in requests]
        keys: set[tuple[str, str, str]] = set()
        ids: set[str] = set()
        firsts: list[EnqueueRequest] = []
        first_forms: list[Any] = []
        for req, form in zip(requests, forms, strict=True):
            key = (req.name, req.tenant_id or "", req.idempotency_key)
            if key in keys or req.id in ids:
                continue
            keys.add(key)
            ids.add(req.id)
            firsts.append(req)
            first_forms.append(form)
        row = await self._db.fetchone(
            "fire_task",
            {
                "task": task,
                "occurrence_ms": occurrence_ms,
                **Enqueuer.chunk_params(firsts, first_forms),
            },
            what=f"firing task {task!r} at {occurrence_ms}",
        )
        return row is not None and int(row[0]) > 0

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
    notify_window_ms: int = DEFAULT_NOTIFY_WINDOW_MS,
) -> PostgresJobDriver:
    """The durable driver over ``dsn_or_pool``: a DSN (the driver owns a pool, opened on first
    use or by ``await driver.open()``, closed by ``close()``) or the caller's
    ``psycopg_pool.AsyncConnectionPool`` (opened and closed by the caller). Tables live in
    ``schema`` (default ``public``); run :func:`migrate` first. ``notify_window_ms``: at most one
    wake notification per queue per window from this process (10 ms; the spec's default is 250,
    see ``DEFAULT_NOTIFY_WINDOW_MS``), the enqueues inside it announced by one trailing
    notification; ``0`` notifies with every enqueue."""
    return PostgresJobDriver(
        dsn_or_pool,
        schema=schema,
        min_size=min_size,
        max_size=max_size,
        timeout_s=timeout_s,
        notify_window_ms=notify_window_ms,
    )


def postgres_event_bus(driver: PostgresJobDriver) -> PostgresEventBus:
    """The event bus over ``driver``'s database and schema: ``install_adapter(EVENT_BUS, bus)``."""
    return driver.event_bus()


async def start_queue_wake(
    driver: PostgresJobDriver,
    on_wake: Callable[[str], object],
    *,
    queues: Collection[str] | None = None,
    dsn: str | None = None,
    probe_timeout_s: float = 2.0,
    probe_every_s: float = 30.0,
) -> QueueWake:
    """Start the LISTEN session of this process: ``on_wake(queue)`` runs for every notification
    of a served queue (all queues when ``queues`` is None; after a re-dial, once per served
    queue, or once with ``'*'`` when serving all). ``dsn`` names the session's server when it
    must differ from the driver's (a direct URL beside a pooled one). ``await wake.stop()``."""
    wake = QueueWake(
        driver._db,
        on_wake,
        queues=queues,
        dsn=dsn,
        probe_timeout_s=probe_timeout_s,
        probe_every_s=probe_every_s,
    )
    await wake.start()
    return wake
