"""The Redis job queues side by side, in one run, on one redis-server of the bench's own.

    bash tooling/bench/redis_setup_peers.sh          # the peers live in .x/redis-bench-venv only
    .x/redis-bench-venv/bin/python tooling/bench/redis_bench.py [--systems ultimat3,arq,...]

For each system, on a flushed server (no persistence, so no system pays for fsync):

- **enqueue loop**: 2,000 single enqueues, one after another, through the system's public API
  (ours: ``job.enqueue``, so the facade's validation is in the measurement); every system's
  client open at once, the systems taking turns for 5 rounds (ABC CBA ...), the median round;
- **bulk enqueue**: 10,000 jobs in calls of 1,000 through the system's bulk API, where it has one;
- **drain**: 10,000 queued no-op jobs, ONE worker process with the system's default settings;
  the rate is N over the time from the first body's start to the N-th body's end;
- **pickup**: an idle worker; 200 jobs enqueued 10 ms apart, each carrying its number; the body
  notes when it started (``time.time()``), and the latency is that minus the moment the enqueue
  call returned (the job is queued), as pg_bench.py measures it (p50, p99). The same from the
  call's start (which adds the enqueue's own round trip) is printed below the table.

Before the systems, the **ceiling** of a loop awaiting each reply on this machine: 2,000 bare
``PING`` round trips one after another over asyncio (a ``Protocol`` with hiredis), and over a
blocking socket.

Bodies only call ``redis_bench_tasks.seen``; see that module for how they record. Worker settings
are each peer's defaults (``SETTINGS`` says which). Our worker's ``start()`` starts the driver's
wake (the ``{x}:due`` channel) itself; one more row shows ours with the polling tightened to 1 ms
instead, for comparison.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
N_LOOP = 2_000
LOOP_ROUNDS = 5
N_BULK = 10_000
N_DRAIN = 10_000
N_PICKUP = 200

SETTINGS: dict[str, str] = {
    "ultimat3": "job_worker defaults: woken by the driver's {x}:due channel (started by "
    "start()), claim batch 10 growing with a backlog, no in-flight cap, visibility 30 s",
    "ultimat3 (poll 1 ms)": "job_worker(poll_interval_ms=1, idle_poll_max_ms=2), else defaults "
    "(the wake too)",
    "arq": "Worker defaults: max_jobs 10, poll_delay 0.5 s",
    "saq": "Worker defaults: concurrency 10 (blocking dequeue)",
    "rq": "Worker defaults: one forked work horse per job (blocking dequeue)",
    "dramatiq": "Worker defaults: 8 worker threads, RedisBroker defaults",
}


# --- the enqueueing side of each system ----------------------------------------------------------


class Client:
    """One system's enqueuer in the bench process."""

    bulk: bool = False

    async def open(self, url: str) -> None: ...

    async def close(self) -> None: ...

    async def one(self, x: float) -> None:
        raise NotImplementedError

    async def many(self, xs: list[float]) -> None:
        raise NotImplementedError


class Ultimat3Client(Client):
    bulk = True

    async def open(self, url: str) -> None:
        import redis_bench_tasks as tasks

        from ultimat3.jobs.adapter import install_job_driver
        from ultimat3.jobs_redis import redis_job_driver

        self.driver = redis_job_driver(url)
        install_job_driver(self.driver)
        self.job = tasks.ultimat3_job()

    async def close(self) -> None:
        await self.driver.close()

    async def one(self, x: float) -> None:
        await self.job.enqueue({"x": x})

    async def many(self, xs: list[float]) -> None:
        await self.job.enqueue_many([{"x": x} for x in xs])


class ArqClient(Client):
    async def open(self, url: str) -> None:
        from arq import create_pool
        from arq.connections import RedisSettings

        self.pool = await create_pool(RedisSettings.from_dsn(url))

    async def close(self) -> None:
        await self.pool.aclose()

    async def one(self, x: float) -> None:
        await self.pool.enqueue_job("noop", x)


