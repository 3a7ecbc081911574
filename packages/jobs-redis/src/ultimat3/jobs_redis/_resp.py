"""A lean Redis client for the driver's hot path: one asyncio connection speaking RESP2, parsed by
hiredis, its replies matched to its callers in the order they were sent (FIFO), so concurrent
callers pipeline on the one connection without waiting for each other.

It does only what :class:`~ultimat3.jobs_redis._scripts.ScriptRunner` needs (``EVALSHA``,
``SCRIPT LOAD``, and ``AUTH`` / ``SELECT`` on connecting) and keeps the guarantees the driver
gives over redis-py:

- **connect**: lazily, on the first call, bounded by ``connect_timeout``; callers arriving while
  it connects share the attempt. A refused or timed-out connect fails every one of them at once
  with redis-py's ``ConnectionError``; the next call tries again (no backoff, no wait).
- **a dropped connection** (a server restart, a reset) fails the calls on their way with
  ``ConnectionError``, never a hang; the next call connects again.
- **command timeout**: a reply later than ``command_timeout`` after its request fails it and every
  call behind it with redis-py's ``TimeoutError``, and the connection is dropped (never reused
  half-read). One timer serves the whole connection: armed at the oldest call's deadline, moved on
  to the next oldest when it fires early, so a call costs no timer of its own.
- **a server that does not speak Redis** fails the calls with ``InvalidResponse``.
- **cancellation**: a caller that stops waiting leaves its reply to be read and dropped; the
  replies behind it still reach their own callers.
- **writes**: a call made while nothing is on its way is written at once; calls made while others
  are on their way are written together at the loop's next turn (one send for all of them).
- ``close()`` drops the connection and fails whatever was still on its way.
"""

from __future__ import annotations

import asyncio
import socket
from collections import deque
from collections.abc import Callable
from typing import Any, Final, TypeVar, cast

import hiredis
from redis.exceptions import (
    AuthenticationError,
    InvalidResponse,
    ResponseError,
)
from redis.exceptions import (
    ConnectionError as RedisConnectionError,
)
from redis.exceptions import (
    TimeoutError as RedisTimeoutError,
)

_P = TypeVar("_P", bound=asyncio.Protocol)

pack_command: Final[Callable[[tuple[Any, ...]], bytes]] = hiredis.pack_command
"""One command in RESP (hiredis's stub types its argument as a 1-tuple: any length is fine)."""


