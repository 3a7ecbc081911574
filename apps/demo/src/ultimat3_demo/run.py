"""The workload of ``x demo``: a fresh schema, a worker in this process, thousands of jobs, and
a summary measured from the outside (the producer's clock, the rows in storage).

The producer enqueues with ``enqueue_many`` in batches and keeps about ``backlog`` jobs waiting,
so the worker runs flat out while the queue stays short: ``jobs_per_second`` is what the worker
sustains, and the queue wait (enqueue commit to body start) is what a job waits behind that
backlog, not the time a burst of thousands takes to drain. The pickup is measured apart, once the
bulk is done: a few receipts enqueued one at a time onto the idle worker.
"""

from __future__ import annotations

import asyncio
import math
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, Final

import psycopg
from psycopg import sql

from ultimat3.core import XError, swap_adapter
from ultimat3.jobs import Job, JobWorker, job_worker
from ultimat3.jobs.adapter import ALL_STATES, JOB_DRIVER, JobDetail
from ultimat3.jobs.postgres import PostgresJobDriver, migrate, postgres_job_driver
from ultimat3_demo.jobs import (
    DEMO_JOBS,
    FLAKY_EVERY,
    SLEEP,
    SLEEP_MS,
    DemoWorld,
    Export,
    Order,
    Receipt,
    Trial,
    export_ledger,
    fulfil_order,
    send_receipt,
    trial_reminder,
)

DEFAULT_SCHEMA: Final = "x_demo"
MIN_JOBS: Final = 20
MAX_JOBS: Final = 100_000
POLL_INTERVAL_MS: Final = 100
IDLE_POLL_MAX_MS: Final = 500
CHECKED_IN_STORAGE: Final = 50
"""At most this many retried orders are read back from storage to prove the replay."""
_SPECIALS: Final = 2  # trial_reminder and export_ledger
IDLE_PROBES: Final = 8
"""Receipts enqueued one at a time after the bulk, to measure an idle worker's pickup."""
PROBE_GAP_S: Final = 0.3
"""Between two of them: past the wake's 250 ms per-queue notify window, so each finds the worker
idle and carries its own ``pg_notify`` (closer together, most would wait for the window's
trailing notification: that is a stream's pickup, not an idle worker's)."""


@dataclass(frozen=True, slots=True)
class DemoSettings:
    jobs: int = 3000
    """Distinct jobs, all kinds together."""
    concurrency: int = 32
    """The worker's ``max_in_flight``."""
    batch: int = 50
    """Inputs per ``enqueue_many`` call."""
    backlog: int = 50
    """The producer waits while this many enqueued jobs have not started."""
    timeout_s: float = 120.0
    io_ms: float = 1.0
    """Simulated latency of each vendor call a body makes."""

    def check(self) -> None:
        bad = []
        if not MIN_JOBS <= self.jobs <= MAX_JOBS:
            bad.append(f"--jobs {self.jobs} is not between {MIN_JOBS} and {MAX_JOBS}")
        if not 1 <= self.concurrency <= 256:
            bad.append(f"--concurrency {self.concurrency} is not between 1 and 256")
        if not 1 <= self.batch <= 1000:
            bad.append(f"--batch {self.batch} is not between 1 and 1000")
        if self.backlog < 1:
            bad.append(f"--backlog {self.backlog} is not >= 1")
        if not (self.timeout_s > 0 and math.isfinite(self.timeout_s)):
            bad.append(f"--timeout {self.timeout_s} is not a number of seconds > 0")
        if not (self.io_ms >= 0 and math.isfinite(self.io_ms)):
            bad.append(f"--io-ms {self.io_ms} is not a number of ms >= 0")
        if bad:
            raise XError(
                "X_INVARIANT",
                "x demo: " + "; ".join(bad),
                fix="x demo --jobs 3000 --concurrency 32 (the defaults)",
                meta={"causes": bad},
            )


@dataclass(frozen=True, slots=True)
class DemoProgress:
    done: int
    total: int
    elapsed_s: float
    retries: int
    dead: int


ProgressFn = Callable[[DemoProgress], None]