class SaqClient(Client):
    async def open(self, url: str) -> None:
        from saq import Queue

        self.queue = Queue.from_url(url)
        await self.queue.connect()

    async def close(self) -> None:
        await self.queue.disconnect()

    async def one(self, x: float) -> None:
        await self.queue.enqueue("saq_noop", x=x)


class RqClient(Client):
    bulk = True

    async def open(self, url: str) -> None:
        import redis
        from rq import Queue

        self.conn = redis.Redis.from_url(url)
        self.queue = Queue(connection=self.conn)

    async def close(self) -> None:
        self.conn.close()

    async def one(self, x: float) -> None:
        import redis_bench_tasks as tasks

        self.queue.enqueue(tasks.rq_noop, x)

    async def many(self, xs: list[float]) -> None:
        import redis_bench_tasks as tasks
        from rq import Queue

        self.queue.enqueue_many([Queue.prepare_data(tasks.rq_noop, (x,)) for x in xs])


class DramatiqClient(Client):
    async def open(self, url: str) -> None:
        import redis_bench_tasks as tasks

        self.actor = tasks.dramatiq_actor()

    async def one(self, x: float) -> None:
        self.actor.send(x)


CLIENTS: dict[str, Callable[[], Client]] = {
    "ultimat3": Ultimat3Client,
    "ultimat3 (poll 1 ms)": Ultimat3Client,
    "arq": ArqClient,
    "saq": SaqClient,
    "rq": RqClient,
    "dramatiq": DramatiqClient,
}


# --- the worker process of each system -----------------------------------------------------------


async def _forever() -> None:
    await asyncio.Event().wait()


def run_worker(system: str, url: str) -> None:
    """Runs in the worker process until it is terminated."""
    import redis_bench_tasks as tasks

    if system.startswith("ultimat3"):

        async def main() -> None:
            from ultimat3.jobs import job_worker
            from ultimat3.jobs.adapter import install_job_driver
            from ultimat3.jobs_redis import redis_job_driver

            driver = redis_job_driver(url)
            install_job_driver(driver)
            tight = {"poll_interval_ms": 1, "idle_poll_max_ms": 2} if "poll" in system else {}
            worker = job_worker(jobs=[tasks.ultimat3_job()], handle_signals=False, **tight)
            await worker.start()
            await _forever()

        asyncio.run(main())
    elif system == "arq":
        from arq.connections import RedisSettings
        from arq.worker import Worker, func

        async def arq_main() -> None:
            worker = Worker(  # made inside the loop: arq binds its loop at construction
                functions=[func(tasks.arq_noop, name="noop")],
                redis_settings=RedisSettings.from_dsn(url),
                handle_signals=False,
            )
            await worker.async_run()

        asyncio.run(arq_main())
    elif system == "saq":
        from saq import Queue
        from saq import Worker as SaqWorker

        async def main() -> None:
            queue = Queue.from_url(url)
            await SaqWorker(queue, functions=[tasks.saq_noop]).start()

        asyncio.run(main())
    elif system == "rq":
        import redis
        from rq import Queue as RqQueue
        from rq import Worker as RqWorker

        conn = redis.Redis.from_url(url)
        RqWorker([RqQueue(connection=conn)], connection=conn).work(logging_level="WARNING")
    elif system == "dramatiq":
        import dramatiq

        actor = tasks.dramatiq_actor()
        worker = dramatiq.Worker(actor.broker)
        worker.start()
        while True:
            time.sleep(1)
    else:
        raise SystemExit(f"unknown system {system!r}")


# --- the measuring side --------------------------------------------------------------------------


def spare_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
    return port


class Server:
    def __init__(self) -> None:
        self.port = spare_port()
        self.folder = tempfile.mkdtemp(prefix="redis-bench-")
        self.process = subprocess.Popen(
            ["redis-server", "--port", str(self.port), "--bind", "127.0.0.1", "--save", "",
             "--appendonly", "no", "--dir", self.folder],
            stdout=subprocess.DEVNULL,
        )  # fmt: skip
        self.url = f"redis://127.0.0.1:{self.port}/0"

    def close(self) -> None:
        self.process.terminate()
        self.process.wait(timeout=10)
        shutil.rmtree(self.folder, ignore_errors=True)


