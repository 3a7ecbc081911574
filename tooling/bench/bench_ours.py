"""ultimat3 under test: the product's worker over the Postgres driver (``ultimat3``), the driver
alone in a minimal batching loop (``ultimat3-floor``, a bound, not a configuration), and the
outbox relay."""

from __future__ import annotations

import asyncio
import json
import os
import time
from dataclasses import dataclass
from typing import Any

from bench_base import Worker, on_body

OVERRIDES_ENV = "BENCH_OURS_WORKER"
"""``--ours-worker '{"claim_batch": 50}'`` reaches the worker processes through this variable."""


def worker_overrides() -> dict[str, Any]:
    """``job_worker`` keywords to try instead of the defaults (a what-if, never the default)."""
    raw = os.environ.get(OVERRIDES_ENV)
    return dict(json.loads(raw)) if raw else {}


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
        from ultimat3.jobs._process.settings import DEFAULT_CLAIM_BATCH

        wake = (
            "the wake: start_queue_wake(driver, worker.wake) (one LISTEN session) unless the "
            "worker starts its own"
            if _start_queue_wake() is not None
            else "no LISTEN wake (the driver has none yet): polling only"
        )
        tried = worker_overrides()
        return (
            f"job_worker defaults: claim_batch={DEFAULT_CLAIM_BATCH}, max_in_flight=None, "
            f"poll_interval_ms=250, idle_poll_max_ms=2000; driver pool max_size=10 (psycopg 3); "
            f"{wake}" + (f"; OVERRIDDEN by --ours-worker: {json.dumps(tried)}" if tried else "")
        )

    def _declare(self) -> Any:
        if self._job is None:
            from pydantic import BaseModel

            from ultimat3.jobs import job

            class Noop(BaseModel):
                n: int

            async def noop(input: Noop, step: Any, ctx: Any) -> None:
                on_body(input.n)

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
        worker = job_worker(
            jobs=[self._declare()], driver=driver, handle_signals=False, **worker_overrides()
        )
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
        from ultimat3.jobs.memory import MemoryTransaction, memory_outbox_store

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
                    on_body(int(payload["n"]))
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