class _Link(asyncio.Protocol):
    """One connection: its transport, its parser, its callers waiting in send order."""

    def __init__(self, where: str, timeout_s: float) -> None:
        self._where = where
        self._timeout_s = timeout_s
        self._reader = hiredis.Reader(protocolError=InvalidResponse, replyError=ResponseError)
        self._waiting: deque[tuple[asyncio.Future[Any], float]] = deque()
        self._loop = asyncio.get_running_loop()
        self._transport: asyncio.Transport | None = None
        self._buffer: list[bytes] = []
        self._timer: asyncio.TimerHandle | None = None
        self.open = False

    # --- asyncio.Protocol -------------------------------------------------------------------

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        # A stream transport (not necessarily an asyncio.Transport subclass: uvloop's is not).
        self._transport = cast(asyncio.Transport, transport)
        self.open = True
        sock = transport.get_extra_info("socket")
        if sock is not None and sock.family in (socket.AF_INET, socket.AF_INET6):
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)

    def data_received(self, data: bytes) -> None:
        reader = self._reader
        waiting = self._waiting
        reader.feed(data)
        while True:
            try:
                reply = reader.gets()
            except InvalidResponse as exc:
                self._drop(exc)
                return
            if reply is False:
                return
            if not waiting:
                self._drop(InvalidResponse(f"{self._where} sent a reply nobody asked for"))
                return
            answer, _ = waiting.popleft()
            if not answer.done():
                answer.set_result(reply)

    def eof_received(self) -> bool:
        return False  # close the transport; connection_lost fails what is on its way

    def connection_lost(self, exc: Exception | None) -> None:
        reason = f"Connection to {self._where} closed" + ("" if exc is None else f": {exc}")
        self._fail(RedisConnectionError(reason))

    # --- requests ---------------------------------------------------------------------------

    def request(self, data: bytes) -> asyncio.Future[Any]:
        """Sends one packed command; the future answers its reply (a ``ResponseError`` instance
        for an error reply) or fails with the connection."""
        loop = self._loop
        answer: asyncio.Future[Any] = loop.create_future()
        if not self.open:
            answer.set_exception(RedisConnectionError(f"Connection to {self._where} closed"))
            return answer
        waiting = self._waiting
        busy = bool(waiting)
        deadline = loop.time() + self._timeout_s
        waiting.append((answer, deadline))
        if self._timer is None:
            self._timer = loop.call_at(deadline, self._check_deadline)
        if busy:
            if not self._buffer:
                loop.call_soon(self._flush)
            self._buffer.append(data)
        else:
            assert self._transport is not None
            self._transport.write(data)
        return answer

    def _flush(self) -> None:
        buffer, self._buffer = self._buffer, []
        if buffer and self.open and self._transport is not None:
            self._transport.write(b"".join(buffer))

    def _check_deadline(self) -> None:
        self._timer = None
        if not self._waiting:
            return
        deadline = self._waiting[0][1]
        if self._loop.time() >= deadline:
            self._drop(
                RedisTimeoutError(
                    f"Timeout reading from {self._where}: no reply within {self._timeout_s:g}s"
                )
            )
        else:
            self._timer = self._loop.call_at(deadline, self._check_deadline)

    # --- ending -----------------------------------------------------------------------------

    def _drop(self, exc: BaseException) -> None:
        """Fails every call on its way with ``exc`` and aborts the connection."""
        self._fail(exc)
        if self._transport is not None:
            self._transport.abort()

    def _fail(self, exc: BaseException) -> None:
        self.open = False
        self._buffer = []
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        waiting, self._waiting = self._waiting, deque()
        for answer, _ in waiting:
            if not answer.done():
                answer.set_exception(exc)

    def close(self) -> None:
        self._drop(RedisConnectionError(f"Connection to {self._where} closed by the driver"))


class Subscription(asyncio.Protocol):
    """A connection in subscriber mode: each message's data goes to ``on_message``."""

    def __init__(self, where: str, on_message: Callable[[bytes], object]) -> None:
        self._where = where
        self._on_message = on_message
        self._reader = hiredis.Reader(protocolError=InvalidResponse, replyError=ResponseError)
        loop = asyncio.get_running_loop()
        self.subscribed: asyncio.Future[None] = loop.create_future()
        self.ended: asyncio.Future[BaseException] = loop.create_future()
        """Answers (never raises) why the subscription stopped."""
        self._transport: asyncio.Transport | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self._transport = cast(asyncio.Transport, transport)  # uvloop's: no asyncio subclass

    def send(self, data: bytes) -> None:
        assert self._transport is not None
        self._transport.write(data)

    def data_received(self, data: bytes) -> None:
        reader = self._reader
        reader.feed(data)
        while True:
            try:
                reply = reader.gets()
            except InvalidResponse as exc:
                self._end(exc)
                return
            if reply is False:
                return
            if isinstance(reply, ResponseError):
                self._end(AuthenticationError(f"{self._where} refused the subscription: {reply}"))
                return
            if not isinstance(reply, list) or not reply:
                continue  # +OK to AUTH
            kind = reply[0]
            if kind == b"message":
                try:
                    self._on_message(reply[2])
                except Exception as exc:
                    self._end(exc)
                    return
            elif kind == b"subscribe" and not self.subscribed.done():
                self.subscribed.set_result(None)

    def eof_received(self) -> bool:
        return False

    def connection_lost(self, exc: Exception | None) -> None:
        reason = f"Connection to {self._where} closed" + ("" if exc is None else f": {exc}")
        self._end(RedisConnectionError(reason), abort=False)

    def _end(self, exc: BaseException, *, abort: bool = True) -> None:
        if not self.subscribed.done():
            self.subscribed.set_exception(exc)
            self.subscribed.exception()  # retrieved: ended answers it too
        if not self.ended.done():
            self.ended.set_result(exc)
        if abort and self._transport is not None:
            self._transport.abort()

    def close(self) -> None:
        self._end(RedisConnectionError(f"Subscription to {self._where} closed by the driver"))


