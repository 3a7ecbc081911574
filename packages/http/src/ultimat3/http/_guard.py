"""The outbound address guard: ``GuardedTransport`` and ``safe_client()``.

Every request (so every redirect hop a client follows) is resolved here, EVERY answer is judged by
``is_public_address`` and the request is then sent to the very address that was judged — the URL's
host is replaced by that address, the ``Host`` header and the TLS server name keep the name — so
no second lookup can answer something else (DNS rebinding). A refusal is
``X_WEBHOOK_ENDPOINT_INVALID``, raised before anything connects.
"""

from __future__ import annotations

import asyncio
import ipaddress
import re
import socket
import ssl
from collections.abc import Awaitable, Callable, Sequence
from typing import Any, Final

import httpx

from ultimat3.core import XError

from ._address import is_public_address, parse_address

Resolver = Callable[[str, int], Awaitable[Sequence[str]]]
"""``await resolver(host, port)`` -> the addresses ``host`` resolves to (literals, unbracketed)."""

DEFAULT_RESOLVE_TIMEOUT_S: Final = 10.0
_NUMERIC_V4 = re.compile(r"[0-9a-fA-FxX.]+")
_FIX = (
    "give an https URL whose host resolves only to public addresses; for local development and "
    "tests pass allow_private=True"
)


_SSL_CONTEXT: ssl.SSLContext | None = None


def default_ssl_context() -> ssl.SSLContext:
    """One verifying TLS context for every guarded transport of the process (building one loads
    the CA bundle: tens of milliseconds, too much to pay per delivery)."""
    global _SSL_CONTEXT
    if _SSL_CONTEXT is None:
        _SSL_CONTEXT = httpx.create_ssl_context()
    return _SSL_CONTEXT


async def system_resolver(host: str, port: int) -> list[str]:
    """The system's resolver (``getaddrinfo``), each address once, in its order."""
    infos = await asyncio.get_running_loop().getaddrinfo(
        host, port, type=socket.SOCK_STREAM, proto=socket.IPPROTO_TCP
    )
    out: list[str] = []
    for info in infos:
        address = str(info[4][0])
        if address not in out:
            out.append(address)
    return out


def numeric_host(host: str) -> str | None:
    """The address a numeric host spells, in any form the C library's ``inet_aton`` reads
    (``127.1``, ``0x7f000001``, ``2130706433``, ``017700000001``) or an IPv6 literal."""
    parsed = parse_address(host)
    if parsed is not None:
        return str(parsed) if not isinstance(parsed, ipaddress.IPv6Address) else parsed.compressed
    if _NUMERIC_V4.fullmatch(host):
        try:
            return socket.inet_ntoa(socket.inet_aton(host))
        except OSError:
            return None
    return None


def refused(host: str, address: str | None, why: str) -> XError:
    """The guard's refusal: names the host and the address, never the URL's path or query."""
    return XError(
        "X_WEBHOOK_ENDPOINT_INVALID",
        f"refused to connect to {host!r}: {why}",
        fix=_FIX,
        meta={"host": host, "address": address},
    )