async def flush(url: str) -> None:
    import redis.asyncio as aredis

    client = aredis.Redis.from_url(url)
    try:
        for _ in range(100):
            try:
                await client.flushall()
                return
            except Exception:
                await asyncio.sleep(0.05)
        raise RuntimeError(f"redis at {url} did not answer")
    finally:
        await client.aclose()


def _server_cpu_s(info: dict[str, Any]) -> float:
    return float(info["used_cpu_user_main_thread"]) + float(info["used_cpu_sys_main_thread"])


async def server_stats(url: str, *, since: dict[str, float] | None = None) -> dict[str, float]:
    """The server's counters now (``since=None``), or what it spent since ``since``: ``cpu_us``,
    its main thread's CPU (user + system: the commands, the sockets' reads and writes, the
    event loop; ``INFO cpu``), and ``script_us``, the time its ``EVAL``/``EVALSHA``/``FCALL``
    runs took (``INFO commandstats``). Not the sum of every command's time: a command a script
    calls is counted there both on its own and inside the script's, so that sum counts a
    script's work twice."""
    import redis.asyncio as aredis

    client = aredis.Redis.from_url(url)
    try:
        if since is None:
            await client.config_resetstat()
        cpu = _server_cpu_s(await client.info("cpu"))
        stats = await client.info("commandstats")
        scripts = sum(
            float(v["usec"])
            for k, v in stats.items()
            if k in ("cmdstat_eval", "cmdstat_evalsha", "cmdstat_fcall", "cmdstat_evalsha_ro")
        )
        if since is None:
            return {"cpu_us": cpu * 1e6, "script_us": 0.0}
        return {"cpu_us": cpu * 1e6 - since["cpu_us"], "script_us": scripts}
    finally:
        await client.aclose()


async def wait_result(url: str, seconds: float) -> dict[str, Any]:
    import redis.asyncio as aredis

    client = aredis.Redis.from_url(url)
    try:
        deadline = time.monotonic() + seconds
        while time.monotonic() < deadline:
            raw = await client.get("bench:result")
            if raw:
                result: dict[str, Any] = json.loads(raw)
                return result
            await asyncio.sleep(0.05)
        raise TimeoutError(f"no result within {seconds}s")
    finally:
        await client.aclose()


def start_worker(system: str, url: str, mode: str, n: int) -> subprocess.Popen[bytes]:
    env = dict(os.environ, BENCH_URL=url, BENCH_MODE=mode, BENCH_N=str(n))
    return subprocess.Popen(
        [sys.executable, str(Path(__file__).resolve()), "--worker", system], env=env, cwd=HERE
    )


def stop_worker(process: subprocess.Popen[bytes]) -> None:
    process.send_signal(signal.SIGTERM)
    try:
        process.wait(timeout=10)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait(timeout=10)


async def timed(n: int, fn: Callable[[], Awaitable[None]]) -> float:
    started = time.perf_counter()
    await fn()
    return n / (time.perf_counter() - started)


