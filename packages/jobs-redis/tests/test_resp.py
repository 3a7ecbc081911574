"""The lean connection the driver runs its scripts on (``_resp.RespClient``), against real
redis-servers: concurrent callers pipelined on one connection each get their own reply (errors
included), a timed-out call never leaves a half-read connection behind, a dropped or killed server
fails the calls at once and the next call connects again, ``AUTH`` / ``SELECT`` / Unix sockets
work, and ``close()`` fails what is on its way."""

from __future__ import annotations

import asyncio
import os
import socket
import time
import uuid
from collections.abc import AsyncIterator, Callable
from typing import Any
from urllib.parse import urlsplit

import pytest
from redis import Redis as SyncRedis
from redis.asyncio import Redis
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import ResponseError
from redis.exceptions import TimeoutError as RedisTimeoutError

from ultimat3.core import XError
from ultimat3.jobs.adapter import EnqueueRequest
from ultimat3.jobs_redis import RedisJobDriver, redis_job_driver
from ultimat3.jobs_redis._resp import RespClient

REDIS_URL = os.environ.get("REDIS_URL", "redis://127.0.0.1:6379/0")
Req = Callable[..., EnqueueRequest]

_URL = urlsplit(REDIS_URL)
HOST, PORT = _URL.hostname or "127.0.0.1", _URL.port or 6379
DB = int(_URL.path.strip("/") or 0)


def lean(*, command_timeout: float = 5.0, connect_timeout: float = 0.5) -> RespClient:
    return RespClient(
        host=HOST,
        port=PORT,
        db=DB,
        connect_timeout=connect_timeout,
        command_timeout=command_timeout,
        where=f"{HOST}:{PORT}/{DB}",
    )


@pytest.fixture
async def client() -> AsyncIterator[RespClient]:
    c = lean()
    try:
        yield c
    finally:
        await c.close()


@pytest.fixture
def key() -> str:
    return f"t-resp-{uuid.uuid4().hex}"


async def test_concurrent_calls_on_one_connection_each_get_their_own_reply(
    client: RespClient, key: str
) -> None:
    """500 calls at once, one in three refused by the server: every caller gets its own reply,
    in whatever order the tasks run, over one connection."""
    await client.call("SET", key, "not a hash")
    try:

        async def one(i: int) -> object:
            if i % 3 == 0:
                return await client.call("HGET", key, "f")  # WRONGTYPE, as a reply
            return await client.call("ECHO", f"m{i}")

        link = client._link
        replies = await asyncio.gather(*(one(i) for i in range(500)))
        assert client._link is link  # one connection throughout
        for i, reply in enumerate(replies):
            if i % 3 == 0:
                assert isinstance(reply, ResponseError) and str(reply).startswith("WRONGTYPE")
            else:
                assert reply == f"m{i}".encode()
    finally:
        await client.call("DEL", key)


