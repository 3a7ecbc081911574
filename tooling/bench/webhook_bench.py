"""Webhooks both ways, measured on loopback (bounded: every loop has a count and a time cap).

    uv run python tooling/bench/webhook_bench.py [--requests 3000] [--deliveries 4000]

- **receiver**: ``webhook_app`` over one ``webhook_receiver()`` on the Postgres driver (a scratch
  schema, dropped after), served by ONE uvicorn process; a bounded client (``--concurrency``
  connections, ``--requests`` signed POSTs with distinct event ids, signed before the clock
  starts) measures requests/s and p50/p99 latency. Each 200 means core's signature was verified
  and the job row committed. The baseline is the same uvicorn answering a bare 200 JSON from a
  plain ASGI function, with the same client: the ratio is what verify + enqueue cost.
- **deliveries**: ``--deliveries`` queued ``webhook()`` jobs, ONE worker at ``max_in_flight=200``
  on the memory driver (a Postgres worker at 200 in flight would need 202 connections; the shared
  server allows 100), POSTing to a local endpoint (one uvicorn process answering 200); the rate is
  N over the time from the worker's start until the N-th job settled. Twice: the default (a
  guarded client per attempt, closed after it) and one long-lived ``safe_client`` passed as
  ``client=`` (keep-alive). Then the same on the Postgres driver at ``max_in_flight=40``.

Only 127.0.0.1 is ever dialled.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import socket
import statistics
import subprocess
import sys
import time
import uuid
from collections import Counter
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import httpx

DATABASE_URL = os.environ.get("DATABASE_URL") or "postgresql://postgres@127.0.0.1:5432/test"
SECRET = "bench-secret"
HERE = Path(__file__).resolve()
TIME_CAP_S = 120.0


# --- the served apps (run in the uvicorn subprocess) -------------------------------------------


def receiver_app(schema: str) -> Any:
    from ultimat3.core import install_adapter, verify_webhook_signature
    from ultimat3.http import webhook_app
    from ultimat3.jobs.adapter import JOB_DRIVER
    from ultimat3.jobs.factories.webhook_receiver import webhook_receiver
    from ultimat3.jobs.postgres import postgres_job_driver

    driver = postgres_job_driver(DATABASE_URL, schema=schema, max_size=20)
    install_adapter(JOB_DRIVER, driver)

    def verify(inbound: Any) -> dict[str, Any]:
        checked = verify_webhook_signature(inbound.headers, inbound.body, secret=SECRET)
        return {"event_id": checked.event_id, "payload": json.loads(inbound.body)}

    receiver = webhook_receiver(
        name="bench.events",
        path="/hooks/bench",
        tenant="none",
        verify=verify,
        handle=lambda d: None,
    )
    return webhook_app(receiver)


async def bare_app(scope: Any, receive: Any, send: Any) -> None:
    if scope["type"] == "lifespan":
        while True:
            message = await receive()
            if message["type"] == "lifespan.startup":
                await send({"type": "lifespan.startup.complete"})
            elif message["type"] == "lifespan.shutdown":
                await send({"type": "lifespan.shutdown.complete"})
                return
    more = True
    while more:
        more = (await receive()).get("more_body", False)
    body = b'{"ok":true}'
    headers = [(b"content-type", b"application/json"), (b"content-length", b"11")]
    await send({"type": "http.response.start", "status": 200, "headers": headers})
    await send({"type": "http.response.body", "body": body})


def serve(kind: str, port: int, schema: str) -> None:
    import uvicorn

    app = receiver_app(schema) if kind == "receiver" else bare_app
    uvicorn.run(app, host="127.0.0.1", port=port, log_level="warning", access_log=False)


# --- helpers ----------------------------------------------------------------------------------


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


async def start_server(kind: str, schema: str = "") -> tuple[subprocess.Popen[bytes], int]:
    port = free_port()
    cmd = [sys.executable, str(HERE), "serve", kind, str(port), schema]
    proc = subprocess.Popen(cmd)  # noqa: ASYNC220 - started once, before the clock
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=0.2):
                return proc, port
        except OSError:
            await asyncio.sleep(0.1)
    proc.kill()
    raise SystemExit(f"bench: the {kind} server did not start")


def stop_server(proc: subprocess.Popen[bytes]) -> None:
    proc.terminate()
    try:
        proc.wait(timeout=10)
    except subprocess.TimeoutExpired:
        proc.kill()


async def load(
    url: str, bodies: list[tuple[bytes, dict[str, str]]], concurrency: int
) -> dict[str, float]:
    """POST every body once over ``concurrency`` connections; rate and latency percentiles."""
    latencies: list[float] = []
    failures = 0
    queue = iter(bodies)
    limits = httpx.Limits(max_connections=concurrency, max_keepalive_connections=concurrency)
    async with httpx.AsyncClient(limits=limits, timeout=30) as client:
        await client.post(url, content=bodies[0][0], headers=bodies[0][1])  # warm the route

        async def one_lane() -> None:
            nonlocal failures
            for body, headers in queue:
                started = time.perf_counter()
                response = await client.post(url, content=body, headers=headers)
                latencies.append(time.perf_counter() - started)
                if response.status_code != 200:
                    failures += 1

        started = time.perf_counter()
        await asyncio.wait_for(
            asyncio.gather(*(one_lane() for _ in range(concurrency))), TIME_CAP_S
        )
        elapsed = time.perf_counter() - started
    latencies.sort()
    return {
        "requests": len(latencies),
        "per_s": len(latencies) / elapsed,
        "p50_ms": statistics.median(latencies) * 1000,
        "p99_ms": latencies[int(len(latencies) * 0.99) - 1] * 1000,
        "failures": failures,
    }


# --- the two measurements ---------------------------------------------------------------------


async def bench_receiver(requests: int, concurrency: int) -> None:
    from ultimat3.core import sign_webhook
    from ultimat3.jobs.postgres import migrate

    load_before = os.getloadavg()
    schema = f"x_bench_hooks_{uuid.uuid4().hex[:10]}"
    await migrate(DATABASE_URL, schema=schema)
    bodies = []
    run = uuid.uuid4().hex[:8]
    for i in range(requests + 1):
        body = json.dumps({"id": f"evt-{run}-{i}", "amount": i}).encode()
        headers = sign_webhook(secret=SECRET, event_id=f"evt-{run}-{i}", topic="t", body=body)
        bodies.append((body, headers))
    try:
        proc, port = await start_server("bare")
        try:
            bare = await load(f"http://127.0.0.1:{port}/hooks/bench", bodies, concurrency)
        finally:
            stop_server(proc)
        proc, port = await start_server("receiver", schema)
        try:
            got = await load(f"http://127.0.0.1:{port}/hooks/bench", bodies, concurrency)
        finally:
            stop_server(proc)
        rows = await count_rows(schema)
    finally:
        await drop_schema(schema)
    print(f"\nreceiver: {requests} signed POSTs, {concurrency} connections, one uvicorn process")
    print(f"load average before: {load_before[0]:.2f}; after: {os.getloadavg()[0]:.2f}")
    print(f"{'':28}{'req/s':>10}{'p50 ms':>10}{'p99 ms':>10}{'non-200':>10}")
    for label, r in (("bare ASGI 200 (baseline)", bare), ("webhook_app + Postgres", got)):
        print(
            f"{label:28}{r['per_s']:>10.0f}{r['p50_ms']:>10.2f}{r['p99_ms']:>10.2f}"
            f"{r['failures']:>10.0f}"
        )
    print(f"ratio receiver / baseline: {got['per_s'] / bare['per_s']:.2f}; job rows: {rows}")


async def count_rows(schema: str) -> int:
    import psycopg

    async with await psycopg.AsyncConnection.connect(DATABASE_URL) as conn:
        cur = await conn.execute(f"select count(*) from {schema}.x_jobs")
        row = await cur.fetchone()
        return int(row[0]) if row else 0


async def drop_schema(schema: str) -> None:
    import psycopg

    async with await psycopg.AsyncConnection.connect(DATABASE_URL, autocommit=True) as conn:
        await conn.execute(f"drop schema if exists {schema} cascade")


async def run_deliveries(
    n: int,
    url: str,
    *,
    driver: Any,
    max_in_flight: int,
    client: Callable[[], httpx.AsyncClient] | None,
) -> float:
    from ultimat3.core import swap_adapter
    from ultimat3.jobs import job_worker
    from ultimat3.jobs.adapter import JOB_DRIVER
    from ultimat3.jobs.factories.webhook import (
        WebhookDelivery,
        WebhookEndpoint,
        WebhookEvent,
        webhook,
    )
    from ultimat3.jobs.factories.webhook_ledger import memory_webhook_ledger

    endpoint = WebhookEndpoint(id="ep", url=url, secret=SECRET)
    event = WebhookEvent(id="evt", topic="bench", body={"n": 1})
    run = uuid.uuid4().hex[:8]
    ledger = memory_webhook_ledger()
    deliver = webhook(
        name=f"bench.deliver.{run}",
        tenant="none",
        endpoint=lambda d: endpoint,
        event=lambda d: event,
        ledger=ledger,
        disable_after=10**9,  # a slow attempt on a busy box must not end the run
        allow_private=True,
        client=client,
    )
    with swap_adapter(JOB_DRIVER, driver):
        inputs = [WebhookDelivery(endpoint_id="ep", event_id=f"e{run}{i}") for i in range(n)]
        for start in range(0, n, 1000):
            await deliver.enqueue_many(inputs[start : start + 1000])
        worker = job_worker(
            jobs=[deliver], driver=driver, max_in_flight=max_in_flight, handle_signals=False
        )
        started = time.perf_counter()
        await worker.start()
        deadline = started + TIME_CAP_S
        while worker.stats().completed + worker.stats().retried < n:
            if time.perf_counter() > deadline:
                break
            await asyncio.sleep(0.005)
        elapsed = time.perf_counter() - started
        done = worker.stats().completed
        await worker.stop()
    failed = Counter(a.code for a in ledger.attempts if a.outcome != "delivered")
    if failed:
        print(f"  (attempts that failed, retried: {dict(failed)})")
    return done / elapsed


async def bench_deliveries(n: int) -> None:
    from ultimat3.http import safe_client
    from ultimat3.jobs.drivers.memory import memory_job_driver
    from ultimat3.jobs.postgres import migrate, postgres_job_driver

    load_before = os.getloadavg()
    proc, port = await start_server("bare")
    url = f"http://127.0.0.1:{port}/in"
    rows: list[tuple[str, float]] = []
    try:
        rate = await run_deliveries(
            n, url, driver=memory_job_driver(), max_in_flight=200, client=None
        )
        rows.append(("memory, 200 in flight, a client per attempt", rate))
        limits = httpx.Limits(max_connections=200, max_keepalive_connections=200)
        shared = safe_client(allow_private=True, timeout=10, limits=limits)
        async with shared:
            rate = await run_deliveries(
                n, url, driver=memory_job_driver(), max_in_flight=200, client=lambda: shared
            )
        rows.append(("memory, 200 in flight, one shared client", rate))
        schema = f"x_bench_deliver_{uuid.uuid4().hex[:10]}"
        await migrate(DATABASE_URL, schema=schema)
        driver = postgres_job_driver(DATABASE_URL, schema=schema, max_size=42)
        try:
            shared = safe_client(allow_private=True, timeout=10, limits=limits)
            async with shared:
                rate = await run_deliveries(
                    n, url, driver=driver, max_in_flight=40, client=lambda: shared
                )
            rows.append(("postgres, 40 in flight, one shared client", rate))
        finally:
            await driver.close()
            await drop_schema(schema)
    finally:
        stop_server(proc)
    print(f"\ndeliveries: {n} webhook() jobs, one worker, to one uvicorn endpoint answering 200")
    print(f"load average before: {load_before[0]:.2f}; after: {os.getloadavg()[0]:.2f}")
    for label, rate in rows:
        print(f"{label:48}{rate:>10.0f} deliveries/s")


async def main(argv: list[str]) -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--requests", type=int, default=3000)
    parser.add_argument("--concurrency", type=int, default=8)
    parser.add_argument("--deliveries", type=int, default=4000)
    parser.add_argument("--only", choices=["receiver", "deliveries"])
    args = parser.parse_args(argv)
    print(f"python {sys.version.split()[0]}, {os.cpu_count()} cpus, loopback only")
    if args.only in (None, "receiver"):
        await bench_receiver(args.requests, args.concurrency)
    if args.only in (None, "deliveries"):
        await bench_deliveries(args.deliveries)


def _entry() -> Awaitable[None] | None:
    if len(sys.argv) > 1 and sys.argv[1] == "serve":
        serve(sys.argv[2], int(sys.argv[3]), sys.argv[4] if len(sys.argv) > 4 else "")
        return None
    return main(sys.argv[1:])


if __name__ == "__main__":
    coro = _entry()
    if coro is not None:
        asyncio.run(coro)  # type: ignore[arg-type]