async def measure_loops(systems: list[str], url: str) -> dict[str, dict[str, Any]]:
    """The enqueue loop of every system, in turns: ``LOOP_ROUNDS`` rounds of ``N_LOOP`` single
    enqueues of each system, one system after another, the order reversed every other round
    (ABC CBA ...). A system's rate is the median of its rounds (their range is printed too); on
    a shared VM whose speed moves minute to minute, one loop of each system seconds apart says
    more about the moment than about the system."""
    os.environ["BENCH_URL"] = url
    await flush(url)
    clients: dict[str, Client] = {}
    rates: dict[str, list[float]] = {system: [] for system in systems}
    spent = {system: {"cpu_us": 0.0, "script_us": 0.0} for system in systems}
    try:
        for system in systems:
            clients[system] = CLIENTS[system]()
            await clients[system].open(url)
        for turn in range(LOOP_ROUNDS):
            for system in systems if turn % 2 == 0 else systems[::-1]:
                client = clients[system]
                base = float(N_LOOP * turn)

                async def loop(client: Client = client, base: float = base) -> None:
                    for i in range(N_LOOP):
                        await client.one(base + i)

                before = await server_stats(url)
                rates[system].append(await timed(N_LOOP, loop))
                used = await server_stats(url, since=before)
                for key in ("cpu_us", "script_us"):
                    spent[system][key] += used[key]
    finally:
        for client in clients.values():
            await client.close()
    await flush(url)
    runs = N_LOOP * LOOP_ROUNDS
    return {
        system: {
            "enqueue_per_s": statistics.median(rates[system]),
            "enqueue_rounds": sorted(rates[system]),
            "server_cpu_us_per_enqueue": spent[system]["cpu_us"] / runs,
            "server_script_us_per_enqueue": spent[system]["script_us"] / runs,
        }
        for system in systems
    }


async def measure(system: str, url: str) -> dict[str, Any]:
    """Bulk enqueue, drain and pickup of one system."""
    os.environ["BENCH_URL"] = url
    client = CLIENTS[system]()
    out: dict[str, Any] = {"system": system, "settings": SETTINGS[system]}
    await flush(url)
    await client.open(url)
    try:
        if client.bulk:

            async def bulk() -> None:
                for start in range(0, N_BULK, 1000):
                    await client.many([float(x) for x in range(start, start + 1000)])

            out["bulk_enqueue_per_s"] = await timed(N_BULK, bulk)
        else:
            out["bulk_enqueue_per_s"] = None
        await flush(url)
        if client.bulk:
            for start in range(0, N_DRAIN, 1000):
                await client.many([float(x) for x in range(start, start + 1000)])
        else:
            for x in range(N_DRAIN):
                await client.one(float(x))
        worker = start_worker(system, url, "drain", N_DRAIN)
        try:
            got = await wait_result(url, 600)
        finally:
            stop_worker(worker)
        out["drain_per_s"] = N_DRAIN / (got["last"] - got["first"])
        await flush(url)
        worker = start_worker(system, url, "pickup", N_PICKUP)
        sent: dict[int, tuple[float, float]] = {}
        try:
            await asyncio.sleep(3)  # the worker is up and idle
            for i in range(N_PICKUP):
                called = time.time()
                await client.one(float(i))
                sent[i] = (called, time.time())
                await asyncio.sleep(0.01)
            got = await wait_result(url, 120)
        finally:
            stop_worker(worker)
        started = {int(x): at for x, at in got["starts"]}
        from_return = sorted((at - sent[i][1]) * 1000 for i, at in started.items())
        from_call = sorted((at - sent[i][0]) * 1000 for i, at in started.items())
        out["pickup_p50_ms"], out["pickup_p99_ms"] = (
            statistics.median(from_return),
            p99(from_return),
        )
        out["pickup_call_p50_ms"], out["pickup_call_p99_ms"] = (
            statistics.median(from_call),
            p99(from_call),
        )
    finally:
        await client.close()
    return out


def p99(ordered: list[float]) -> float:
    return ordered[min(len(ordered) - 1, int(len(ordered) * 0.99))]


async def round_trip_ceiling(url: str) -> dict[str, float]:
    """What one client can do at best on this machine, one round trip after another: a bare
    ``PING`` through an ``asyncio.Protocol`` with hiredis (the event loop's own cost, nothing
    else), and through a blocking socket. An enqueue loop awaiting each reply cannot beat the
    first."""
    import hiredis

    port = int(url.rsplit(":", 1)[1].split("/")[0])
    loop = asyncio.get_running_loop()
    waiting: list[asyncio.Future[Any]] = []
    reader = hiredis.Reader()

    class Ping(asyncio.Protocol):
        def data_received(self, data: bytes) -> None:
            reader.feed(data)
            while (reply := reader.gets()) is not False:
                waiting.pop(0).set_result(reply)

    transport, _ = await loop.create_connection(Ping, "127.0.0.1", port)
    ping = b"*1\r\n$4\r\nPING\r\n"
    try:
        started = time.perf_counter()
        for _ in range(N_LOOP):
            answer = loop.create_future()
            waiting.append(answer)
            transport.write(ping)
            await answer
        asyncio_per_s = N_LOOP / (time.perf_counter() - started)
    finally:
        transport.close()
    with socket.create_connection(("127.0.0.1", port)) as sock:
        started = time.perf_counter()
        for _ in range(N_LOOP):
            sock.sendall(ping)
            sock.recv(64)
        blocking_per_s = N_LOOP / (time.perf_counter() - started)
    return {"asyncio_ping_per_s": asyncio_per_s, "blocking_ping_per_s": blocking_per_s}


