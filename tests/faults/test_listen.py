"""The LISTEN session of a worker process killed (``pg_terminate_backend``), and separately left
half-open (a proxy that stops carrying its bytes, both ways, without closing anything): a job
enqueued meanwhile still starts within the worker's idle poll; the wake notices, re-dials, and
wakes every served queue once — one catch-up pass — after.

The worker serves ``faults`` and ``idle``; nothing is ever queued on ``idle``, so every wake of
``idle`` is a catch-up pass."""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass, field
from datetime import datetime

from psycopg.conninfo import conninfo_to_dict, make_conninfo

from ultimat3.jobs._process import worker as _worker
from ultimat3.jobs.postgres import postgres_job_driver
from ultimat3_testkit.faults import (
    Db,
    WorkerFactory,
    WorkerProcess,
    app_name,
    backend_pids,
    terminate,
    until,
    with_app_name,
    work_request,
    worker_args,
)

PROVEN_IDLE_S: float = getattr(_worker, "WAKE_PROVEN_IDLE_MS", 0) / 1000
"""How long an idle worker may sleep while its wake is proven (a worker that starts the driver's
wake itself stretches its idle poll to this)."""


def idle_ceiling_s(idle_max_ms: int) -> float:
    """The longest an idle worker sleeps between passes: a job waits no longer for the poll."""
    return max(idle_max_ms / 1000, PROVEN_IDLE_S)


async def pickup_s(db: Db, job_id: str) -> float:
    """From the enqueue's commit to the first step's start (both on the database's clock)."""
    created: datetime = (await db.job(job_id))["created_at"]
    [start] = [e for e in await db.effects(job_id) if e.step == "a" and e.note == "start"]
    return start.at_ms / 1000 - created.timestamp()


def catch_ups(worker: WorkerProcess, since: int) -> list[int]:
    """The sessions count of every wake of the ``idle`` queue after the ``since``-th wake."""
    return [e["sessions"] for e in worker.events("faults.wake")[since:] if e["queue"] == "idle"]


async def test_a_killed_listen_session_is_redialled_with_one_catch_up_pass(
    db: Db, db_url: str, schema: str, workers: WorkerFactory
) -> None:
    listen = app_name("listen")
    worker = workers(
        *worker_args(
            with_app_name(db_url, app_name("listen-pool")),
            schema,
            queues="faults,idle",
            idle_max_ms=1000,
            wake=True,
            wake_dsn=with_app_name(db_url, listen),
        )
    )
    await worker.wait_event("jobs.wake.live")
    [session] = await backend_pids(db_url, listen)
    driver = postgres_job_driver(db_url, schema=schema, max_size=1)
    try:
        mark = len(worker.events("faults.wake"))
        assert await terminate(db_url, session, listen)
        meanwhile = work_request("meanwhile")
        await driver.enqueue(meanwhile)
        await until(lambda: db.all_settled([meanwhile.id]), timeout_s=10, what="the job to run")
        assert await pickup_s(db, meanwhile.id) < idle_ceiling_s(1000) + 1.0

        await worker.wait_event("jobs.wake.live", count=2, timeout_s=10)
        [redialled] = await backend_pids(db_url, listen)
        assert redialled != session
        [lost] = worker.events("jobs.wake.lost")
        assert "terminat" in lost["error"] or "closed" in lost["error"]
        assert catch_ups(worker, mark) == [2]  # once, from the second session

        after = work_request("after")  # the new session carries the next notification
        await driver.enqueue(after)
        await until(lambda: db.all_settled([after.id]), timeout_s=10, what="the next job")
        assert catch_ups(worker, mark) == [2]
    finally:
        await driver.close()
    await db.assert_nothing_lost([meanwhile.id, after.id])
    assert await worker.stop() == 0


@dataclass
class _Link:
    writers: tuple[asyncio.StreamWriter, asyncio.StreamWriter]
    frozen: bool = False
    tasks: list[asyncio.Task[None]] = field(default_factory=list)


