"""Enqueue on Postgres: the checks every request passes before anything is written, the notify
throttle, and the statements (one per enqueue, one per ENQUEUE_CHUNK distinct inputs of a batch).

The throttle: an enqueue carries its queue's ``pg_notify`` unless another did within the last
window (``WAKE_INTERVAL_S``, 250 ms by default; Postgres serialises every notifying commit behind
one lock, so a burst of concurrent enqueues must not all notify). An enqueue that went without
one is announced after it committed: by the next enqueue of its queue that notifies (it starts
after that commit, so it commits after it), or — when none comes within half a window past the
window's end — by ONE trailing notification of its own. An idle worker hears of every committed
job within about 1.5 windows, never only at its next poll; a steady stream sends no extra
statement.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import re
import time
from collections.abc import Awaitable, Callable, Mapping, Sequence
from itertools import chain, repeat
from operator import attrgetter
from typing import Any, Final, TypeVar, cast

from psycopg import errors as pg_errors
from pydantic_core import to_json

from ultimat3.core import XError, is_lowercase_uuid, log_event
from ultimat3.jobs.adapter import (
    ENQUEUE_CHUNK,
    MAX_ENQUEUE_BATCH,
    EnqueueColumns,
    EnqueueRequest,
    EnqueueResult,
)
from ultimat3.jobs.postgres._db import Conn, Database
from ultimat3.jobs.postgres._rows import (
    check_text,
    check_uuid,
    is_plain_json,
    json_form,
    json_text,
    ms_param,
)

ENQUEUE_ROUNDS: Final = 5
_INSERTED: Final[Any] = object()
WAKE_INTERVAL_S: Final = 0.25
"""The spec's default window: at most one notifying enqueue per queue per 250 ms from one process
(Postgres serialises every notifying commit behind one lock); the enqueues in between are
announced by the next one that notifies, or by one trailing notification. A driver may narrow it
(``postgres_job_driver(..., notify_window_ms=10)``)."""
TRAILING_FACTOR: Final = 1.5
"""When the trailing notification goes out, in windows from the window's start, unless an enqueue
that notifies came first."""
PROBE_HOLD_S: Final = 60.0
"""After a batch of a job met a live key (or an id already taken), that job's batches are sent
with the probe of the live keys (`enqueue_many_fresh`) rather than blind for this long, doubled
at each further conflict up to ``PROBE_HOLD_MAX_S``, and renewed while probed batches keep
meeting live keys: a job that re-enqueues the keys it holds costs one failed statement per hold,
a job of new keys none."""
PROBE_HOLD_MAX_S: Final = 3600.0
MAX_QUEUE_BYTES: Final = 7999
"""A queue name is a NOTIFY payload (under 8000 bytes): a longer one is refused at enqueue, delayed
or not, rather than stored to fail every later statement that announces its queue."""


def _storable(value: object) -> bool:
    return type(value) is str and value != "" and "\x00" not in value


def _trace_text(trace_context: Mapping[str, str] | None) -> str | None:
    """The stored trace context as ``jsonb`` text (``None`` stays SQL NULL)."""
    if trace_context is None:
        return None
    return json.dumps(dict(trace_context), separators=(",", ":"), ensure_ascii=False)


def array_text(values: Sequence[str | None]) -> str | None:
    """Text values as a Postgres array literal (``{"a","b\\"c",NULL}``): every element quoted,
    ``\\`` and ``"`` escaped, in a few C-level passes; ``None`` (a NULL array, which ROWS FROM
    pads with NULLs) when every value is ``None`` or there is none."""
    nulls = values.count(None)
    if nulls == len(values):
        return None
    if not nulls:
        joined = "\x00".join(cast("Sequence[str]", values))
        if joined.count("\x00") == len(values) - 1:  # no value holds a NUL: it separates them
            body = joined.replace("\\", "\\\\").replace('"', '\\"').replace("\x00", '","')
            return '{"' + body + '"}'
    return "{" + ",".join("NULL" if v is None else _quoted(v) for v in values) + "}"


def _quoted(value: str) -> str:
    return '"' + value.replace("\\", "\\\\").replace('"', '\\"') + '"'


def array_ints(values: Sequence[int | None]) -> str | None:
    """Whole numbers as a Postgres array literal (``{3,NULL}``); ``None`` as in ``array_text``."""
    nulls = values.count(None)
    if nulls == len(values):
        return None
    if nulls:
        return "{" + ",".join("NULL" if v is None else str(v) for v in values) + "}"
    return "{" + ",".join(map(str, values)) + "}"


def _plainly_valid(req: EnqueueRequest) -> bool:
    """The fast path of a request's checks: type tests only, no message built. ``False`` sends
    the request through the checks that name what is wrong."""
    tenant, concurrency_key = req.tenant_id, req.concurrency_key
    run_at_ms, delay_ms, attempts = req.run_at_ms, req.delay_ms, req.max_attempts
    return (
        _storable(req.name)
        and _storable(req.queue)
        and len(req.queue) <= MAX_QUEUE_BYTES // 4
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


_UUID: Final = "[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}"
_UUID_LIST: Final = re.compile(f"{_UUID}(?:,{_UUID})*")
_FIELDS: Final = attrgetter(
    "id",
    "run_id",
    "name",
    "queue",
    "idempotency_key",
    "tenant_id",
    "concurrency_key",
    "max_attempts",
    "run_at_ms",
    "delay_ms",
)
_COLUMNS: Final[tuple[tuple[str, Callable[[Sequence[Any]], str | None]], ...]] = (
    ("ids", array_text),
    ("run_ids", array_text),
    ("names", array_text),
    ("queues", array_text),
    ("idempotency_keys", array_text),
    ("tenant_ids", array_text),
    ("concurrency_keys", array_text),
    ("max_attempts", array_ints),
    ("run_at_ms", array_ints),
    ("delay_ms", array_ints),
)
"""The parameters of `enqueue_many_input` (sql/queries/) that ``_FIELDS`` fills, in its order,
each with the function that writes its array literal."""
_TEXT: Final[frozenset[type]] = frozenset({str})
_TEXT_OR_NONE: Final[frozenset[type]] = frozenset({str, type(None)})
_INT: Final[frozenset[type]] = frozenset({int})
_INT_OR_NONE: Final[frozenset[type]] = frozenset({int, type(None)})


def _texts_storable(values: Sequence[Any], kinds: frozenset[type]) -> bool:
    """Every value's type is among ``kinds`` (``str``, maybe ``None``), and no str is empty or
    holds a NUL — in a few C-level passes, not one Python call per value."""
    if not set(map(type, values)) <= kinds:
        return False
    texts = [v for v in values if v is not None] if type(None) in kinds else values
    return "" not in texts and "\x00" not in "".join(texts)


_SCOPE: Final = attrgetter("name", "tenant_id", "idempotency_key")
_ID: Final = attrgetter("id")
_SCALARS: Final[frozenset[type]] = frozenset({str, int, bool, type(None)})


def _flat_plain(payloads: Sequence[Any]) -> bool:
    """Whether every payload is a dict of str keys to str / int / bool / None (the common
    payload, already its own JSON form), in a few C-level passes; ``False`` sends each
    through ``is_plain_json``."""
    if set(map(type, payloads)) != {dict}:
        return False
    if not set(map(type, chain.from_iterable(payloads))) <= _TEXT:
        return False
    return set(map(type, chain.from_iterable(map(dict.values, payloads)))) <= _SCALARS


def _all_plainly_valid(requests: Sequence[EnqueueRequest]) -> bool:
    """``_plainly_valid`` of every request of a batch, field by field over the whole batch."""
    if not requests:
        return True
    columns = list(zip(*map(_FIELDS, requests), strict=True))
    ids, run_ids, names, queues, keys, tenants, ckeys, attempts, run_ats, delays = columns
    if not (
        _texts_storable(names, _TEXT)
        and _texts_storable(queues, _TEXT)
        and _texts_storable(keys, _TEXT)
        and _texts_storable(tenants, _TEXT_OR_NONE)
        and _texts_storable(ckeys, _TEXT_OR_NONE)
        and set(map(type, ids)) == _TEXT
        and set(map(type, run_ids)) == _TEXT
        and _UUID_LIST.fullmatch(",".join(ids)) is not None
        and _UUID_LIST.fullmatch(",".join(run_ids)) is not None
        and set(map(type, attempts)) == _INT
        and min(attempts) >= 1
        and set(map(type, run_ats)) <= _INT_OR_NONE
        and set(map(type, delays)) <= _INT_OR_NONE
    ):
        return False
    return max(map(len, set(queues))) <= MAX_QUEUE_BYTES // 4


def _write_chunk(
    columns: Sequence[Sequence[Any]],
    forms: Sequence[Any],
    traces: Sequence[Mapping[str, str] | None],
    names: Sequence[tuple[str, str]],
) -> dict[str, str | None]:
    """A chunk as the typed arrays `enqueue_many_input` in sql/queries/ reads: ``columns`` in
    ``_COLUMNS`` order, one array literal each in input order (joined in C, parsed by the
    server's array input), and the payloads as ONE json array: one json.dumps here, one parse on
    the server. ``names`` (id, job name) per row name a payload that holds a NUL."""
    try:
        payloads = to_json(forms if type(forms) is list else list(forms)).decode()  # in Rust
    except ValueError:  # a lone surrogate: the text Postgres refuses, naming the statement
        payloads = json.dumps(list(forms), separators=(",", ":"), ensure_ascii=False)
    if "\\u0000" in payloads:  # rare: find the payload holding a NUL, if any, and name it
        for (id, name), form in zip(names, forms, strict=True):
            json_text(form, what=f"the payload of job {id} ({name})")
    params: dict[str, str | None] = {
        name: write(values) for (name, write), values in zip(_COLUMNS, columns, strict=True)
    }
    params["payloads"] = payloads
    if traces.count(None) != len(traces):
        params["trace_contexts"] = array_text(list(map(_trace_text, traces)))
    else:
        params["trace_contexts"] = None
    return params


def _columns_plainly_valid(columns: EnqueueColumns) -> bool:
    """``_all_plainly_valid`` of ``columns.requests()`` without building them: the job's own
    fields once, the per-row columns in a few C-level passes."""
    if not columns.ids:
        return True
    first = EnqueueRequest(
        columns.ids[0],
        columns.run_ids[0],
        columns.name,
        columns.queue,
        None,
        columns.idempotency_keys[0],
        columns.max_attempts,
        columns.tenant_ids[0],
        None,
        columns.delay_ms,
        columns.run_at_ms,
    )
    ids, run_ids = columns.ids, columns.run_ids
    return (
        _plainly_valid(first)
        and _texts_storable(columns.idempotency_keys, _TEXT)
        and _texts_storable(columns.tenant_ids, _TEXT_OR_NONE)
        and set(map(type, ids)) == _TEXT
        and set(map(type, run_ids)) == _TEXT
        and _UUID_LIST.fullmatch(",".join(ids)) is not None
        and _UUID_LIST.fullmatch(",".join(run_ids)) is not None
    )


def _columns_distinct(columns: EnqueueColumns) -> bool:
    """No two rows share a live key (the job's name, the tenant, the key) or an id."""
    size = len(columns.ids)
    tenants = columns.tenant_ids
    if tenants.count(tenants[0]) == size:  # one tenant (or none) for the whole batch
        keys_distinct = len(set(columns.idempotency_keys)) == size
    else:
        keys_distinct = len(set(zip(tenants, columns.idempotency_keys, strict=True))) == size
    return keys_distinct and len(set(columns.ids)) == size


PARALLEL_CHUNKS: Final = 2
"""How many chunks of one ``enqueue_many`` of distinct keys go at once, each on its own pool
connection and in its own commit (on a pool of at least ``4 * PARALLEL_CHUNKS``; inside the
caller's transaction they go one after another). Two statements keep both of a small server's
cores busy while the client waits: ``enqueue_many`` of 10,000 rows measured ~1.4x faster than
chunk after chunk (docs/performance.md, "#16 enqueue")."""

T = TypeVar("T")


async def _in_lanes(send: Callable[[int], Awaitable[T]], count: int, lanes: int) -> list[T]:
    """``[await send(k) for k in range(count)]``, ``lanes`` at a time, answers in ``k`` order.
    The first failure cancels the rest (what was not sent is never sent) and is raised."""
    out: list[Any] = [None] * count
    todo = iter(range(count))

    async def lane() -> None:
        for k in todo:
            out[k] = await send(k)

    running = [asyncio.ensure_future(lane()) for _ in range(min(lanes, count))]
    try:
        await asyncio.gather(*running)
    except BaseException:
        for task in running:
            task.cancel()
        await asyncio.gather(*running, return_exceptions=True)
        raise
    return out


class Enqueuer:
    """The enqueue half of the driver: ``enqueue`` and ``enqueue_many`` over one database."""

    def __init__(self, db: Database, *, window_s: float = WAKE_INTERVAL_S) -> None:
        self._db = db
        self._window_s = window_s
        self._woken: dict[str, float] = {}
        self._probing: dict[str, tuple[float, float]] = {}  # job name -> (until, hold), monotonic
        self._owed: dict[str, tuple[asyncio.AbstractEventLoop, asyncio.TimerHandle]] = {}
        self._trailing: set[asyncio.Task[None]] = set()
        self._blind_order: tuple[str, ...] | None = None
        # the blind single INSERT's positional parameters (`_blind_send`): the driver's own pool
        self._lean = db is not None and db.owns_pool

    def lanes(self, chunks: int, conn: Conn | None) -> int:
        """How many chunks of one batch go at once: ``PARALLEL_CHUNKS`` on a pool large enough,
        one inside the caller's transaction."""
        db = self._db
        if conn is not None or chunks < 2 or db is None or db.max_size < 4 * PARALLEL_CHUNKS:
            return 1
        return PARALLEL_CHUNKS

    def wake_due(self, queue: str) -> bool:
        """Whether this enqueue should carry the queue's notification (one per window)."""
        now = time.monotonic()
        last = self._woken.get(queue)
        if last is not None and now - last < self._window_s:
            return False
        if len(self._woken) > 10_000:
            self._woken.clear()
        self._woken[queue] = now
        owed = self._owed.pop(queue, None)
        if owed is not None:
            # this enqueue starts after the silent ones committed: its notification, delivered at
            # its own commit, announces them too
            owed[1].cancel()
        return True

    def blind(self, names: set[str]) -> bool:
        """Whether a batch of these jobs goes without the probe of the live keys: none of them
        met a live key within its hold (``PROBE_HOLD_S``)."""
        probing = self._probing
        if not probing:
            return True
        now = time.monotonic()
        return not any(name in probing and probing[name][0] > now for name in names)

    def met_live(self, names: set[str], *, again: bool) -> None:
        """A batch of these jobs met a live key or a taken id: probe their batches for a hold,
        doubled when a blind batch failed on it (``again``), renewed when a probed one saw it."""
        probing = self._probing
        if len(probing) > 10_000:
            probing.clear()
        now = time.monotonic()
        for name in sorted(names):
            hold = probing.get(name, (0.0, 0.0))[1]
            if again or not hold:
                hold = min(max(2 * hold, PROBE_HOLD_S), PROBE_HOLD_MAX_S)
            if again:
                log_event("jobs.enqueue.probing", job=name, hold_s=hold)
            probing[name] = (now + hold, hold)

    def owe(self, queue: str) -> None:
        """A job of ``queue`` committed without a notification: unless an enqueue of the queue
        notifies first, send one trailing notification half a window after the window's end
        (one covers every job committed before it is sent)."""
        loop = asyncio.get_running_loop()
        owed = self._owed.get(queue)
        if owed is not None and owed[0] is loop and not owed[1].cancelled():
            return  # one is scheduled, and it is sent after this commit
        last = self._woken.get(queue, 0.0)
        delay = max(0.0, last + TRAILING_FACTOR * self._window_s - time.monotonic())
        self._owed[queue] = (loop, loop.call_later(delay, self._notify_owed, queue))

    def _notify_owed(self, queue: str) -> None:
        self._owed.pop(queue, None)
        self._woken[queue] = time.monotonic()  # the window restarts with this notification
        task = asyncio.ensure_future(self._send_notify(queue))
        self._trailing.add(task)
        task.add_done_callback(self._trailing.discard)

    async def _send_notify(self, queue: str) -> None:
        # a hint: a failure costs the wait until the workers' next poll, never a job
        with contextlib.suppress(Exception):
            await self._db.fetchone(
                "wake_probe", {"token": queue}, what=f"the trailing wake of queue {queue!r}"
            )

    async def close(self) -> None:
        """Send the trailing notifications still owed (the jobs committed), then stop."""
        owed, self._owed = self._owed, {}
        loop = asyncio.get_running_loop()
        for queue, (owner, handle) in owed.items():
            handle.cancel()
            if owner is loop:
                self._notify_owed(queue)
        if self._trailing:
            await asyncio.gather(*self._trailing, return_exceptions=True)

    @staticmethod
    def checked(req: EnqueueRequest) -> Any:
        """Check one request (nothing is written); answers its payload in core's JSON form."""
        if not _plainly_valid(req):
            Enqueuer.refuse(req)
        if is_plain_json(req.payload):
            return req.payload
        return json_form(req.payload, what=f"the payload of job {req.id} ({req.name})")

    @staticmethod
    def refuse(req: EnqueueRequest) -> None:
        """The slow path of ``_checked``: raise the refusal naming what is wrong."""
        who = f"enqueue of job {req.id!r} ({req.name!r})"
        for field_name in ("id", "run_id", "name", "queue", "idempotency_key"):
            check_text(getattr(req, field_name), what=f"{who}: {field_name}")
        check_uuid(req.id, what=f"{who}: id")
        check_uuid(req.run_id, what=f"{who}: run_id")
        size = len(req.queue.encode("utf-8", "surrogatepass"))
        if size > MAX_QUEUE_BYTES:
            raise XError(
                "X_INVARIANT",
                f"{who}: the queue name {req.queue[:40]!r}... is {size} bytes; it rides the "
                f"queue's NOTIFY payload, which holds under 8000",
                fix="name the queue in a few words (queue='billing')",
            )
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

    def params(self, req: EnqueueRequest) -> dict[str, Any]:
        form = self.checked(req)
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
            "trace_context": _trace_text(req.trace_context),
        }

    async def enqueue(self, request: EnqueueRequest, conn: Conn | None) -> EnqueueResult:
        """One statement, one commit (or none: on ``conn`` the caller commits); a deduped
        enqueue reads the row that won in a second. On the pool, a job whose enqueues met no
        held key lately is inserted blind (``enqueue_blind``); a unique violation sends it
        through ``enqueue`` (ON CONFLICT), as every enqueue of that job for a hold."""
        if conn is None and self._lean and (not self._probing or self.blind({request.name})):
            # the common case: on the pool, no job met a held key lately: the blind INSERT, its
            # parameters written straight from the request in the statement's order
            send = self._blind_send(request)
            if send is not None:
                notify = self.wake_due(request.queue)
                values, at = send
                values[at] = "t" if notify else "f"
                try:
                    row = await self._db.fetchone(
                        "enqueue_blind", tuple(values), what=f"enqueue of job {request.id}"
                    )
                except pg_errors.UniqueViolation:
                    self.met_live({request.name}, again=True)
                    return await self._enqueue_checked(request, conn, notify)
                assert row is not None  # a plain INSERT ... RETURNING answers its row
                if not notify:
                    self.owe(request.queue)  # committed (autocommit) without its notification
                return EnqueueResult(row[0], row[1], False)
        return await self._enqueue_checked(
            request, conn, conn is not None or self.wake_due(request.queue)
        )

    def _blind_send(self, req: EnqueueRequest) -> tuple[list[str | None], int] | None:
        """The parameters of `enqueue_blind` as text in its placeholders' order (and where the
        notify goes), straight from a request that passes the checks' fast path with a plain
        payload; ``None`` sends it through ``params`` (the checks that name what is wrong)."""
        if not _plainly_valid(req):
            return None
        payload = req.payload
        if not is_plain_json(payload):
            return None
        try:
            text = to_json(payload).decode()
        except ValueError:  # a lone surrogate: the checks name it
            return None
        if "\\u0000" in text:
            return None
        order = self._blind_order
        if order is None:
            order = self._blind_order = self._db.lean_order("enqueue_blind")
        run_at, delay = req.run_at_ms, req.delay_ms
        fields: dict[str, str | None] = {
            "id": req.id,
            "run_id": req.run_id,
            "name": req.name,
            "queue": req.queue,
            "payload": text,
            "idempotency_key": req.idempotency_key,
            "tenant_id": req.tenant_id,
            "concurrency_key": req.concurrency_key,
            "max_attempts": str(req.max_attempts),
            "run_at_ms": None if run_at is None else str(run_at),
            "delay_ms": None if delay is None else str(delay),
            "trace_context": _trace_text(req.trace_context),
            "notify": None,
        }
        return [fields[k] for k in order], order.index("notify")

    async def _enqueue_checked(
        self, request: EnqueueRequest, conn: Conn | None, notify: bool
    ) -> EnqueueResult:
        params = self.params(request)
        params["notify"] = notify
        what = f"enqueue of job {request.id}"
        names = {request.name}
        if conn is None and self.blind(names):
            try:
                row = await self._db.fetchone("enqueue_blind", params, what=what)
            except pg_errors.UniqueViolation:
                # the key or the id is taken: nothing was written; this job's enqueues go
                # through ON CONFLICT for a while
                self.met_live(names, again=True)
            else:
                assert row is not None  # a plain INSERT ... RETURNING answers its row
                if not notify:
                    self.owe(request.queue)  # committed (autocommit) without its notification
                return EnqueueResult(id=row[0], run_id=row[1], deduped=False)
        for _ in range(3):
            row = await self._db.fetchone("enqueue", params, conn=conn, what=what)
            if row is not None:
                if not notify:
                    self.owe(request.queue)  # committed (autocommit) without its notification
                return EnqueueResult(id=row[0], run_id=row[1], deduped=False)
            if conn is None:
                self.met_live(names, again=False)  # still meeting held keys: keep the hold
            won = await self._db.fetchone("enqueue_holder", params, conn=conn, what=what)
            if won is not None:
                return EnqueueResult(id=won[0], run_id=won[1], deduped=True)
            # The row that won finished meanwhile, or committed after this transaction's
            # snapshot: ask again.
        raise XError(
            "X_DRIVER_UNAVAILABLE",
            f"enqueue of job {request.id}: its key is held by a row this transaction cannot see",
            fix="retry the enqueue (in a READ COMMITTED transaction, or outside one)",
        )

    async def enqueue_many(
        self, requests: Sequence[EnqueueRequest], conn: Conn | None
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
        if _all_plainly_valid(requests):
            forms = [req.payload for req in requests]
            if not _flat_plain(forms):
                forms = [
                    req.payload if is_plain_json(req.payload) else self.checked(req)
                    for req in requests
                ]
        else:  # one of them is not: the checks one by one name it
            forms = [self.checked(req) for req in requests]
        results: dict[int, EnqueueResult] = {}
        pending = list(range(len(requests)))
        silent: set[str] = set()
        try:
            for _ in range(ENQUEUE_ROUNDS):
                pending = await self._enqueue_round(requests, forms, pending, results, conn, silent)
                if not pending:
                    break
            else:
                raise XError(
                    "X_DRIVER_UNAVAILABLE",
                    f"enqueue_many: {len(pending)} keys are held by rows this transaction cannot "
                    "see",
                    fix="retry the enqueue (in a READ COMMITTED transaction, or outside one)",
                )
        finally:
            for queue in silent:  # chunks that committed without their notification
                self.owe(queue)
        return [results[i] for i in range(len(requests))]

    async def enqueue_columns(
        self, columns: EnqueueColumns, conn: Conn | None
    ) -> list[EnqueueResult]:
        """``enqueue_many(columns.requests())`` without the rows: when every row passes the
        batch-wide checks and no two share a live key or an id, each chunk's statement is written
        straight from the columns. Anything else — a check that must name its row, a key given
        twice — goes through ``enqueue_many``, whose answer is the same."""
        size = len(columns)
        if not size:
            return []
        if (
            size > MAX_ENQUEUE_BATCH
            or not _columns_plainly_valid(columns)
            or not _columns_distinct(columns)
        ):
            return await self.enqueue_many(columns.requests(), conn)
        payloads = columns.payloads
        forms: Sequence[Any] = payloads
        if not _flat_plain(payloads):
            name = columns.name
            forms = [
                form
                if is_plain_json(form)
                else json_form(form, what=f"the payload of job {id} ({name})")
                for id, form in zip(columns.ids, payloads, strict=True)
            ]
        # every chunk's parameters are built (every row checked) before the first statement
        bounds = [(at, min(at + ENQUEUE_CHUNK, size)) for at in range(0, size, ENQUEUE_CHUNK)]
        sends = [self.columns_chunk_params(columns, forms, a, b) for a, b in bounds]
        ids, run_ids = columns.ids, columns.run_ids
        results: list[EnqueueResult] = []
        unseen: list[int] = []  # rows whose key's holder committed after the statement began
        silent: set[str] = set()
        try:
            queues, names = {columns.queue}, {columns.name}

            async def send_chunk(k: int) -> dict[int, tuple[str, str, bool] | None]:
                start, stop = bounds[k]
                return await self._enqueue_chunk(
                    sends[k], stop - start, queues, names, conn, silent
                )

            lanes = self.lanes(len(bounds), conn)
            if lanes > 1:
                losts = await _in_lanes(send_chunk, len(bounds), lanes)
            else:
                losts = [await send_chunk(k) for k in range(len(bounds))]
            for (start, stop), lost in zip(bounds, losts, strict=True):
                if not lost:  # every row of the chunk was inserted
                    results.extend(
                        map(EnqueueResult, ids[start:stop], run_ids[start:stop], repeat(False))
                    )
                    continue
                for position, i in enumerate(range(start, stop), start=1):
                    outcome = lost.get(position, _INSERTED)
                    if outcome is _INSERTED:
                        results.append(EnqueueResult(ids[i], run_ids[i], False))
                    elif outcome is None:
                        unseen.append(i)
                        results.append(EnqueueResult(ids[i], run_ids[i], False))  # replaced below
                    else:
                        results.append(EnqueueResult(outcome[0], outcome[1], True))
        finally:
            for queue in silent:  # chunks that committed without their notification
                self.owe(queue)
        if unseen:
            rows = columns.requests()
            again = await self.enqueue_many([rows[i] for i in unseen], conn)
            for i, result in zip(unseen, again, strict=True):
                results[i] = result
        return results

    async def _enqueue_round(
        self,
        requests: Sequence[EnqueueRequest],
        forms: list[Any],
        pending: list[int],
        results: dict[int, EnqueueResult],
        conn: Conn | None,
        silent: set[str],
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
        scan = pending
        sent = [requests[i] for i in pending]
        if len(set(map(_SCOPE, sent))) == len(sent) == len(set(map(_ID, sent))):
            # no two share a live key or an id (a tenant is never "": None is the tenant-less
            # scope, as "" is below): every input is its own winner
            scan, winners = [], list(pending)
        for i in scan:
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
        # every chunk's parameters are built (every input checked) before the first statement
        chunks = [winners[at : at + ENQUEUE_CHUNK] for at in range(0, len(winners), ENQUEUE_CHUNK)]
        sends = [self.chunk_params([requests[i] for i in c], [forms[i] for i in c]) for c in chunks]
        if refer:
            self.chunk_params([requests[i] for i in refer], [forms[i] for i in refer])
        holds: dict[int, bool] = {}
        later: list[int] = []
        for chunk, send in zip(chunks, sends, strict=True):
            queues = {requests[i].queue for i in chunk}
            names = {requests[i].name for i in chunk}
            lost = await self._enqueue_chunk(send, len(chunk), queues, names, conn, silent)
            if not lost and not refer:  # every input of the chunk was inserted
                for i in chunk:
                    req = requests[i]
                    results[i] = EnqueueResult(req.id, req.run_id, False)
                continue
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
    def chunk_params(chunk: list[EnqueueRequest], forms: list[Any]) -> dict[str, str | None]:
        """A chunk of rows as the parameters of `enqueue_many_input` (see ``_write_chunk``)."""
        columns = list(zip(*map(_FIELDS, chunk), strict=True)) or [()] * len(_COLUMNS)
        return _write_chunk(
            columns, forms, [r.trace_context for r in chunk], [(r.id, r.name) for r in chunk]
        )

    @staticmethod
    def columns_chunk_params(
        columns: EnqueueColumns, forms: Sequence[Any], start: int, stop: int
    ) -> dict[str, str | None]:
        """Rows ``start:stop`` of ``columns`` as the parameters of `enqueue_many_input`; the
        job's own fields (one value for every row) are repeated, not looked up per row."""
        ids = columns.ids[start:stop]
        size = len(ids)
        written = (
            ids,
            columns.run_ids[start:stop],
            [columns.name] * size,
            [columns.queue] * size,
            columns.idempotency_keys[start:stop],
            columns.tenant_ids[start:stop],
            [None] * size,
            [columns.max_attempts] * size,
            [columns.run_at_ms] * size,
            [columns.delay_ms] * size,
        )
        return _write_chunk(
            written,
            forms[start:stop],
            [columns.trace_context] * size,
            [(id, columns.name) for id in ids],
        )

    async def _enqueue_chunk(
        self,
        send: dict[str, str | None],
        size: int,
        queues: set[str],
        names: set[str],
        conn: Conn | None,
        silent: set[str],
    ) -> dict[int, tuple[str, str, bool] | None]:
        """One statement for one chunk (of the jobs ``names``, in ``queues``): on the caller's
        connection the conflict-tolerant form; on the pool the blind INSERT unless these jobs met
        a live key lately (then the probing one), each falling back to the conflict-tolerant
        form on a unique violation. Answers, by 1-based position, the inputs NOT inserted:
        ``(id, run_id, holds_key)`` of the row that won (``holds_key``: it is the live holder of
        the input's key, not only its id), or ``None`` when it is not visible yet."""
        woken = [self.wake_due(q) for q in queues]  # every queue's slot, not the first only
        notify = conn is not None or any(woken)
        params = {**send, "notify": notify}
        what = f"enqueue_many of {size} jobs"
        if conn is not None:
            rows = await self._db.fetchall("enqueue_many", params, conn=conn, what=what)
        elif self.blind(names):
            try:
                rows = await self._db.fetchall("enqueue_many_blind", params, what=what)
            except pg_errors.UniqueViolation:
                # a key or id is taken (or republished): the statement changed nothing; the
                # conflict-tolerant form settles it, and these jobs' batches probe for a while
                self.met_live(names, again=True)
                rows = await self._db.fetchall("enqueue_many", params, what=what)
        else:
            try:
                rows = await self._db.fetchall("enqueue_many_fresh", params, what=what)
            except pg_errors.UniqueViolation:
                # a key or id was taken meanwhile (or republished): as above
                rows = await self._db.fetchall("enqueue_many", params, what=what)
            if len(rows) > 1:  # it still meets live keys: keep probing
                self.met_live(names, again=False)
        if not notify:
            silent |= queues  # committed without their notification
        return {int(r[0]): (None if r[1] is None else (r[1], r[2], r[5])) for r in rows if r[0]}