class RespClient:
    """One lazily (re)opened pipelined connection; ``call(*args)`` answers the reply."""

    def __init__(
        self,
        *,
        host: str | None = None,
        port: int = 6379,
        path: str | None = None,
        db: int = 0,
        username: str | None = None,
        password: str | None = None,
        connect_timeout: float,
        command_timeout: float,
        where: str,
    ) -> None:
        self._host = host
        self._port = port
        self._path = path
        self._db = int(db)
        self._username = username
        self._password = password
        self._connect_timeout = connect_timeout
        self._command_timeout = command_timeout
        self.where = where
        self._link: _Link | None = None
        self._connecting: asyncio.Future[_Link] | None = None

    def __repr__(self) -> str:
        return f"RespClient({self.where!r})"

    def send(self, *args: str | int | float | bytes) -> asyncio.Future[Any] | None:
        """The command sent on the open connection (its future), or ``None`` when there is no
        open connection yet (then ``await call(...)``)."""
        link = self._link
        if link is not None and link.open:
            return link.request(pack_command(args))
        return None

    async def call(self, *args: str | int | float | bytes) -> Any:
        link = self._link
        if link is None or not link.open:
            link = await self._connect()
        return await link.request(pack_command(args))

    async def _connect(self) -> _Link:
        connecting = self._connecting
        if connecting is None:
            connecting = self._connecting = asyncio.ensure_future(self._open())
            connecting.add_done_callback(self._connected)
        return await asyncio.shield(connecting)

    def _connected(self, connecting: asyncio.Future[_Link]) -> None:
        if self._connecting is not connecting:
            return  # close() let it go
        self._connecting = None
        if not connecting.cancelled() and connecting.exception() is None:
            self._link = connecting.result()

    async def _dial(self, made: Callable[[], _P]) -> _P:
        """A connection with protocol ``made()``, within the connect timeout."""
        loop = asyncio.get_running_loop()
        try:
            async with asyncio.timeout(self._connect_timeout):
                if self._path is not None:
                    _, proto = await loop.create_unix_connection(made, self._path)
                else:
                    _, proto = await loop.create_connection(
                        made, self._host or "localhost", self._port
                    )
        except TimeoutError as exc:
            raise RedisConnectionError(
                f"Timeout connecting to {self.where} (connect_timeout {self._connect_timeout:g}s)"
            ) from exc
        except OSError as exc:
            raise RedisConnectionError(f"Error connecting to {self.where}: {exc}") from exc
        return proto

    def _auth(self) -> tuple[str, ...] | None:
        if self._password is None:
            return None
        if self._username is None:
            return ("AUTH", self._password)
        return ("AUTH", self._username, self._password)

    async def _open(self) -> _Link:
        link = await self._dial(lambda: _Link(self.where, self._command_timeout))
        try:
            greeting = []
            auth = self._auth()
            if auth is not None:
                greeting.append(link.request(pack_command(auth)))
            if self._db:
                greeting.append(link.request(pack_command(("SELECT", self._db))))
            for reply in await asyncio.gather(*greeting):
                if isinstance(reply, ResponseError):
                    raise AuthenticationError(f"{self.where} refused the connection: {reply}")
        except BaseException:
            link.close()
            raise
        return link

    async def subscribe(self, channel: str, on_message: Callable[[bytes], object]) -> Subscription:
        """A connection of its own subscribed to ``channel``: ``on_message(data)`` is called from
        the connection's own read callback for each message (no task in between). Returns once the
        server confirmed the subscription (within the command timeout); ``ended`` answers why the
        subscription stopped."""
        sub = await self._dial(lambda: Subscription(self.where, on_message))
        try:
            commands = [pack_command(("SUBSCRIBE", channel))]
            auth = self._auth()
            if auth is not None:
                commands.insert(0, pack_command(auth))
            sub.send(b"".join(commands))
            async with asyncio.timeout(self._command_timeout):
                await asyncio.shield(sub.subscribed)
        except TimeoutError as exc:
            sub.close()
            raise RedisTimeoutError(f"{self.where} did not confirm SUBSCRIBE {channel}") from exc
        except BaseException:
            sub.close()
            raise
        return sub

    async def close(self) -> None:
        connecting, self._connecting = self._connecting, None
        if connecting is not None and not connecting.done():
            connecting.cancel()
        link, self._link = self._link, None
        if link is not None:
            link.close()
