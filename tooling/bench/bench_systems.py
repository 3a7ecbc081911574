"""The four queues under test, behind one small interface (``System``).

Each system can install its schema into an empty database, enqueue one no-op job or a batch,
run a worker whose body only calls ``on_body(n)``, and say how many of its jobs are not yet
settled (``remaining_sql``). Every worker setting is the peer's own default or the value its
docs show; ``settings`` says which, and docs/performance.md repeats it.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Protocol

OnBody = Callable[[int], None]

_on_body: OnBody = lambda n: None  # noqa: E731  (the worker process sets it)


def set_on_body(hook: OnBody) -> None:
    """What every system's no-op body calls with its job's number, first thing."""
    global _on_body
    _on_body = hook


class Worker(Protocol):
    async def stop(self) -> None: ...


class System(Protocol):
    name: str
    settings: str
    remaining_sql: str
    """Jobs of this system not yet settled (done / completed / succeeded)."""
    driver_lib: str
    """The database client library: ``psycopg`` or ``asyncpg``."""

    async def install(self, dsn: str) -> None: ...

    async def open(self, dsn: str) -> None:
        """Open the enqueueing client."""
        ...

    async def close(self) -> None: ...

    async def enqueue_one(self, n: int) -> None: ...

    async def enqueue_bulk(self, ns: list[int]) -> None:
        """ONE call of the system's bulk enqueue for every number in ``ns``."""
        ...

    async def start_worker(self, dsn: str) -> Worker: ...


# --- ultimat3 -------------------------------------------------------------------------------


@dataclass
class _OursWorker:
    worker: Any
    driver: Any
    wake: Any = None

    async def stop(self) -> None:
        await self.worker.stop()
        if self.wake is not None:
            await self.wake.stop()
        await self.driver.close()


def _worker_listens(worker: Any) -> bool:
    """Whether the worker started a LISTEN session of its own (once it wires the wake)."""
    names = [n for n in dir(worker) if "queue_wake" in n or "listen" in n.lower()]
    return any(getattr(worker, n, None) is not None for n in names)


def _start_queue_wake() -> Any:
    """``ultimat3.jobs.postgres.start_queue_wake`` where the driver has it, else None."""
    try:
        from ultimat3.jobs import postgres as pg
    except ImportError:
        return None
    return getattr(pg, "start_queue_wake", None)