class HalfOpenProxy:
    """A TCP proxy to the server. :meth:`freeze` leaves every connection open now half-open: its
    bytes, both ways, go nowhere and nothing is closed (no FIN, no RST), as a dead NAT or a
    pulled cable leaves it; connections made later pass."""

    def __init__(self, url: str) -> None:
        params = conninfo_to_dict(url)
        self._host = str(params.get("host") or "127.0.0.1")
        self._port = int(params.get("port") or 5432)
        self._url = url
        self._server: asyncio.Server | None = None
        self._links: list[_Link] = []

    async def start(self) -> str:
        """Listen on a free port; answers ``url`` pointed at the proxy."""
        self._server = await asyncio.start_server(self._accept, "127.0.0.1", 0)
        port = self._server.sockets[0].getsockname()[1]
        return make_conninfo(self._url, host="127.0.0.1", port=str(port))

    async def _accept(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        up_reader, up_writer = await asyncio.open_connection(self._host, self._port)
        link = _Link((writer, up_writer))
        link.tasks = [
            asyncio.ensure_future(self._pump(reader, up_writer, link)),
            asyncio.ensure_future(self._pump(up_reader, writer, link)),
        ]
        self._links.append(link)

    @staticmethod
    async def _pump(src: asyncio.StreamReader, dst: asyncio.StreamWriter, link: _Link) -> None:
        try:
            while data := await src.read(65536):
                if not link.frozen:
                    dst.write(data)
                    await dst.drain()
        except OSError:
            pass
        finally:
            if not link.frozen:
                dst.close()

    def freeze(self) -> int:
        for link in self._links:
            link.frozen = True
        return len(self._links)

    async def close(self) -> None:
        if self._server is not None:
            self._server.close()
        for link in self._links:
            for task in link.tasks:
                task.cancel()
            for writer in link.writers:
                writer.close()
        if self._server is not None:
            await self._server.wait_closed()


async def test_a_half_open_listen_session_is_noticed_by_its_probe_and_redialled(
    db: Db, db_url: str, schema: str, workers: WorkerFactory
) -> None:
    listen = app_name("half-open")
    proxy = HalfOpenProxy(with_app_name(db_url, listen))
    via_proxy = await proxy.start()
    driver = postgres_job_driver(db_url, schema=schema, max_size=1)
    try:
        worker = workers(
            *worker_args(
                with_app_name(db_url, app_name("half-open-pool")),
                schema,
                queues="faults,idle",
                idle_max_ms=500,
                wake=True,
                wake_dsn=via_proxy,
                probe_every_s=0.3,
                probe_timeout_s=idle_ceiling_s(500) + 1.5,  # the poll comes first
            )
        )
        await worker.wait_event("jobs.wake.live")
        mark = len(worker.events("faults.wake"))
        assert proxy.freeze() == 1  # the LISTEN session, and only it, goes through the proxy

        meanwhile = work_request("meanwhile")
        await driver.enqueue(meanwhile)  # its notification is lost in the dead session
        await until(lambda: db.all_settled([meanwhile.id]), timeout_s=10, what="the job to run")
        ran_at = time.time()
        assert await pickup_s(db, meanwhile.id) < idle_ceiling_s(500) + 1.0

        lost = await worker.wait_event("jobs.wake.lost", timeout_s=15)
        assert "half-open" in lost["error"]
        assert lost["t"] > ran_at, "the job waited for the re-dial, not for the poll"
        await worker.wait_event("jobs.wake.live", count=2, timeout_s=10)
        assert catch_ups(worker, mark) == [2]

        after = work_request("after")
        await driver.enqueue(after)
        await until(lambda: db.all_settled([after.id]), timeout_s=10, what="the next job")
        assert catch_ups(worker, mark) == [2]
        await db.assert_nothing_lost([meanwhile.id, after.id])
        assert await worker.stop() == 0
    finally:
        await driver.close()
        await proxy.close()
