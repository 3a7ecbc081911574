"""The peers under test, each with its own recommended settings: PGQueuer, Oban for Python and
Procrastinate. Installed only in .x/bench-venv (tooling/bench/setup_peers.sh)."""

from __future__ import annotations

import asyncio
import contextlib
from dataclasses import dataclass
from typing import Any

from bench_base import Worker, on_body

# --- PGQueuer -------------------------------------------------------------------------------


@dataclass
class _PgqWorker:
    qm: Any
    task: asyncio.Task[None]
    conn: Any

    async def stop(self) -> None:
        self.qm.shutdown.set()
        try:
            await asyncio.wait_for(self.task, timeout=30)
        finally:
            await self.conn.close()


class PGQueuer:
    name = "pgqueuer"
    driver_lib = "asyncpg"
    remaining_sql = "SELECT count(*) FROM pgqueuer"
    settings = (
        "QueueManager.run defaults: batch_size=10, continuous mode, no max_concurrent_tasks; "
        "asyncpg driver (its recommended, fastest); acks buffered (JobStatusLogBuffer)"
    )

    def __init__(self) -> None:
        self._conn: Any = None
        self._q: Any = None

    async def install(self, dsn: str) -> None:
        import asyncpg
        from pgqueuer import AsyncpgDriver, Queries

        conn = await asyncpg.connect(dsn)
        try:
            await Queries(AsyncpgDriver(conn)).install()
        finally:
            await conn.close()

    async def open(self, dsn: str) -> None:
        import asyncpg
        from pgqueuer import AsyncpgDriver, Queries

        self._conn = await asyncpg.connect(dsn)
        self._q = Queries(AsyncpgDriver(self._conn))

    async def close(self) -> None:
        if self._conn is not None:
            await self._conn.close()
            self._conn = None

    async def enqueue_one(self, n: int) -> None:
        await self._q.enqueue("noop", str(n).encode())

    async def enqueue_bulk(self, ns: list[int]) -> None:
        await self._q.enqueue(["noop"] * len(ns), [str(n).encode() for n in ns], [0] * len(ns))

    async def start_worker(self, dsn: str) -> Worker:
        import asyncpg
        from pgqueuer import AsyncpgDriver, Queries, QueueManager

        conn = await asyncpg.connect(dsn)
        qm = QueueManager(Queries(AsyncpgDriver(conn)))

        @qm.entrypoint("noop")
        async def noop(job: Any) -> None:
            on_body(int(job.payload))

        task = asyncio.ensure_future(qm.run(batch_size=10))
        return _PgqWorker(qm, task, conn)


# --- Oban for Python ------------------------------------------------------------------------


def _oban_worker_class() -> Any:
    from oban import worker

    @worker(queue="default")
    class BenchNoop:
        async def process(self, job: Any) -> None:
            on_body(int(job.args["n"]))

    return BenchNoop


_OBAN_WORKER: Any = None


def _oban_noop() -> Any:
    global _OBAN_WORKER
    if _OBAN_WORKER is None:
        _OBAN_WORKER = _oban_worker_class()
    return _OBAN_WORKER


@dataclass
class _ObanWorker:
    oban: Any
    pool: Any

    async def stop(self) -> None:
        try:
            await self.oban.stop()
        finally:
            await self.pool.close()


class ObanPy:
    name = "oban"
    driver_lib = "psycopg"
    remaining_sql = "SELECT count(*) FROM oban_jobs WHERE state <> 'completed'"
    settings = (
        "Oban(queues={'default': 10}) as its README shows; stager/notifier defaults "
        "(LISTEN/NOTIFY on insert, 1 s stage interval); psycopg pool max_size=10; acks "
        "batched per fetch, one statement each"
    )

    def __init__(self) -> None:
        self._pool: Any = None
        self._oban: Any = None

    async def _pool_for(self, dsn: str) -> Any:
        from psycopg_pool import AsyncConnectionPool

        pool: Any = AsyncConnectionPool(dsn, min_size=1, max_size=10, open=False)
        await pool.open(wait=True)
        return pool

    async def install(self, dsn: str) -> None:
        import psycopg
        from oban.schema import install_sql

        async with await psycopg.AsyncConnection.connect(dsn, autocommit=True) as conn:
            await conn.execute(install_sql().encode())

    async def open(self, dsn: str) -> None:
        from oban import Oban

        self._pool = await self._pool_for(dsn)
        self._oban = Oban(pool=self._pool, name="bench-client")
        _oban_noop()

    async def close(self) -> None:
        if self._pool is not None:
            await self._pool.close()
            self._pool = None

    async def enqueue_one(self, n: int) -> None:
        await self._oban.enqueue(_oban_noop().new({"n": n}))

    async def enqueue_bulk(self, ns: list[int]) -> None:
        noop = _oban_noop()
        await self._oban.enqueue_many([noop.new({"n": n}) for n in ns])

    async def start_worker(self, dsn: str) -> Worker:
        from oban import Oban

        _oban_noop()
        pool = await self._pool_for(dsn)
        oban = Oban(pool=pool, queues={"default": 10})
        await oban.start()
        return _ObanWorker(oban, pool)


# --- Procrastinate --------------------------------------------------------------------------


@dataclass
class _ProcWorker:
    app_cm: Any
    task: asyncio.Task[None]

    async def stop(self) -> None:
        self.task.cancel()
        with contextlib.suppress(asyncio.CancelledError, TimeoutError):
            await asyncio.wait_for(self.task, timeout=30)
        await self.app_cm.__aexit__(None, None, None)


class Procrastinate:
    name = "procrastinate"
    driver_lib = "psycopg"
    remaining_sql = "SELECT count(*) FROM procrastinate_jobs WHERE status <> 'succeeded'"
    settings = (
        "run_worker_async(concurrency=10, listen_notify=True) (concurrency default is 1; 10 as "
        "its docs suggest for async tasks); fetch_job_polling_interval=5 s default; "
        "psycopg pool"
    )

    def __init__(self) -> None:
        self._app: Any = None
        self._cm: Any = None
        self._task: Any = None

    def _make_app(self, dsn: str) -> tuple[Any, Any]:
        import procrastinate

        app = procrastinate.App(connector=procrastinate.PsycopgConnector(conninfo=dsn))

        @app.task(name="noop", queue="default")
        async def noop(n: int) -> None:
            on_body(n)

        return app, noop

    async def install(self, dsn: str) -> None:
        app, _ = self._make_app(dsn)
        async with app.open_async():
            await app.schema_manager.apply_schema_async()

    async def open(self, dsn: str) -> None:
        self._app, self._task = self._make_app(dsn)
        self._cm = self._app.open_async()
        await self._cm.__aenter__()

    async def close(self) -> None:
        if self._cm is not None:
            await self._cm.__aexit__(None, None, None)
            self._cm = None

    async def enqueue_one(self, n: int) -> None:
        await self._task.defer_async(n=n)

    async def enqueue_bulk(self, ns: list[int]) -> None:
        await self._task.batch_defer_async(*({"n": n} for n in ns))

    async def start_worker(self, dsn: str) -> Worker:
        app, _ = self._make_app(dsn)
        cm = app.open_async()
        await cm.__aenter__()
        task = asyncio.ensure_future(
            app.run_worker_async(
                concurrency=10,
                wait=True,
                listen_notify=True,
                install_signal_handlers=False,
            )
        )
        return _ProcWorker(cm, task)
