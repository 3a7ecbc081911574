"""Test doubles for ``ultimat3.http``: a tiny HTTP/1.1 server on loopback, a transport that
records what it was asked to connect to, and a stub resolver.

``LoopbackServer`` binds to a loopback address only (``127.0.0.0/8`` or ``::1``): it refuses any
other host, so a test built on it cannot send traffic off the machine.

    async with loopback_server(lambda req: (200, {}, b"ok")) as server:
        async with httpx.AsyncClient() as client:
            await client.post(server.url("/hook"), content=b"{}")
        assert server.requests[0].body == b"{}"
"""

from __future__ import annotations

import asyncio
import contextlib
import inspect
import ipaddress
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import httpx

from ultimat3.core import XError

Reply = tuple[int, Mapping[str, str], bytes]
Handler = Callable[["ReceivedRequest"], Reply | Awaitable[Reply]]


@dataclass(frozen=True, slots=True)
class ReceivedRequest:
    """One request the server read."""

    method: str
    path: str
    headers: httpx.Headers
    body: bytes


@dataclass
class LoopbackServer:
    """A running server: ``url(path)``, the ``requests`` it read, the ``connections`` it took."""

    host: str
    port: int = 0
    requests: list[ReceivedRequest] = field(default_factory=list)
    connections: int = 0

    def url(self, path: str = "/") -> str:
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"http://{host}:{self.port}{path}"


def _loopback(host: str) -> str:
    try:
        if ipaddress.ip_address(host).is_loopback:
            return host
    except ValueError:
        pass
    raise XError(
        "X_CONFIG_INVALID",
        f"loopback_server: {host!r} is not a loopback address",
        fix="bind the test server to 127.0.0.1 (or another 127.x address) or ::1",
    )


async def _read_request(reader: asyncio.StreamReader) -> ReceivedRequest | None:
    try:
        head = await reader.readuntil(b"\r\n\r\n")
    except (asyncio.IncompleteReadError, ConnectionError):
        return None
    lines = head.decode("latin-1").split("\r\n")
    method, path, _ = lines[0].split(" ", 2)
    pairs = [tuple(line.split(":", 1)) for line in lines[1:] if ":" in line]
    headers = httpx.Headers([(k.strip(), v.strip()) for k, v in pairs])
    length = int(headers.get("content-length", "0"))
    body = await reader.readexactly(length) if length else b""
    return ReceivedRequest(method=method, path=path, headers=headers, body=body)


@contextlib.asynccontextmanager
async def loopback_server(
    handler: Handler, *, host: str = "127.0.0.1", port: int = 0
) -> AsyncIterator[LoopbackServer]:
    """Serve ``handler(request) -> (status, headers, body)`` (sync or async) on a loopback
    address until the block ends. Keep-alive is honoured; every connection is counted."""
    state = LoopbackServer(host=_loopback(host))
    tasks: set[asyncio.Task[Any]] = set()

    async def serve(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        state.connections += 1
        task = asyncio.current_task()
        if task is not None:
            tasks.add(task)
        try:
            while True:
                request = await _read_request(reader)
                if request is None:
                    return
                state.requests.append(request)
                reply = handler(request)
                status, headers, body = await reply if inspect.isawaitable(reply) else reply
                out = [f"HTTP/1.1 {status} X", f"content-length: {len(body)}"]
                out += [f"{k}: {v}" for k, v in headers.items()]
                writer.write(("\r\n".join(out) + "\r\n\r\n").encode("latin-1") + body)
                await writer.drain()
        except (ConnectionError, asyncio.CancelledError):
            return
        finally:
            writer.close()
            if task is not None:
                tasks.discard(task)

    server = await asyncio.start_server(serve, host=state.host, port=port)
    state.port = server.sockets[0].getsockname()[1]
    try:
        yield state
    finally:
        server.close()
        for task in list(tasks):
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        await server.wait_closed()


class RecordingTransport(httpx.AsyncBaseTransport):
    """Records the URL of every request it is handed (the address a guarded request would dial),
    then sends it on with a plain ``httpx.AsyncHTTPTransport``."""

    def __init__(self) -> None:
        self.dialled: list[str] = []
        self._inner = httpx.AsyncHTTPTransport()

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        self.dialled.append(str(request.url))
        return await self._inner.handle_async_request(request)

    async def aclose(self) -> None:
        await self._inner.aclose()


def stub_resolver(
    answers: Mapping[str, Sequence[str]],
) -> Callable[[str, int], Awaitable[Sequence[str]]]:
    """A resolver answering ``answers[host]`` (no lookup leaves the process); an unknown name is
    ``OSError`` as a real resolver's NXDOMAIN."""

    async def resolve(host: str, port: int) -> Sequence[str]:
        try:
            return list(answers[host.lower()])
        except KeyError:
            raise OSError(f"stub resolver: {host!r} is not a known name") from None

    return resolve
