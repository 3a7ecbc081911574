"""The outbox relay's wake: a LISTEN session on the stage's channel, so an idle relay passes the
moment a staged enqueue commits instead of at its next poll.

``outbox_stage`` carries ``pg_notify(outbox_channel(schema), '')`` (transactional: delivered
when the app's transaction commits, never on a rollback). ``OutboxWake`` holds one session of its
own on the OUTBOX's database — which need not be the job driver's (the outbox exists for an app
database the driver cannot join), and ``x relay`` runs without a worker — calls ``on_wake()`` for
every notification, re-dials a lost session (then wakes once: a catch-up pass for what it
missed), and proves itself: a probe sent through the store's pool must come back on the session
(``jobs.wake.live``). Until it does ``proven`` is False, and the relay keeps its 2 s idle ceiling
(5 s while proven). A session that stops answering probes after it was proven is re-dialled.

The poll is the guarantee: a notification is lost with the session that would have carried it.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Callable
from typing import Final

import psycopg
from psycopg.conninfo import conninfo_to_dict, make_conninfo

from ultimat3.core import XError, log_event, new_id
from ultimat3.jobs.postgres._db import Database
from ultimat3.jobs.postgres._sql import outbox_channel

PROBE_PREFIX: Final = "\x01x-probe:"

_KEEPALIVES: Final = {
    "keepalives": "1",
    "keepalives_idle": "10",
    "keepalives_interval": "5",
    "keepalives_count": "3",
}


class OutboxWake:
    """The relay's LISTEN session; made by ``PostgresOutboxStore.start_wake(on_wake)``."""

    def __init__(
        self,
        db: Database,
        on_wake: Callable[[], object],
        *,
        probe_timeout_s: float = 2.0,
        probe_every_s: float = 30.0,
        redial_max_s: float = 5.0,
    ) -> None:
        self._db = db
        self._on_wake = on_wake
        self.channel: Final = outbox_channel(db.schema)
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
        self.probes = 0
        """How many probes were sent (one a ``probe_every_s`` while proven)."""
        self._conn: psycopg.AsyncConnection[object] | None = None

    def __repr__(self) -> str:
        return f"OutboxWake(channel={self.channel!r}, proven={self.proven})"

    @property
    def backend_pid(self) -> int | None:
        return None if self._conn is None else self._conn.info.backend_pid

    async def start(self) -> None:
        """Start listening; returns once the first session listens (or its dial failed)."""
        if self._task is not None:
            return
        self._stopping = False
        self._task = asyncio.create_task(self._run(), name=f"ultimat3.outbox-wake:{self.channel}")
        with contextlib.suppress(asyncio.TimeoutError):
            await asyncio.wait_for(self._listening.wait(), timeout=self._probe_timeout_s * 2)

    async def stop(self) -> None:
        self._stopping = True
        task, self._task = self._task, None
        if task is not None:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task
        await self._close()

    async def wait_proven(self, timeout_s: float) -> bool:
        with contextlib.suppress(asyncio.TimeoutError):
            await asyncio.wait_for(self._proven_event.wait(), timeout=timeout_s)
        return self.proven

    async def _close(self) -> None:
        conn, self._conn = self._conn, None
        if conn is not None:
            with contextlib.suppress(Exception):
                await conn.close()

    def _set_proven(self, value: bool) -> None:
        self.proven = value
        if value:
            self._proven_event.set()
        else:
            self._proven_event.clear()

    async def _run(self) -> None:
        backoff = 0.05
        while not self._stopping:
            try:
                dsn = self._db.conninfo()
                extra = {k: v for k, v in _KEEPALIVES.items() if k not in conninfo_to_dict(dsn)}
                conn = await psycopg.AsyncConnection.connect(
                    make_conninfo(dsn, **extra), autocommit=True
                )
                self._conn = conn
                await conn.execute(self._db.q["outbox_listen"])
                self.sessions += 1
                self._listening.set()
                backoff = 0.05
                if self.sessions > 1:
                    self._on_wake()  # the catch-up pass for what the lost session missed
                await self._session(conn)
            except asyncio.CancelledError:
                raise
            except (psycopg.Error, XError, OSError) as exc:
                self._listening.set()
                log_event(
                    "jobs.wake.lost",
                    level="warning",
                    channel=self.channel,
                    error=str(exc).splitlines()[0][:200] if str(exc) else type(exc).__name__,
                )
            finally:
                self._set_proven(False)
                await self._close()
            if not self._stopping:
                await asyncio.sleep(backoff)
                backoff = min(backoff * 2, self._redial_max_s)

    async def _probe(self) -> str:
        token = PROBE_PREFIX + new_id()
        self.probes += 1
        await self._db.fetchone("outbox_probe", {"token": token}, what="the outbox wake's probe")
        return token

    async def _session(self, conn: psycopg.AsyncConnection[object]) -> None:
        """Serve one LISTEN session; returns (or raises) when it is judged lost."""
        pending: str | None = await self._probe()
        deadline = time.monotonic() + self._probe_timeout_s
        next_probe = 0.0
        answered_here = False
        unverified_logged = False
        while not self._stopping:
            async for note in conn.notifies(timeout=0.25):
                payload = note.payload
                if payload.startswith(PROBE_PREFIX):
                    if payload == pending:
                        pending = None
                        next_probe = time.monotonic() + self._probe_every_s
                        if not self.proven:
                            log_event("jobs.wake.live", channel=self.channel)
                        answered_here = True
                        self._set_proven(True)
                    continue
                self._on_wake()
            now = time.monotonic()
            if pending is not None and now > deadline:
                if answered_here:
                    raise XError(
                        "X_DRIVER_UNAVAILABLE",
                        f"outbox wake: the LISTEN session on {self.channel!r} stopped answering "
                        "its probe (half-open); re-dialling",
                    )
                if not unverified_logged:
                    log_event(
                        "jobs.wake.unverified",
                        channel=self.channel,
                        fix="give the relay a direct or session-pooled database URL (PgBouncer "
                        "in transaction mode delivers no notification)",
                    )
                    unverified_logged = True
                self._set_proven(False)
                pending = None
                next_probe = now + self._probe_every_s
            if pending is None and now >= next_probe:
                pending = await self._probe()
                deadline = time.monotonic() + self._probe_timeout_s
