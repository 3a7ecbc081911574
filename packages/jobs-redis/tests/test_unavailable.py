"""Redis down: every call is ``X_DRIVER_UNAVAILABLE`` at once (a short connect timeout, no
retry wait), with the client's error kept as the cause."""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Awaitable, Callable
from typing import Any

import pytest
from redis.exceptions import ConnectionError as RedisConnectionError

from ultimat3.core import XError, new_id
from ultimat3.jobs.adapter import EnqueueRequest
from ultimat3.jobs_redis import RedisJobDriver, redis_job_driver


async def test_an_enqueue_while_redis_is_down_is_unavailable_at_once(
    dead_url: str, req: Callable[..., EnqueueRequest]
) -> None:
    driver = redis_job_driver(dead_url)
    try:
        started = time.monotonic()
        with pytest.raises(XError) as caught:
            await driver.enqueue(req())
        took = time.monotonic() - started
    finally:
        await driver.close()
    assert caught.value.code == "X_DRIVER_UNAVAILABLE"
    assert isinstance(caught.value.__cause__, RedisConnectionError)
    port = dead_url.rsplit(":", 1)[1].split("/")[0]
    assert f"127.0.0.1:{port}" in caught.value.message
    assert caught.value.meta["op"] == "enqueue"
    assert caught.value.status == 503
    assert took < 1.0, f"an enqueue against a dead Redis took {took:.2f}s"


async def _silent(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    """Accepts, reads, never answers."""
    with contextlib.suppress(ConnectionError):
        while await reader.read(1024):
            pass
    writer.close()


async def _http(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    """Answers like a web server, not like Redis."""
    try:
        await reader.read(1024)
        writer.write(b"HTTP/1.1 400 Bad Request\r\nContent-Length: 0\r\n\r\n")
        await writer.drain()
    except ConnectionError:
        pass  # the client hung up at the first byte that was not Redis
    finally:
        writer.close()


@pytest.mark.parametrize("handler", [_silent, _http], ids=["silent", "not-redis"])
async def test_a_server_that_does_not_answer_as_redis_is_unavailable(
    handler: Callable[[asyncio.StreamReader, asyncio.StreamWriter], Awaitable[None]],
    req: Callable[..., EnqueueRequest],
) -> None:
    """A server that accepts and stays silent is bounded by the command timeout (here 0.2 s, one
    immediate retry); one that speaks another protocol is refused at its first reply."""
    handled: list[asyncio.Task[None]] = []

    async def serve(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        assert task is not None
        handled.append(task)
        await handler(reader, writer)

    server = await asyncio.start_server(serve, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    driver = redis_job_driver(f"redis://127.0.0.1:{port}/0", command_timeout=0.2)
    try:
        started = time.monotonic()
        with pytest.raises(XError) as caught:
            await driver.enqueue(req())
        took = time.monotonic() - started
    finally:
        await driver.close()
        server.close()
        await server.wait_closed()
        await asyncio.wait_for(asyncio.gather(*handled, return_exceptions=True), 5)
        await asyncio.sleep(0)  # the handlers' transports close at the loop's next turn
    assert caught.value.code == "X_DRIVER_UNAVAILABLE"
    assert caught.value.__cause__ is not None
    assert f"127.0.0.1:{port}" in caught.value.message
    assert took < 1.5, f"the call took {took:.2f}s"


CALLS: dict[str, Callable[[RedisJobDriver], Awaitable[Any]]] = {
    "enqueue_many": lambda d: d.enqueue_many(
        [
            EnqueueRequest(
                id=new_id(),
                run_id=new_id(),
                name="n",
                queue="q",
                payload=i,
                idempotency_key=str(i),
                max_attempts=1,
            )
            for i in range(1500)
        ]
    ),
    "claim": lambda d: d.claim(queues=["q"], limit=1, worker_id="w", visibility_timeout_ms=1000),
    "ack": lambda d: d.ack("id", worker_id="w", claim="c"),
    "nack": lambda d: d.nack("id", worker_id="w", claim="c", outcome="retry"),
    "heartbeat": lambda d: d.heartbeat("id", worker_id="w", claim="c", visibility_timeout_ms=9),
    "steps.record": lambda d: d.steps.record(
        "id", "s", state="completed", worker_id="w", claim="c"
    ),
    "now_ms": lambda d: d.now_ms(),
    "stats": lambda d: d.stats(),
    "introspect.list": lambda d: d.introspect.list(),
    "leases.acquire": lambda d: d.leases.acquire("k", limit=1, holder="h", ttl_ms=10),
}


@pytest.mark.parametrize("call", sorted(CALLS))
async def test_every_call_while_redis_is_down_is_unavailable(dead_url: str, call: str) -> None:
    driver = redis_job_driver(dead_url)
    try:
        with pytest.raises(XError) as caught:
            await CALLS[call](driver)
    finally:
        await driver.close()
    assert caught.value.code == "X_DRIVER_UNAVAILABLE"
    assert isinstance(caught.value.__cause__, RedisConnectionError)