def table(rows: list[dict[str, Any]]) -> str:
    def f(v: Any, digits: int = 0) -> str:
        return "n/a" if v is None else f"{v:,.{digits}f}"

    lines = [
        "| system | enqueue loop /s | bulk enqueue /s | drain /s | pickup p50 ms | pickup p99 ms |",
        "|---|---:|---:|---:|---:|---:|",
    ]
    for r in rows:
        lines.append(
            f"| {r['system']} | {f(r['enqueue_per_s'])} | {f(r['bulk_enqueue_per_s'])} | "
            f"{f(r['drain_per_s'])} | {f(r['pickup_p50_ms'], 1)} | {f(r['pickup_p99_ms'], 1)} |"
        )
    return "\n".join(lines)


async def bench(systems: list[str], url: str | None) -> list[dict[str, Any]]:
    server = None if url else Server()
    target = url or server.url  # type: ignore[union-attr]
    try:
        rows = []
        await flush(target)  # waits until the server answers
        ceiling = await round_trip_ceiling(target)
        print("... the enqueue loops, in turns", file=sys.stderr, flush=True)
        loops = await measure_loops(systems, target)
        for system in systems:
            print(f"... {system}", file=sys.stderr, flush=True)
            rows.append({**loops[system], **await measure(system, target)})
        print(table(rows))
        print()
        for r in rows:
            print(f"- {r['system']}: {r['settings']}")
        for r in rows:
            shown = ", ".join(f"{rate:,.0f}" for rate in r["enqueue_rounds"])
            print(
                f"- {r['system']}: enqueue loop rounds (/s, sorted): {shown}; pickup measured "
                f"from the enqueue call's start instead of its return: p50 "
                f"{r['pickup_call_p50_ms']:.1f} ms, p99 {r['pickup_call_p99_ms']:.1f} ms"
            )
        for r in rows:
            print(
                f"- {r['system']}: per enqueue of the loop the server's main thread used "
                f"{r['server_cpu_us_per_enqueue']:.0f} us of CPU (its scripts' runs: "
                f"{r['server_script_us_per_enqueue']:.0f} us)"
            )
        print(
            f"- ceiling, {N_LOOP:,} bare PINGs one after another (before the systems): "
            f"{ceiling['asyncio_ping_per_s']:,.0f}/s over asyncio, "
            f"{ceiling['blocking_ping_per_s']:,.0f}/s over a blocking socket"
        )
        rows.append({"system": "ceiling", **ceiling})
        return rows
    finally:
        if server is not None:
            server.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--systems", default=",".join(SETTINGS))
    parser.add_argument("--redis-url", help="an existing server (FLUSHALLed!): default, one's own")
    parser.add_argument("--json", help="also write the rows to this file")
    parser.add_argument("--worker", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker:
        run_worker(args.worker, os.environ["BENCH_URL"])
        return
    systems = [s.strip() for s in args.systems.split(",") if s.strip()]
    unknown = [s for s in systems if s not in SETTINGS]
    if unknown:
        parser.error(f"unknown systems {unknown}; pick from {list(SETTINGS)}")
    rows = asyncio.run(bench(systems, args.redis_url))
    if args.json:
        Path(args.json).write_text(json.dumps(rows, indent=2))


if __name__ == "__main__":
    main()
