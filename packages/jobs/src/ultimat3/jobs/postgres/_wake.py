"""The wake: one LISTEN session per worker process, so an idle worker passes the moment a job is
queued instead of at its next poll.

The enqueue statement carries ``pg_notify(channel, queue)`` (transactional: delivered when the row
commits, never on a rollback; at most one per queue per 250 ms from one process). ``QueueWake``
holds the LISTEN session, calls ``on_wake(queue)`` for every notification of a queue it serves,
re-dials a lost session (then wakes every queue once, a catch-up pass for what it missed), and
proves itself: a probe sent through the driver's POOL must come back on the session
(``jobs.wake.live``). If it does not — PgBouncer in transaction mode delivers no notification —
it logs ``jobs.wake.unverified`` once and ``proven`` stays False (keep the 2 s poll ceiling). A
session that stops answering probes after it was proven (half-open) is re-dialled.

The session also wakes event waiters: a publish notifies ``EVENT_NOTE<id>`` on the same channel
(on commit), and the session runs ``wake_published`` for it, making the runs that suspended on
that event after the publish statement (but before its commit) due now — then once more
``EVENT_RESWEEP_S`` later, for a run whose suspend was still committing at the first sweep. The
publish statement itself wakes the runs suspended before it.

The poll is the guarantee: a notification is lost with the session that would have carried it.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Callable, Collection
from typing import Final

import psycopg
from psycopg.conninfo import conninfo_to_dict, make_conninfo

from ultimat3.core import XError, log_event, new_id
from ultimat3.jobs.postgres._db import Database
from ultimat3.jobs.postgres._sql import EVENT_NOTE, wake_channel

PROBE_PREFIX: Final = "\x01x-probe:"
"""A probe's payload starts so (no queue is named that way); other processes' probes are
ignored."""

EVENT_RESWEEP_S: Final = 1.0
"""An event's waiters are woken when its commit is heard and once more this much later: a run
whose suspend was still committing at the first sweep (it read the bus before the event
committed) is caught by the second."""

_KEEPALIVES: Final = {
    "keepalives": "1",
    "keepalives_idle": "10",
    "keepalives_interval": "5",
    "keepalives_count": "3",
}


class QueueWake:
    """The LISTEN session of one worker process. Build it with :func:`start_queue_wake`."""

    def __init__(
        self,
        db: Database,
        on_wake: Callable[[str], object],
        *,
        queues: Collection[str] | None = None,
        dsn: str | None = None,
        probe_timeout_s: float = 2.0,
        probe_every_s: float = 30.0,
        redial_max_s: float = 5.0,
    ) -> None:
        if probe_timeout_s <= 0 or probe_every_s <= 0 or redial_max_s <= 0:
            raise XError(
                "X_CONFIG_INVALID",
                f"queue wake: probe_timeout_s {probe_timeout_s}, probe_every_s {probe_every_s} "
                f"and redial_max_s {redial_max_s} must all be positive",
            )
        self._db = db
        self._on_wake = on_wake
        self._queues = None if queues is None else frozenset(queues)
        self._dsn = dsn or self._db.conninfo()
        self._channel = wake_channel(db.schema)
        self._probe_timeout_s = probe_timeout_s
        self._probe_every_s = probe_every_s
        self._redial_max_s = redial_max_s
        self._task: asyncio.Task[None] | None = None
        self._stopping = False
        self._listening = asyncio.Event()
        self._proven_event = asyncio.Event()
        self.proven = False
        """True while the current session has answered a probe sent through the pool."""
        self.sessions = 0
        """How many LISTEN sessions were opened (1 + the re-dials)."""
        self._unverified_logged = False
        self._conn: psycopg.AsyncConnection[object] | None = None
        self._event_wakes: set[asyncio.Task[None]] = set()

    @property
    def channel(self) -> str:
        return self._channel

    def __repr__(self) -> str:
        return f"QueueWake(channel={self._channel!r}, proven={self.proven})"

    async def start(self) -> None:
        """Start listening; returns once the first session listens (or its dial failed)."""
        if self._task is not None:
            return
        self._stopping = False
        self._task = asyncio.create_task(self._run(), name=f"ultimat3.queue-wake:{self._channel}")
        with contextlib.suppress(asyncio.TimeoutError):
            await asyncio.wait_for(self._listening.wait(), timeout=self._probe_timeout_s * 2)

    async def stop(self) -> None:
        self._stopping = True
        task, self._task = self._task, None
        if task is not None:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task
        for wake in list(self._event_wakes):
            wake.cancel()
        if self._event_wakes:
            await asyncio.gather(*self._event_wakes, return_exceptions=True)
        await self._close()

    async def __aenter__(self) -> QueueWake:
        await self.start()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.stop()

    async def wait_proven(self, timeout_s: float) -> bool:
        """Wait until a probe came back (for tests and the boot's log); answers ``proven``."""
        with contextlib.suppress(asyncio.TimeoutError):
            await asyncio.wait_for(self._proven_event.wait(), timeout=timeout_s)
        return self.proven

    @property
    def backend_pid(self) -> int | None:
        """The server process of the current LISTEN session (``pg_stat_activity.pid``)."""
        return None if self._conn is None else self._conn.info.backend_pid

    # --- the loop ---------------------------------------------------------------------------

    async def _close(self) -> None:
        conn, self._conn = self._conn, None
        if conn is not None:
            with contextlib.suppress(Exception):
                await conn.close()

    def _wake(self, queue: str) -> None:
        if self._queues is None or queue in self._queues:
            self._on_wake(queue)

    def _wake_published(self, event_id: str) -> None:
        """An event committed: wake its late waiters, off the notification loop."""
        if not event_id.isdigit():
            return
        task = asyncio.create_task(self._run_wake_published(int(event_id)))
        self._event_wakes.add(task)
        task.add_done_callback(self._event_wakes.discard)

    async def _run_wake_published(self, event_id: int) -> None:
        try:
            for pause in (0.0, EVENT_RESWEEP_S):
                await asyncio.sleep(pause)
                await self._db.fetchone(
                    "wake_published",
                    {"id": event_id},
                    what=f"waking the waiters of event {event_id}",
                )
        except XError as exc:  # the 15-min backstop poll still resumes them
            log_event(
                "jobs.wake.event-failed",
                level="warning",
                channel=self._channel,
                event_id=event_id,
                error=exc.message[:200],
            )

    def _wake_all(self) -> None:
        for queue in sorted(self._queues) if self._queues is not None else ["*"]:
            self._on_wake(queue)

    async def _run(self) -> None:
        backoff = 0.05
        while not self._stopping:
            try:
                params = conninfo_to_dict(self._dsn)
                extra = {k: v for k, v in _KEEPALIVES.items() if k not in params}
                conn = await psycopg.AsyncConnection.connect(
                    make_conninfo(self._dsn, **extra), autocommit=True
                )
                self._conn = conn
                await conn.execute(self._db.q["wake_listen"])
                self.sessions += 1
                self._listening.set()
                backoff = 0.05
                if self.sessions > 1:
                    self._wake_all()  # the catch-up pass for what the lost session missed
                await self._session(conn)
            except asyncio.CancelledError:
                raise
            except (psycopg.Error, XError, OSError) as exc:
                self._listening.set()
                log_event(
                    "jobs.wake.lost",
                    level="warning",
                    channel=self._channel,
                    error=str(exc).splitlines()[0][:200] if str(exc) else type(exc).__name__,
                )
            finally:
                self._set_proven(False)
                await self._close()
            if not self._stopping:
                await asyncio.sleep(backoff)
                backoff = min(backoff * 2, self._redial_max_s)

    def _set_proven(self, value: bool) -> None:
        self.proven = value
        if value:
            self._proven_event.set()
        else:
            self._proven_event.clear()

    async def _probe(self) -> str:
        token = PROBE_PREFIX + new_id()
        await self._db.fetchone("wake_probe", {"token": token}, what="the queue wake's probe")
        return token

    async def _session(self, conn: psycopg.AsyncConnection[object]) -> None:
        """Serve one LISTEN session; returns (or raises) when it is judged lost."""
        pending: str | None = await self._probe()
        deadline = time.monotonic() + self._probe_timeout_s
        next_probe = 0.0
        answered_here = False
        while not self._stopping:
            async for note in conn.notifies(timeout=0.25):
                payload = note.payload
                if payload.startswith(PROBE_PREFIX):
                    if payload == pending:
                        pending = None
                        next_probe = time.monotonic() + self._probe_every_s
                        if not self.proven:
                            log_event("jobs.wake.live", channel=self._channel)
                        answered_here = True
                        self._unverified_logged = False
                        self._set_proven(True)
                    continue
                if payload.startswith(EVENT_NOTE):
                    self._wake_published(payload[len(EVENT_NOTE) :])
                    continue
                self._wake(payload)
            now = time.monotonic()
            if pending is not None and now > deadline:
                if answered_here:
                    raise XError(
                        "X_DRIVER_UNAVAILABLE",
                        f"queue wake: the LISTEN session on {self._channel!r} stopped answering "
                        "its probe (half-open); re-dialling",
                    )
                if not self._unverified_logged:
                    log_event(
                        "jobs.wake.unverified",
                        channel=self._channel,
                        fix="give the worker role a direct or session-pooled DATABASE_URL "
                        "(PgBouncer in transaction mode delivers no notification)",
                    )
                    self._unverified_logged = True
                self._set_proven(False)
                pending = None
                next_probe = now + self._probe_every_s
            if pending is None and now >= next_probe:
                pending = await self._probe()
                deadline = time.monotonic() + self._probe_timeout_s