def check_schema_name(schema: str) -> None:
    """The demo drops its schema each run: never a schema an app may hold."""
    lowered = schema.lower()
    if (
        not schema
        or lowered == "public"
        or lowered.startswith("pg_")
        or (lowered == "information_schema")
    ):
        raise XError(
            "X_CONFIG_INVALID",
            f"x demo drops and recreates its schema at every run, so it refuses {schema!r}",
            fix=f"leave --schema out (the demo uses {DEFAULT_SCHEMA!r}) or name a schema of "
            "its own",
            meta={"schema": schema},
        )


async def reset_schema(url: str, schema: str, *, connections: int | None = None) -> str:
    """Drop ``schema`` (only if it holds nothing but x_ tables: the jobs tables) and migrate it
    afresh, so every run starts clean; answers the server's version. ``connections``: the pool
    the run will open; refused before anything is dropped when the server has no room for it."""
    check_schema_name(schema)
    try:
        async with await psycopg.AsyncConnection.connect(url, autocommit=True) as conn:
            cur = await conn.execute("SHOW server_version")
            version_row = await cur.fetchone()
            version = str(version_row[0]).split()[0] if version_row else "?"
            if connections is not None:
                await _check_room(conn, connections)
            cur = await conn.execute(
                "SELECT c.relname FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace"
                " WHERE n.nspname = %s AND c.relkind IN ('r', 'p', 'v', 'm', 'f')"
                " AND c.relname NOT LIKE 'x\\_%%' ORDER BY 1 LIMIT 5",
                (schema,),
            )
            foreign = [str(r[0]) for r in await cur.fetchall()]
            if foreign:
                raise XError(
                    "X_CONFIG_INVALID",
                    f"schema {schema!r} holds tables the demo did not make "
                    f"({', '.join(foreign)}): x demo drops its schema, so it refuses this one",
                    fix=f"leave --schema out (the demo uses {DEFAULT_SCHEMA!r})",
                    meta={"schema": schema, "tables": foreign},
                )
            await conn.execute(
                sql.SQL("DROP SCHEMA IF EXISTS {} CASCADE").format(sql.Identifier(schema))
            )
    except psycopg.Error as exc:
        raise XError(
            "X_DRIVER_UNAVAILABLE",
            f"x demo could not reset schema {schema!r}: {type(exc).__name__}: {exc}",
            fix="check that the database answers (DATABASE_URL / --database-url)",
            meta={"schema": schema},
        ) from exc
    await migrate(url, schema=schema)
    return version


async def _check_room(conn: psycopg.AsyncConnection[Any], connections: int) -> None:
    """A pool larger than the server's free connection slots would fail mid-run with "too many
    clients"; refuse at the start instead, naming both numbers."""
    cur = await conn.execute(
        "SELECT current_setting('max_connections')::int"
        " - current_setting('superuser_reserved_connections')::int"
        " - (SELECT count(*) FROM pg_stat_activity WHERE backend_type = 'client backend')::int"
    )
    row = await cur.fetchone()
    free = int(row[0]) if row else 0
    if connections > free:
        room = free - pool_size(0)
        raise XError(
            "X_CONFIG_INVALID",
            f"x demo needs {connections} connections for --concurrency "
            f"{connections - pool_size(0)}, but the server has {max(free, 0)} free "
            "(max_connections less the reserved and the open ones)",
            fix=(
                f"pass --concurrency {room} or less"
                if room >= 1
                else "close other clients of the server or raise its max_connections"
            ),
            meta={"needed": connections, "free": free},
        )


def plan(jobs: int) -> tuple[list[Receipt], list[Order]]:
    """The bulk: a quarter of the jobs are orders (every ``FLAKY_EVERY``-th flaky), the rest
    receipts; two more jobs (the sleep and the dead letter) make ``jobs``."""
    orders_n = jobs // 4
    receipts_n = jobs - orders_n - _SPECIALS
    orders = [
        Order(
            order_id=f"ord-{i:06d}",
            sku=f"sku-{i % 97:03d}",
            quantity=1 + i % 3,
            flaky=i % FLAKY_EVERY == 0,
        )
        for i in range(1, orders_n + 1)
    ]
    receipts = [
        Receipt(
            order_id=f"pay-{i:06d}",
            email=f"customer{i}@example.com",
            total_cents=499 + (i * 37) % 10_000,
        )
        for i in range(1, receipts_n + 1)
    ]
    return receipts, orders


