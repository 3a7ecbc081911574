"""``SettleWatch`` over Postgres: one LISTEN session per driver on the settle channel
(``x_settled.<schema>``), opened by the first ``job.result()`` wait. The final settles (ack;
nack dead / failed) notify it with the job's id at commit; each notification resolves that id's
waiters. A session that drops resolves every waiter (they re-read the row) and re-dials."""

from __future__ import annotations

import asyncio
import contextlib
from typing import TYPE_CHECKING

import psycopg
from psycopg.conninfo import conninfo_to_dict, make_conninfo

from ultimat3.core import XError, log_event

if TYPE_CHECKING:
    from ultimat3.jobs.postgres._db import Database

_KEEPALIVES = {"keepalives": "1", "keepalives_idle": "10", "keepalives_interval": "5"}


class PostgresSettleWatch:
    """The driver's settle LISTEN session and its waiters."""

    def __init__(self, db: Database) -> None:
        self._db = db
        self._waiters: dict[str, list[asyncio.Future[None]]] = {}
        self._task: asyncio.Task[None] | None = None
        self._listening: asyncio.Event | None = None
        self._conn: psycopg.AsyncConnection[object] | None = None
        self.sessions = 0

    async def watch(self, job_id: str) -> asyncio.Future[None]:
        loop = asyncio.get_running_loop()
        if self._task is None or self._task.done():
            self._listening = asyncio.Event()
            self._task = loop.create_task(self._run(), name="ultimat3.settle-watch")
        assert self._listening is not None
        try:
            await asyncio.wait_for(self._listening.wait(), timeout=10)
        except TimeoutError as exc:
            raise XError(
                "X_DRIVER_UNAVAILABLE",
                "job.result: the settle LISTEN session did not open within 10 s",
                fix="check DATABASE_URL answers; x db status",
            ) from exc
        future: asyncio.Future[None] = loop.create_future()
        self._waiters.setdefault(job_id, []).append(future)
        return future

    def unwatch(self, job_id: str, future: asyncio.Future[None]) -> None:
        waiters = self._waiters.get(job_id)
        if waiters is not None and future in waiters:
            waiters.remove(future)
            if not waiters:
                del self._waiters[job_id]

    def _resolve(self, job_id: str) -> None:
        for future in self._waiters.pop(job_id, ()):
            if not future.done():
                future.set_result(None)

    def _resolve_all(self) -> None:
        for job_id in list(self._waiters):
            self._resolve(job_id)

    async def _run(self) -> None:
        backoff = 0.05
        listening = self._listening
        assert listening is not None
        while True:
            try:
                dsn = self._db.conninfo()
                params = conninfo_to_dict(dsn)
                extra = {k: v for k, v in _KEEPALIVES.items() if k not in params}
                conn = await psycopg.AsyncConnection.connect(
                    make_conninfo(dsn, **extra), autocommit=True
                )
                self._conn = conn
                await conn.execute(self._db.q["settle_listen"])
                self.sessions += 1
                if self.sessions > 1:
                    self._resolve_all()  # what the lost session missed: every waiter re-reads
                listening.set()
                backoff = 0.05
                async for note in conn.notifies():
                    self._resolve(note.payload)
            except asyncio.CancelledError:
                raise
            except (psycopg.Error, OSError, XError) as exc:
                log_event(
                    "jobs.wake.lost",
                    level="warning",
                    channel="settle",
                    error=str(exc).splitlines()[0][:200] if str(exc) else type(exc).__name__,
                )
            finally:
                await self._close()
            self._resolve_all()
            await asyncio.sleep(backoff)
            backoff = min(backoff * 2, 5.0)

    async def _close(self) -> None:
        conn, self._conn = self._conn, None
        if conn is not None:
            with contextlib.suppress(Exception):
                await conn.close()

    async def stop(self) -> None:
        task, self._task = self._task, None
        if task is not None:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task
        await self._close()
        self._resolve_all()