class Ultimat3:
    name = "ultimat3"
    driver_lib = "psycopg"
    remaining_sql = "SELECT count(*) FROM x_jobs WHERE state <> 'done'"

    def __init__(self) -> None:
        self._driver: Any = None
        self._job: Any = None
        self._swap: Any = None

    @property
    def settings(self) -> str:
        from ultimat3.jobs._worker import DEFAULT_CLAIM_BATCH

        wake = (
            "the wake: start_queue_wake(driver, worker.wake) (one LISTEN session) unless the "
            "worker starts its own"
            if _start_queue_wake() is not None
            else "no LISTEN wake (the driver has none yet): polling only"
        )
        return (
            f"job_worker defaults: claim_batch={DEFAULT_CLAIM_BATCH}, max_in_flight=None, "
            f"poll_interval_ms=250, idle_poll_max_ms=2000; driver pool max_size=10 (psycopg 3); "
            f"{wake}"
        )

    def _declare(self) -> Any:
        if self._job is None:
            from pydantic import BaseModel

            from ultimat3.jobs import job

            class Noop(BaseModel):
                n: int

            async def noop(input: Noop, step: Any, ctx: Any) -> None:
                _on_body(input.n)

            self._job = job(
                input=Noop,
                name="bench_noop",
                idempotency_key=lambda i: f"bench:{i.n}",
                run=noop,
            )
        return self._job

    async def install(self, dsn: str) -> None:
        from ultimat3.jobs.postgres import migrate

        await migrate(dsn)

    async def open(self, dsn: str) -> None:
        from ultimat3.core import swap_adapter
        from ultimat3.jobs.adapter import JOB_DRIVER
        from ultimat3.jobs.postgres import postgres_job_driver

        self._driver = postgres_job_driver(dsn)
        await self._driver.open()
        self._swap = swap_adapter(JOB_DRIVER, self._driver)
        self._swap.__enter__()
        self._declare()

    async def close(self) -> None:
        if self._swap is not None:
            self._swap.__exit__(None, None, None)
            self._swap = None
        if self._driver is not None:
            await self._driver.close()
            self._driver = None

    async def enqueue_one(self, n: int) -> None:
        await self._declare().enqueue({"n": n})

    async def enqueue_bulk(self, ns: list[int]) -> None:
        await self._declare().enqueue_many([{"n": n} for n in ns])

    async def start_worker(self, dsn: str) -> Worker:
        from ultimat3.jobs import job_worker
        from ultimat3.jobs.postgres import postgres_job_driver

        driver = postgres_job_driver(dsn)
        worker = job_worker(jobs=[self._declare()], driver=driver, handle_signals=False)
        await worker.start()
        wake = None
        start_queue_wake = _start_queue_wake()
        if start_queue_wake is not None and not _worker_listens(worker):
            wake = await start_queue_wake(
                driver, lambda queue: worker.wake(), queues=list(worker.queues)
            )
        return _OursWorker(worker, driver, wake)

    # the relay (ours only) ---------------------------------------------------------------

    async def relay(self, dsn: str, rows: int) -> tuple[float, str]:
        """Stage ``rows`` enqueues in one committed transaction, then time outbox relay passes
        (``outbox_relay``, 500 a pass) until every row landed in ``x_jobs``. Answers
        ``(rows/s, what was measured)``."""
        from ultimat3.core import swap_adapter, use_connection
        from ultimat3.jobs import outbox_relay
        from ultimat3.jobs.adapter import JOB_DRIVER, OUTBOX_STORE
        from ultimat3.jobs.drivers.memory_outbox import MemoryTransaction, memory_outbox_store

        store, what = _postgres_outbox_store(dsn)
        job = self._declare()
        inputs = [[{"n": n} for n in range(s, min(rows, s + 1000))] for s in range(0, rows, 1000)]
        # Staging goes through the outbox only when the driver cannot join the transaction (a
        # driver on another database, Redis): this stand-in says so, the rest is ours.
        staging_driver = _NotJoining(self._driver)
        with swap_adapter(JOB_DRIVER, staging_driver):
            if store is None:
                store = memory_outbox_store()
                what = (
                    "memory outbox store -> Postgres driver (no Postgres OutboxStore yet: the "
                    "publish half only: enqueue_many of 500 + mark_published_many)"
                )
                with swap_adapter(OUTBOX_STORE, store):
                    tx = MemoryTransaction()
                    with use_connection(tx):
                        for batch in inputs:
                            await job.enqueue_many(batch)
                    tx.commit()
            else:
                import psycopg

                with swap_adapter(OUTBOX_STORE, store):
                    async with (
                        await psycopg.AsyncConnection.connect(dsn) as conn,
                        conn.transaction(),
                    ):
                        with use_connection(conn):
                            for batch in inputs:
                                await job.enqueue_many(batch)
        try:
            landed = 0
            t0 = time.perf_counter()
            for _ in range(rows // 100 + 10):  # bounded: 500 a pass, so rows/500 passes
                got = await outbox_relay(store, self._driver)
                landed += got
                if got == 0 or landed >= rows:
                    break
            elapsed = time.perf_counter() - t0
        finally:
            close = getattr(store, "close", None)
            if close is not None:
                await close()
        if landed != rows:
            raise RuntimeError(f"relay published {landed} of {rows} rows")
        return rows / elapsed, what


class _NotJoining:
    """Our Postgres driver, except that it joins no caller's transaction: an enqueue inside
    one is staged into the outbox, as it would be for a driver on another database."""

    def __init__(self, driver: Any) -> None:
        self._driver = driver

    def owns_connection(self, connection: object) -> bool:
        return False

    def __getattr__(self, name: str) -> Any:
        return getattr(self._driver, name)


@dataclass
class _FloorWorker:
    task: asyncio.Task[None]
    stopping: asyncio.Event
    driver: Any

    async def stop(self) -> None:
        self.stopping.set()
        try:
            await asyncio.wait_for(self.task, timeout=30)
        finally:
            await self.driver.close()


class Ultimat3Floor(Ultimat3):
    """Not a product configuration: our DRIVER without the worker, in the loop a batching
    worker would run — ``claim(limit=FLOOR_BATCH)`` then one ``ack_many`` for the batch, no
    per-job step load. It shows what the driver allows today; the gap to ``ultimat3`` is the
    worker's per-job round trips. Measured for the drain only."""

    name = "ultimat3-floor"
    FLOOR_BATCH = 50

    @property
    def settings(self) -> str:
        return (
            f"driver only, one task: claim(limit={self.FLOOR_BATCH}) -> body -> ack_many(batch); "
            "no steps.load, no heartbeat task; an upper bound for the worker, not a product "
            "configuration"
        )

    async def start_worker(self, dsn: str) -> Worker:
        from ultimat3.jobs.postgres import AckRequest, postgres_job_driver

        driver = postgres_job_driver(dsn)
        stopping = asyncio.Event()
        worker_id = "bench-floor"

        async def loop() -> None:
            idle = 0.01
            while not stopping.is_set():
                claimed = await driver.claim(
                    queues=["default"],
                    limit=self.FLOOR_BATCH,
                    worker_id=worker_id,
                    visibility_timeout_ms=30_000,
                )
                if not claimed:
                    try:
                        await asyncio.wait_for(stopping.wait(), timeout=idle)
                    except TimeoutError:
                        idle = min(idle * 2, 0.25)
                    continue
                idle = 0.01
                for one in claimed:
                    payload = one.payload
                    if isinstance(payload, str):
                        payload = json.loads(payload)
                    _on_body(int(payload["n"]))
                await driver.ack_many(
                    [AckRequest(one.id, one.claim) for one in claimed], worker_id=worker_id
                )

        return _FloorWorker(asyncio.ensure_future(loop()), stopping, driver)


def _postgres_outbox_store(dsn: str) -> tuple[Any, str]:
    """``postgres_outbox_store(dsn)`` where the driver has it; ``(None, '')`` before."""
    try:
        from ultimat3.jobs import postgres as pg
    except ImportError:
        return None, ""
    factory = getattr(pg, "postgres_outbox_store", None)
    if factory is None:
        return None, ""
    return factory(dsn), (
        "postgres_outbox_store (x_outbox, 10,000 rows staged in one committed transaction) -> "
        "outbox_relay passes of 500 -> Postgres driver"
    )


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
            _on_body(int(job.payload))

        task = asyncio.ensure_future(qm.run(batch_size=10))
        return _PgqWorker(qm, task, conn)


# --- Oban for Python ------------------------------------------------------------------------


def _oban_worker_class() -> Any:
    from oban import worker

    @worker(queue="default")
    class BenchNoop:
        async def process(self, job: Any) -> None:
            _on_body(int(job.args["n"]))

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
            _on_body(n)

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


SYSTEMS: dict[str, Callable[[], System]] = {
    "ultimat3": Ultimat3,
    "ultimat3-floor": Ultimat3Floor,
    "pgqueuer": PGQueuer,
    "oban": ObanPy,
    "procrastinate": Procrastinate,
}


def to_json(value: object) -> str:
    return json.dumps(value, separators=(",", ":"))
