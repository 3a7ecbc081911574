"""Fixtures for the Redis driver's tests: a real redis-server (``REDIS_URL``, default
``redis://127.0.0.1:6379/0``), one fresh key prefix per test, every key of it deleted after."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import tempfile
import time
import uuid
from collections.abc import AsyncIterator, Callable, Iterator
from pathlib import Path

import pytest
from redis import Redis as SyncRedis
from redis.asyncio import Redis
from redis.exceptions import RedisError

from ultimat3.core import new_id
from ultimat3.jobs.adapter import EnqueueRequest
from ultimat3.jobs_redis import RedisJobDriver, redis_job_driver

REDIS_URL = os.environ.get("REDIS_URL", "redis://127.0.0.1:6379/0")


def fresh_prefix() -> str:
    return f"t-{uuid.uuid4().hex[:16]}"


async def drop_prefix(client: Redis, prefix: str) -> int:
    """Delete every key of a driver's prefix; answers how many."""
    dropped = 0
    async for key in client.scan_iter(match="{" + prefix + "}:*", count=1000):
        dropped += await client.delete(key)
    return dropped


async def open_driver(prefix: str | None = None) -> RedisJobDriver:
    return redis_job_driver(REDIS_URL, prefix=prefix or fresh_prefix())


async def close_driver(driver: RedisJobDriver) -> None:
    try:
        await drop_prefix(driver.client, driver.prefix)
    finally:
        await driver.close()


@pytest.fixture
def req() -> Callable[..., EnqueueRequest]:
    """Builds an ``EnqueueRequest`` (fresh ids and key unless given)."""
    return make_request


@pytest.fixture
async def driver() -> AsyncIterator[RedisJobDriver]:
    d = await open_driver()
    try:
        yield d
    finally:
        await close_driver(d)


@pytest.fixture
async def client_driver() -> AsyncIterator[RedisJobDriver]:
    """A driver over a ``redis.asyncio.Redis`` passed in (every call through redis-py)."""
    client = Redis.from_url(REDIS_URL)
    d = redis_job_driver(client, prefix=fresh_prefix())
    assert d._r._fast is None
    try:
        yield d
    finally:
        try:
            await close_driver(d)
        finally:
            await client.aclose()


@pytest.fixture(params=["url", "client"])
async def either(request: pytest.FixtureRequest) -> AsyncIterator[RedisJobDriver]:
    """Each test twice: over the driver's own lean connection (a URL), and over a redis-py
    client passed in."""
    if request.param == "client":
        client = Redis.from_url(REDIS_URL)
        d = redis_job_driver(client, prefix=fresh_prefix())
        assert d._r._fast is None
    else:
        client = None
        d = await open_driver()
        assert d._r._fast is not None
    try:
        yield d
    finally:
        try:
            await close_driver(d)
        finally:
            if client is not None:
                await client.aclose()


def make_request(
    name: str = "send",
    *,
    key: str | None = None,
    queue: str = "default",
    payload: object = None,
    max_attempts: int = 3,
    tenant_id: str | None = None,
    delay_ms: int | None = None,
    run_at_ms: int | None = None,
    id: str | None = None,
    concurrency_key: str | None = None,
) -> EnqueueRequest:
    return EnqueueRequest(
        id=id or new_id(),
        run_id=new_id(),
        name=name,
        queue=queue,
        payload={"n": 1} if payload is None else payload,
        idempotency_key=key or new_id(),
        max_attempts=max_attempts,
        tenant_id=tenant_id,
        concurrency_key=concurrency_key,
        delay_ms=delay_ms,
        run_at_ms=run_at_ms,
    )


def spare_port() -> int:
    """A TCP port nothing listens on (bound, read, released)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
    return port


class RedisServer:
    """A redis-server of the test's own, on a spare port, persisting to ``folder`` with
    append-only files fsynced on every write: start it, kill -9 it, stop it, start it again."""

    def __init__(self, folder: Path, *, password: str | None = None) -> None:
        self.folder = folder
        self.port = spare_port()
        self.password = password
        # short (a Unix socket path has room for about 100 bytes; tmp_path can be longer)
        self.socket_path = Path(tempfile.gettempdir()) / f"x-redis-{self.port}.sock"
        self.process: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        auth = "" if self.password is None else f":{self.password}@"
        return f"redis://{auth}127.0.0.1:{self.port}/0"

    def start(self) -> None:
        assert self.process is None, "already running"
        self.process = subprocess.Popen(
            [
                "redis-server",
                "--port", str(self.port),
                "--bind", "127.0.0.1",
                "--dir", str(self.folder),
                "--appendonly", "yes",
                "--appendfsync", "always",
                "--save", "",
                "--daemonize", "no",
                "--logfile", str(self.folder / "redis.log"),
                "--unixsocket", str(self.socket_path),
                *(() if self.password is None else ("--requirepass", self.password)),
            ],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )  # fmt: skip
        deadline = time.monotonic() + 10
        while True:
            try:
                with SyncRedis(
                    port=self.port, password=self.password, socket_connect_timeout=0.2
                ) as probe:
                    if probe.ping():
                        return
            except RedisError:
                pass
            if self.process.poll() is not None or time.monotonic() > deadline:
                log = (self.folder / "redis.log").read_text(errors="replace")[-2000:]
                raise AssertionError(f"redis-server on {self.port} did not come up:\n{log}")
            time.sleep(0.02)

    def kill(self) -> None:
        """SIGKILL: no shutdown, no last write; what fsync put on disk is all that is left."""
        self._end(signal.SIGKILL)

    def stop(self) -> None:
        """SIGTERM: the server's own orderly shutdown."""
        self._end(signal.SIGTERM)

    def _end(self, sig: signal.Signals) -> None:
        process, self.process = self.process, None
        if process is not None:
            process.send_signal(sig)
            process.wait(timeout=10)


@pytest.fixture
def redis_server(tmp_path: Path) -> Iterator[RedisServer]:
    server = RedisServer(tmp_path)
    server.start()
    try:
        yield server
    finally:
        server.kill()
        server.socket_path.unlink(missing_ok=True)


@pytest.fixture
def locked_server(tmp_path: Path) -> Iterator[RedisServer]:
    """A redis-server of the test's own that asks for a password (``s3cret pass``), listening on
    TCP and on a Unix socket."""
    server = RedisServer(tmp_path, password="s3cret pass")
    server.start()
    try:
        yield server
    finally:
        server.kill()
        server.socket_path.unlink(missing_ok=True)


@pytest.fixture
def dead_url() -> str:
    """A Redis URL on a port nothing listens on."""
    return f"redis://127.0.0.1:{spare_port()}/0"