async def test_replies_split_across_reads_reach_their_callers_whole(
    client: RespClient, key: str
) -> None:
    """Megabyte values among small replies: each arrives over many reads, parsed as it comes."""
    big = [bytes([65 + i]) * (1_000_000 + i) for i in range(4)]
    try:
        await asyncio.gather(*(client.call("SET", f"{key}:{i}", v) for i, v in enumerate(big)))
        replies = await asyncio.gather(
            *(
                client.call("GET", f"{key}:{i // 2}") if i % 2 == 0 else client.call("ECHO", str(i))
                for i in range(8)
            )
        )
        for i, reply in enumerate(replies):
            assert reply == (big[i // 2] if i % 2 == 0 else str(i).encode())
    finally:
        await client.call("DEL", *(f"{key}:{i}" for i in range(4)))


async def test_callers_arriving_while_it_connects_share_one_connection() -> None:
    c = lean()
    try:
        ids = await asyncio.gather(*(c.call("CLIENT", "ID") for _ in range(50)))
        assert len(set(ids)) == 1
    finally:
        await c.close()


async def test_concurrent_enqueues_through_the_driver_each_get_their_own_row(
    driver: RedisJobDriver, req: Req
) -> None:
    requests = [req(payload={"i": i}) for i in range(200)]
    results = await asyncio.gather(*(driver.enqueue(r) for r in requests))
    assert [r.id for r in results] == [r.id for r in requests]
    assert not any(r.deduped for r in results)
    rows = await asyncio.gather(*(driver.introspect.show(r.id) for r in requests))
    assert [row.payload for row in rows] == [{"i": i} for i in range(200)]


async def test_a_reply_past_the_command_timeout_fails_the_calls_and_drops_the_connection(
    key: str,
) -> None:
    """BLPOP 2 s under a 0.2 s timeout: it and the call behind it fail in time; the next call is
    answered with ITS reply on a fresh connection (a reused one would hand it BLPOP's nil)."""
    c = lean(command_timeout=0.2)
    try:
        first = c._link or await c._connect()
        started = time.monotonic()
        # bound first: mypy cannot type an unpacking straight from this gather overload
        replies = await asyncio.gather(
            c.call("BLPOP", key, "2"), c.call("ECHO", "behind"), return_exceptions=True
        )
        stuck, behind = replies
        took = time.monotonic() - started
        assert isinstance(stuck, RedisTimeoutError) and isinstance(behind, RedisTimeoutError)
        assert "no reply within 0.2s" in str(stuck)
        assert took < 1.0, f"the timeout took {took:.2f}s"
        assert await c.call("ECHO", "after") == b"after"
        assert c._link is not first
    finally:
        await c.close()


async def test_the_command_timeout_bounds_each_call_not_the_connection(key: str) -> None:
    """Calls one after another for longer than the timeout, each answered in time (a BLPOP
    answering after 0.1 s among them): none fails, and the connection is kept."""
    c = lean(command_timeout=0.3)
    try:
        assert await c.call("ECHO", "0") == b"0"
        link = c._link
        deadline = time.monotonic() + 1.0
        while time.monotonic() < deadline:
            assert await c.call("BLPOP", key, "0.1") is None
            assert await c.call("ECHO", "x") == b"x"
        assert c._link is link
    finally:
        await c.close()


async def test_a_server_that_hangs_up_fails_the_calls_on_their_way_at_once() -> None:
    """The peer reads the calls and closes: every call fails with ConnectionError at once (never
    the 10 s command timeout), and the next call connects again."""
    hangups: list[int] = []

    async def hang_up(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await reader.read(1)
        hangups.append(1)
        writer.close()

    server = await asyncio.start_server(hang_up, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    c = RespClient(
        host="127.0.0.1", port=port, connect_timeout=0.5, command_timeout=10.0, where="peer"
    )
    try:
        started = time.monotonic()
        failed = await asyncio.gather(*(c.call("PING") for _ in range(20)), return_exceptions=True)
        assert all(isinstance(f, RedisConnectionError) for f in failed), failed
        assert time.monotonic() - started < 1.0
        with pytest.raises(RedisConnectionError):
            await c.call("PING")
        assert len(hangups) == 2  # the second call connected again
    finally:
        await c.close()
        server.close()
        await server.wait_closed()
        await asyncio.sleep(0.01)


async def test_a_connect_that_does_not_complete_is_unavailable_within_the_connect_timeout(
    req: Req,
) -> None:
    """A listener whose backlog is full drops the SYN: the connect hangs, the driver does not."""
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(0)
    port = listener.getsockname()[1]
    filler = socket.socket()
    filler.connect(("127.0.0.1", port))
    driver = redis_job_driver(f"redis://127.0.0.1:{port}/0", connect_timeout=0.2)
    try:
        started = time.monotonic()
        with pytest.raises(XError) as caught:
            await driver.enqueue(req())
        took = time.monotonic() - started
    finally:
        await driver.close()
        filler.close()
        listener.close()
    assert caught.value.code == "X_DRIVER_UNAVAILABLE"
    assert "connect_timeout 0.2s" in caught.value.message
    assert 0.15 < took < 1.0, f"took {took:.2f}s"


async def test_a_killed_server_is_unavailable_at_once_then_the_same_driver_recovers(
    redis_server: Any, req: Req
) -> None:
    driver = redis_job_driver(redis_server.url)
    try:
        first = await driver.enqueue(req())
        await asyncio.to_thread(redis_server.kill)
        for _ in range(3):
            started = time.monotonic()
            with pytest.raises(XError) as caught:
                await driver.enqueue(req())
            assert time.monotonic() - started < 1.0
            assert caught.value.code == "X_DRIVER_UNAVAILABLE"
            assert isinstance(caught.value.__cause__, RedisConnectionError)
        await asyncio.to_thread(redis_server.start)
        again = await driver.enqueue(req())
        assert not again.deduped
        assert (await driver.introspect.show(first.id)) is not None  # fsynced, kept
        assert (await driver.stats())[0].ready == 2
    finally:
        await driver.close()


async def test_a_connection_the_server_dropped_while_idle_is_replaced_without_an_error(
    redis_server: Any, req: Req
) -> None:
    driver = redis_job_driver(redis_server.url)
    admin = Redis.from_url(redis_server.url)
    try:
        await driver.enqueue(req())
        fast = driver._r._fast
        assert fast is not None
        lean_id = await fast.call("CLIENT", "ID")
        assert await admin.client_kill_filter(_id=lean_id) == 1
        await asyncio.sleep(0.05)  # the loop reads the hang-up while the driver is idle
        assert not (await driver.enqueue(req())).deduped
        assert await fast.call("CLIENT", "ID") != lean_id
    finally:
        await driver.close()
        await admin.aclose()


async def test_close_fails_the_calls_on_their_way_and_a_later_call_connects_again(
    client: RespClient, key: str
) -> None:
    waiting = [asyncio.ensure_future(client.call("BLPOP", key, "5")) for _ in range(5)]
    await asyncio.sleep(0.05)
    started = time.monotonic()
    await client.close()
    failed = await asyncio.gather(*waiting, return_exceptions=True)
    assert all(isinstance(f, RedisConnectionError) for f in failed), failed
    assert time.monotonic() - started < 0.5
    assert client._link is None
    assert await client.call("ECHO", "again") == b"again"


@pytest.mark.parametrize("how", ["tcp", "unix"])
async def test_auth_and_select_on_connecting(locked_server: Any, req: Req, how: str) -> None:
    password = "s3cret%20pass"  # URL-quoted
    url = (
        f"redis://:{password}@127.0.0.1:{locked_server.port}/3"
        if how == "tcp"
        else f"unix://:{password}@{locked_server.socket_path}?db=3"
    )
    driver = redis_job_driver(url)
    try:
        queued = await driver.enqueue(req())
        with SyncRedis(port=locked_server.port, password="s3cret pass", db=3) as check:
            assert check.exists("{" + driver.prefix + "}:j:" + queued.id)
        with SyncRedis(port=locked_server.port, password="s3cret pass", db=0) as check:
            assert check.dbsize() == 0
    finally:
        await driver.close()
    wrong = redis_job_driver(url.replace(password, "wrong"))
    try:
        with pytest.raises(XError) as caught:
            await wrong.enqueue(req())
        assert caught.value.code == "X_DRIVER_UNAVAILABLE"
        assert "wrong" not in caught.value.message
    finally:
        await wrong.close()


class _PlainTransport:
    """A stream transport that is no ``asyncio.Transport`` subclass (uvloop's is not)."""

    def __init__(self) -> None:
        self.written: list[bytes] = []
        self.aborted = False

    def get_extra_info(self, name: str, default: Any = None) -> Any:
        return default

    def write(self, data: bytes) -> None:
        self.written.append(data)

    def abort(self) -> None:
        self.aborted = True


async def test_a_transport_that_is_no_asyncio_transport_subclass_carries_the_calls() -> None:
    """uvloop's transports do not subclass ``asyncio.Transport``: the connection and the
    subscription take them as they are (no ``isinstance`` check refusing them)."""
    from ultimat3.jobs_redis._resp import Subscription, _Link

    transport = _PlainTransport()
    link = _Link("plain", 5.0)
    link.connection_made(transport)  # type: ignore[arg-type]
    answer = link.request(b"*1\r\n$4\r\nPING\r\n")
    assert transport.written == [b"*1\r\n$4\r\nPING\r\n"]
    link.data_received(b"+PONG\r\n")
    assert await answer == b"PONG"
    link.close()
    assert transport.aborted

    messages: list[bytes] = []
    sub = Subscription("plain", messages.append)
    sub.connection_made(_PlainTransport())  # type: ignore[arg-type]
    sub.data_received(
        b"*3\r\n$9\r\nsubscribe\r\n$1\r\nc\r\n:1\r\n*3\r\n$7\r\nmessage\r\n$1\r\nc\r\n$1\r\nq\r\n"
    )
    await sub.subscribed
    assert messages == [b"q"]
    sub.close()
