"""A LISTEN session of its own, kept alive and proven: what the queue wake (``_wake.py``) and
the outbox relay's wake (``_outbox_wake.py``) share.

The session is dialled on a connection of its own (keepalives on unless the DSN sets them),
LISTENs, and proves itself: a probe sent through the POOL (the NOTIFY of ``_probe_statement``)
must come back on the session (``jobs.wake.live``). Until one does ``proven`` stays False; a
probe that never comes back logs ``jobs.wake.unverified`` once (PgBouncer in transaction mode
delivers no notification), and a session that stops answering after it was proven (half-open)
is re-dialled. A lost session is logged ``jobs.wake.lost`` and re-dialled with a doubling pause
(50 ms up to ``redial_max_s``); after a re-dial ``_redialled()`` runs (the subclass's catch-up
pass for what the lost session missed). Every other notification goes to ``_note(payload)``.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from typing import ClassVar, Final

import psycopg
from psycopg.conninfo import conninfo_to_dict, make_conninfo

from ultimat3.core import XError, log_event, new_id
from ultimat3.jobs.postgres._db import Database

PROBE_PREFIX: Final = "\x01x-probe:"
"""A probe's payload starts so (no queue is named that way); other processes' probes are
ignored."""

_KEEPALIVES: Final = {
    "keepalives": "1",
    "keepalives_idle": "10",
    "keepalives_interval": "5",
    "keepalives_count": "3",
}


class ListenSession:
    """The session's life: ``start()`` / ``stop()``, ``proven``, ``wait_proven``. A subclass
    names its statements and says what a notification and a re-dial do."""

    kind: ClassVar[str]
    """How logs and refusals name it ("queue wake", "outbox wake")."""
    listen_statement: ClassVar[str]
    probe_statement: ClassVar[str]
    unverified_fix: ClassVar[str]

    def __init__(
        self,
        db: Database,
        *,
        channel: str,
        dsn: str | None = None,
        probe_timeout_s: float = 2.0,
        probe_every_s: float = 30.0,
        redial_max_s: float = 5.0,
    ) -> None:
        if probe_timeout_s <= 0 or probe_every_s <= 0 or redial_max_s <= 0:
            raise XError(
                "X_CONFIG_INVALID",
                f"{self.kind}: probe_timeout_s {probe_timeout_s}, probe_every_s {probe_every_s} "
                f"and redial_max_s {redial_max_s} must all be positive",
            )
        self._db = db
        self._dsn = dsn
        self._channel = channel
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
        self._unverified_logged = False
        self._conn: psycopg.AsyncConnection[object] | None = None

    @property
    def channel(self) -> str:
        return self._channel

    def __repr__(self) -> str:
        return f"{type(self).__name__}(channel={self._channel!r}, proven={self.proven})"

    @property
    def backend_pid(self) -> int | None:
        """The server process of the current LISTEN session (``pg_stat_activity.pid``)."""
        return None if self._conn is None else self._conn.info.backend_pid

    async def start(self) -> None:
        """Start listening; returns once the first session listens (or its dial failed)."""
        if self._task is not None:
            return
        self._stopping = False
        name = f"ultimat3.{self.kind.replace(' ', '-')}:{self._channel}"
        self._task = asyncio.create_task(self._run(), name=name)
        with contextlib.suppress(asyncio.TimeoutError):
            await asyncio.wait_for(self._listening.wait(), timeout=self._probe_timeout_s * 2)

    async def stop(self) -> None:
        self._stopping = True
        task, self._task = self._task, None
        if task is not None:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task
        await self._stopped()
        await self._close()

    async def wait_proven(self, timeout_s: float) -> bool:
        """Wait until a probe came back (for tests and the boot's log); answers ``proven``."""
        with contextlib.suppress(asyncio.TimeoutError):
            await asyncio.wait_for(self._proven_event.wait(), timeout=timeout_s)
        return self.proven

    # --- what a subclass says -----------------------------------------------------------------

    def _note(self, payload: str) -> None:
        """A notification that is not a probe."""
        raise NotImplementedError

    def _redialled(self) -> None:
        """A session was re-dialled: the catch-up pass for what the lost one missed."""
        raise NotImplementedError

    async def _stopped(self) -> None:
        """``stop()``'s own work, before the session closes (nothing by default)."""

    # --- the loop -----------------------------------------------------------------------------

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
                dsn = self._dsn or self._db.conninfo()
                extra = {k: v for k, v in _KEEPALIVES.items() if k not in conninfo_to_dict(dsn)}
                conn = await psycopg.AsyncConnection.connect(
                    make_conninfo(dsn, **extra), autocommit=True
                )
                self._conn = conn
                await conn.execute(self._db.q[self.listen_statement])
                self.sessions += 1
                self._listening.set()
                backoff = 0.05
                if self.sessions > 1:
                    self._redialled()
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

    async def _probe(self) -> str:
        token = PROBE_PREFIX + new_id()
        self.probes += 1
        await self._db.fetchone(
            self.probe_statement, {"token": token}, what=f"the {self.kind}'s probe"
        )
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
                self._note(payload)
            now = time.monotonic()
            if pending is not None and now > deadline:
                if answered_here:
                    raise XError(
                        "X_DRIVER_UNAVAILABLE",
                        f"{self.kind}: the LISTEN session on {self._channel!r} stopped "
                        "answering its probe (half-open); re-dialling",
                    )
                if not self._unverified_logged:
                    log_event(
                        "jobs.wake.unverified", channel=self._channel, fix=self.unverified_fix
                    )
                    self._unverified_logged = True
                self._set_proven(False)
                pending = None
                next_probe = now + self._probe_every_s
            if pending is None and now >= next_probe:
                pending = await self._probe()
                deadline = time.monotonic() + self._probe_timeout_s