class GuardedTransport(httpx.AsyncBaseTransport):
    """An httpx transport that resolves, judges and pins every request's address.

    ``inner`` sends the pinned request (default: one ``httpx.AsyncHTTPTransport`` per TLS server
    name, so a connection opened for one name is never reused for another on the same address).
    ``allow_address`` is the policy (default ``is_public_address``; ``allow_private=True`` allows
    every address). ``resolver`` answers a name's addresses (default ``getaddrinfo``)."""

    def __init__(
        self,
        *,
        allow_private: bool = False,
        resolver: Resolver | None = None,
        allow_address: Callable[[str], bool] | None = None,
        inner: httpx.AsyncBaseTransport | None = None,
        resolve_timeout_s: float = DEFAULT_RESOLVE_TIMEOUT_S,
        limits: httpx.Limits | None = None,
    ) -> None:
        self.allow_private = allow_private
        self._resolver: Resolver = resolver or system_resolver
        if allow_address is not None:
            self._allow = allow_address
        elif allow_private:
            self._allow = _any_address
        else:
            self._allow = is_public_address
        self._inner = inner
        self._inners: dict[str, httpx.AsyncHTTPTransport] = {}
        self._resolve_timeout_s = resolve_timeout_s
        self._limits = limits or httpx.Limits(max_connections=200, max_keepalive_connections=50)

    async def resolve(self, host: str, port: int) -> str:
        """The address a request to ``host`` goes to, once every answer passed the policy."""
        literal = numeric_host(host)
        if literal is not None:
            addresses: Sequence[str] = [literal]
        else:
            try:
                addresses = await asyncio.wait_for(
                    self._resolver(host, port), timeout=self._resolve_timeout_s
                )
            except (OSError, TimeoutError) as exc:
                raise XError(
                    "X_WEBHOOK_DELIVERY_FAILED",
                    f"could not resolve {host!r}: {type(exc).__name__}",
                    fix="check the endpoint's host name; the delivery is retried",
                    meta={"host": host},
                ) from exc
        if not addresses:
            raise refused(host, None, "it resolves to no address")
        for address in addresses:
            if not self._allow(address):
                raise refused(host, address, f"it resolves to the non-public address {address}")
        return addresses[0]

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        url = request.url
        host = url.host
        if not host:
            raise refused("", None, "the URL has no host")
        if url.scheme not in ("http", "https"):
            raise refused(host, None, f"the scheme {url.scheme!r} is not http or https")
        port = url.port or (443 if url.scheme == "https" else 80)
        address = await self.resolve(host, port)
        extensions: dict[str, Any] = dict(request.extensions)
        if url.scheme == "https" and numeric_host(host) is None:
            extensions.setdefault("sni_hostname", host)
        pinned = httpx.Request(
            request.method,
            url.copy_with(host=address),
            headers=request.headers,  # Host keeps the name the URL gave
            stream=request.stream,
            extensions=extensions,
        )
        return await self._send(pinned, host if url.scheme == "https" else "")

    async def _send(self, request: httpx.Request, server_name: str) -> httpx.Response:
        if self._inner is not None:
            return await self._inner.handle_async_request(request)
        inner = self._inners.get(server_name)
        if inner is None:
            if len(self._inners) >= 512:  # bound the per-name pools; the oldest goes
                oldest = next(iter(self._inners))
                await self._inners.pop(oldest).aclose()
            inner = self._inners[server_name] = httpx.AsyncHTTPTransport(
                verify=default_ssl_context(), limits=self._limits
            )
        return await inner.handle_async_request(request)

    async def aclose(self) -> None:
        if self._inner is not None:
            await self._inner.aclose()
        inners, self._inners = self._inners, {}
        for inner in inners.values():
            await inner.aclose()


def _any_address(address: str) -> bool:
    return True


def safe_client(
    *,
    allow_private: bool = False,
    timeout: float | httpx.Timeout = 30.0,
    follow_redirects: bool = False,
    max_redirects: int = 5,
    resolver: Resolver | None = None,
    allow_address: Callable[[str], bool] | None = None,
    transport: httpx.AsyncBaseTransport | None = None,
    limits: httpx.Limits | None = None,
    headers: dict[str, str] | None = None,
) -> httpx.AsyncClient:
    """An ``httpx.AsyncClient`` that sends only to public addresses (see ``GuardedTransport``).

    Redirects are off by default; with ``follow_redirects=True`` every hop is resolved and judged
    the same way before it connects. No proxy from the environment is used (it would dial on the
    guard's behalf)."""
    guarded = GuardedTransport(
        allow_private=allow_private,
        resolver=resolver,
        allow_address=allow_address,
        inner=transport,
        limits=limits,
    )
    return httpx.AsyncClient(
        transport=guarded,
        timeout=timeout,
        follow_redirects=follow_redirects,
        max_redirects=max_redirects,
        trust_env=False,
        headers=headers,
    )