def probes_of(receipts: Sequence[Receipt]) -> int:
    """How many of the planned receipts are kept back to measure the idle pickup."""
    return min(IDLE_PROBES, len(receipts) // 4)


def _chunks(items: Sequence[Any], size: int) -> list[Sequence[Any]]:
    return [items[i : i + size] for i in range(0, len(items), size)]


def percentile(values: Sequence[float], q: float) -> float:
    """Nearest-rank percentile (``q`` in 0..100) of ``values``; 0 for none."""
    if not values:
        return 0.0
    ordered = sorted(values)
    rank = max(1, math.ceil(q / 100 * len(ordered)))
    return ordered[min(rank, len(ordered)) - 1]


class _Run:
    def __init__(
        self, driver: PostgresJobDriver, settings: DemoSettings, progress: ProgressFn | None
    ) -> None:
        self.driver = driver
        self.settings = settings
        self.progress = progress
        self.world = DemoWorld(io_s=settings.io_ms / 1000)
        self.worker: JobWorker = job_worker(
            jobs=list(DEMO_JOBS),
            driver=driver,
            app=self.world,
            max_in_flight=settings.concurrency,
            poll_interval_ms=POLL_INTERVAL_MS,
            idle_poll_max_ms=IDLE_POLL_MAX_MS,
            handle_signals=False,
        )
        receipts, self.orders = plan(settings.jobs)
        self.total = len(receipts) + len(self.orders) + _SPECIALS
        kept = probes_of(receipts)
        self.receipts, self.probes = (
            receipts[: len(receipts) - kept],
            receipts[len(receipts) - kept :],
        )
        self.probe_committed: dict[str, float] = {}
        self.committed: dict[str, float] = {}
        self.order_ids: dict[str, str] = {}
        self.bulk_ids: list[str] = []
        self.enqueued = 0
        self.dedupes = 0
        self.enqueue_calls = 0
        self.enqueue_s = 0.0
        self.replay: dict[str, Any] | None = None

    def _commit(self, job_id: str, at: float, deduped: bool) -> None:
        if deduped:
            self.dedupes += 1
            return
        self.committed.setdefault(job_id, at)
        self.enqueued += 1

    async def _produce(self) -> None:
        """Enqueue the bulk in ``enqueue_many`` batches, receipts and orders interleaved, while
        fewer than ``backlog`` enqueued jobs wait to start."""
        batch = self.settings.batch
        plans: list[tuple[Job[Any, Any], list[Any]]] = [
            (send_receipt, self.receipts),
            (fulfil_order, self.orders),
        ]
        keyed: list[tuple[float, int, Job[Any, Any], Sequence[Any]]] = []
        for kind, (job, items) in enumerate(plans):
            chunks = _chunks(items, batch)
            keyed += [((i + 0.5) / len(chunks), kind, job, c) for i, c in enumerate(chunks)]
        keyed.sort(key=lambda k: (k[0], k[1]))
        for _, _, job, inputs in keyed:
            while self.enqueued - len(self.world.started) >= self.settings.backlog:
                self.world.a_job_started.clear()
                await self.world.a_job_started.wait()
            began = time.perf_counter()
            results = await job.enqueue_many(list(inputs))
            now = time.perf_counter()
            self.enqueue_calls += 1
            self.enqueue_s += now - began
            for given, result in zip(inputs, results, strict=True):
                self._commit(result.id, now, result.deduped)
                self.bulk_ids.append(result.id)
                if isinstance(given, Order):
                    self.order_ids[given.order_id] = result.id

    async def _produce_then_probe(self) -> None:
        await self._produce()
        bulk = self.bulk_ids
        while not all(i in self.world.finished for i in bulk):  # then the worker is idle
            self.world.a_job_ended.clear()
            await self.world.a_job_ended.wait()
        for receipt in self.probes:
            await asyncio.sleep(PROBE_GAP_S)
            result = await send_receipt.enqueue(receipt)
            self.probe_committed[result.id] = time.perf_counter()
            self._commit(result.id, self.probe_committed[result.id], result.deduped)

    def _report(self, started: float) -> None:
        if self.progress is None:
            return
        stats = self.worker.stats()
        self.progress(
            DemoProgress(
                done=stats.completed,
                total=self.total,
                elapsed_s=time.perf_counter() - started,
                retries=stats.retried,
                dead=stats.dead_lettered,
            )
        )

    async def _replay_dead_letter(self, job_id: str) -> None:
        """The export died: fix its cause (the bucket), then replay it from its failed step."""
        row = await self.driver.introspect.show(job_id)
        if row.state != "dead":
            return
        self.world.bucket_ready = True
        await self.driver.introspect.requeue(job_id)
        error = dict(row.last_error or {})
        failed = [name for name, s in row.steps.items() if s.state == "failed"]
        self.replay = {
            "job_id": job_id,
            "dead_after_attempts": row.attempts,
            "failed_step": failed[0] if failed else None,
            "error": str(error.get("message") or error.get("code") or "-"),
        }

    async def go(self) -> dict[str, Any]:
        started = time.perf_counter()
        deadline = started + self.settings.timeout_s
        worker = self.worker
        producer: asyncio.Task[None] | None = None
        with swap_adapter(JOB_DRIVER, self.driver):  # what job.enqueue resolves
            await worker.start()
            try:
                trial = Trial(account_id="acct-0001")
                first = await trial_reminder.enqueue(trial)
                self._commit(first.id, time.perf_counter(), first.deduped)
                again = await trial_reminder.enqueue(trial)  # the same key, still live
                self._commit(again.id, time.perf_counter(), again.deduped)
                export = await export_ledger.enqueue(Export(month="2026-10"))
                self._commit(export.id, time.perf_counter(), export.deduped)
                bulk_began = time.perf_counter()
                producer = asyncio.ensure_future(self._produce_then_probe())
                while True:
                    self._report(started)
                    stats = worker.stats()
                    if self.replay is None and stats.dead_lettered >= 1:
                        await self._replay_dead_letter(export.id)
                    if producer.done():
                        producer.result()  # a failed enqueue ends the demo with its error
                        if stats.completed >= self.total:
                            break
                    if time.perf_counter() > deadline:
                        raise self._timeout(stats.completed)
                    await asyncio.sleep(0.1)
            except BaseException:
                if producer is not None:
                    producer.cancel()
                await worker.drain(signal_name="x demo")
                raise
            await worker.stop()
            self._report(started)
        ended = time.perf_counter()
        return await self._summary(
            started=started,
            bulk_began=bulk_began,
            ended=ended,
            first=first,
            again=again,
            export_id=export.id,
        )

    def _timeout(self, done: int) -> XError:
        return XError(
            "X_INVARIANT",
            f"x demo did not finish within {self.settings.timeout_s:g} s: {done} of "
            f"{self.total} jobs done",
            fix="x demo --jobs 1000 (fewer jobs), or --timeout 300 on a slow machine",
            meta={"done": done, "total": self.total},
        )

    async def _summary(
        self,
        *,
        started: float,
        bulk_began: float,
        ended: float,
        first: Any,
        again: Any,
        export_id: str,
    ) -> dict[str, Any]:
        world = self.world
        intro = self.driver.introspect
        stats = self.worker.stats()
        states = dict.fromkeys(ALL_STATES, 0)
        for queue in await self.driver.stats():
            for state in ALL_STATES:
                states[state] += getattr(queue, state)
        rows = sum(states.values())

        def waits(committed: dict[str, float]) -> list[float]:
            return [
                max(0.0, world.started[job_id] - at) * 1000
                for job_id, at in committed.items()
                if job_id in world.started
            ]

        queued = waits({i: at for i, at in self.committed.items() if i not in self.probe_committed})
        pickups = waits(self.probe_committed)
        bulk_done = [world.finished[i] for i in self.bulk_ids if i in world.finished]
        bulk_s = (max(bulk_done) - bulk_began) if bulk_done else 0.0

        flaky = [o for o in self.orders if o.flaky]
        checked: list[JobDetail] = [
            await intro.show(self.order_ids[o.order_id]) for o in flaky[:CHECKED_IN_STORAGE]
        ]
        first_runs = [
            world.executions[(self.order_ids[o.order_id], "reserve-stock")] for o in self.orders
        ]
        charge_runs = sum(
            world.executions[(self.order_ids[o.order_id], "charge-card")] for o in self.orders
        )

        trial_row = await intro.show(first.id)
        slept = world.woke.get(first.id, 0.0) - world.sleep_began.get(first.id, 0.0)
        export_row = await intro.show(export_id)

        def executions(row: JobDetail) -> dict[str, int]:
            return {name: s.executions for name, s in row.steps.items()}

        dead_letter = dict(self.replay or {"job_id": export_id, "failed_step": None})
        dead_letter.update(
            replayed=self.replay is not None,
            state=export_row.state,
            step_executions=executions(export_row),
        )
        return {
            "schema": self.driver.schema,
            "seconds": round(ended - started, 3),
            "jobs": {"total": self.total, "rows": rows, "done": states["done"], "states": states},
            "throughput": {
                "jobs": len(self.bulk_ids),
                "seconds": round(bulk_s, 3),
                "jobs_per_second": round(len(self.bulk_ids) / bulk_s, 1) if bulk_s > 0 else 0.0,
            },
            "queue_wait_ms": {
                "p50": round(percentile(queued, 50), 1),
                "p90": round(percentile(queued, 90), 1),
                "p99": round(percentile(queued, 99), 1),
                "max": round(max(queued, default=0.0), 1),
                "measured": len(queued),
            },
            "pickup_ms": {
                "p50": round(percentile(pickups, 50), 2),
                "max": round(max(pickups, default=0.0), 2),
                "measured": len(pickups),
                "gap_ms": round(PROBE_GAP_S * 1000),
            },
            "enqueue": {
                "calls": self.enqueue_calls,
                "batch": self.settings.batch,
                "backlog": self.settings.backlog,
                "seconds": round(self.enqueue_s, 3),
            },
            "worker": {
                "max_in_flight": self.settings.concurrency,
                "poll_interval_ms": POLL_INTERVAL_MS,
                "idle_poll_max_ms": IDLE_POLL_MAX_MS,
                "claimed": stats.claimed,
                "completed": stats.completed,
                "suspended": stats.suspended,
                "leases_lost": stats.leases_lost,
            },
            "retries": stats.retried,
            "multi_step": {
                "jobs": len(self.orders),
                "steps": ["reserve-stock", "charge-card", "ship"],
                "failed_once": len(world.gateway_timeouts),
                "first_step_runs": sum(first_runs),
                "first_step_max_runs": max(first_runs, default=0),
                "failing_step_runs": charge_runs,
                "checked_in_storage": len(checked),
                "stored_executions": sorted(
                    {tuple(sorted(executions(r).items())) for r in checked}
                ),
            },
            "dedupes": self.dedupes,
            "dedupe": {
                "job": trial_reminder.name,
                "idempotency_key": trial_reminder.idempotency_key_for(
                    Trial(account_id="acct-0001")
                ),
                "job_id": first.id,
                "deduped": bool(again.deduped),
                "same_id": again.id == first.id,
            },
            "sleep": {
                "job_id": first.id,
                "requested": SLEEP,
                "requested_ms": SLEEP_MS,
                "slept_ms": round(slept * 1000, 1),
                "state": trial_row.state,
                "step_executions": executions(trial_row),
            },
            "dead_letters": stats.dead_lettered,
            "replayed": 1 if self.replay is not None else 0,
            "dead_letter": dead_letter,
        }


_WORKER_OWN: Final = 2
"""Connections a worker keeps beside its runs (claims, renewals): ``start()`` checks the pool
holds ``max_in_flight`` plus these."""


def pool_size(concurrency: int) -> int:
    """Connections for the demo's driver: the worker's runs and its own (what ``start()``
    requires), the producer and the monitor."""
    return concurrency + _WORKER_OWN + 2


async def run_demo(
    url: str,
    *,
    schema: str = DEFAULT_SCHEMA,
    settings: DemoSettings | None = None,
    progress: ProgressFn | None = None,
) -> dict[str, Any]:
    """Reset ``schema`` on ``url``, run the workload with a worker in this process, and answer
    the summary (plain JSON data)."""
    chosen = settings or DemoSettings()
    chosen.check()
    check_schema_name(schema)
    size = pool_size(chosen.concurrency)
    version = await reset_schema(url, schema, connections=size)
    driver = postgres_job_driver(url, schema=schema, max_size=size)
    try:
        return {"server_version": version, **await _Run(driver, chosen, progress).go()}
    finally:
        await driver.close()
