"""Wake a worker the moment a job is due, instead of at its next poll.

Every script that makes a job due now (an enqueue, a retry or release without delay, a wake, a
promotion, a requeue, a resumed queue) publishes the queue's name on the driver's ``{x}:due``
channel. A :class:`RedisWakeListener` subscribes to it and calls ``wake`` (a worker's
``worker.wake``) for the queues it serves, so an idle worker passes at once. On a driver made from
a URL the subscription is a lean connection of its own whose read callback calls ``wake`` directly
(no task in between); over a ``redis.asyncio.Redis`` passed in, that client's pub/sub::

    worker = job_worker(jobs=[...], driver=driver)
    await worker.start()
    async with redis_wake_listener(driver, worker.wake, queues=worker.queues):
        ...                                  # serve until the app stops

The listener is only a hint: a message lost (a disconnection, a listener restarting) costs the
wait until the worker's next poll, never a job. While Redis is down it logs
``jobs.driver.unavailable`` and subscribes again, backing off up to 5 s; after every
(re)subscription it wakes the worker once, for what it may have missed.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Callable, Collection
from types import TracebackType
from typing import Any

from redis.asyncio import Redis
from redis.exceptions import RedisError

from ultimat3.core import XError, log_event

from ._codec import text
from ._resp import RespClient, Subscription

_BACKOFF_START_S = 0.1
_BACKOFF_MAX_S = 5.0


class RedisWakeListener:
    """Calls ``wake()`` each time a job of ``queues`` (every queue when ``None``) becomes due on
    the driver. ``start()`` / ``stop()``, or ``async with``. Built from what the driver holds —
    its ``redis.asyncio`` client, its lean client (``fast``, when made from a URL) and its key
    prefix — not from the driver: ``redis_wake_listener(driver, wake)`` does that."""

    def __init__(
        self,
        wake: Callable[[], object],
        *,
        client: Redis,
        fast: RespClient | None,
        prefix: str,
        queues: Collection[str] | None = None,
    ) -> None:
        if not callable(wake):
            raise XError(
                "X_CONFIG_INVALID",
                f"redis_wake_listener: wake {wake!r} is not callable",
                fix="pass the worker's wake method: redis_wake_listener(driver, worker.wake)",
            )
        self._client = client
        self._fast = fast
        self._wake = wake
        self._queues = None if queues is None else frozenset(queues)
        self._channel = "{" + prefix + "}:due"
        self._task: asyncio.Task[None] | None = None
        self._subscribed = asyncio.Event()
        self.woken = 0
        """How many times the listener called ``wake``."""

    def __repr__(self) -> str:
        return f"RedisWakeListener(channel={self._channel!r}, queues={self._queues!r})"

    @property
    def channel(self) -> str:
        return self._channel

    async def start(self, *, timeout_s: float = 5.0) -> None:
        """Subscribe; returns once subscribed (or after ``timeout_s``, still trying)."""
        if self._task is None:
            self._task = asyncio.ensure_future(self._listen())
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self._subscribed.wait(), timeout=timeout_s)

    async def stop(self) -> None:
        task, self._task = self._task, None
        if task is not None:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task
        self._subscribed.clear()

    async def __aenter__(self) -> RedisWakeListener:
        await self.start()
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.stop()

    def _poke(self) -> None:
        self.woken += 1
        self._wake()

    def _on_message(self, data: bytes) -> None:
        if self._queues is None or text(data) in self._queues:
            self._poke()

    async def _listen(self) -> None:
        fast = self._fast
        if fast is None:
            await self._listen_through_client()
            return
        backoff = _BACKOFF_START_S
        while True:
            sub: Subscription | None = None
            try:
                sub = await fast.subscribe(self._channel, self._on_message)
                self._subscribed.set()
                backoff = _BACKOFF_START_S
                self._poke()  # whatever was announced while we were not listening
                raise await sub.ended
            except (RedisError, OSError) as exc:
                backoff = await self._lost(exc, backoff)
            finally:
                if sub is not None:
                    sub.close()

    async def _lost(self, exc: BaseException, backoff: float) -> float:
        """The subscription is gone: log it, wait ``backoff``, answer the next wait."""
        self._subscribed.clear()
        log_event(
            "jobs.driver.unavailable",
            driver="redis",
            channel=self._channel,
            error=f"{type(exc).__name__}: {exc}",
        )
        await asyncio.sleep(backoff)
        return min(backoff * 2, _BACKOFF_MAX_S)

    async def _listen_through_client(self) -> None:
        """The same over a ``redis.asyncio.Redis`` passed in: its pub/sub."""
        backoff = _BACKOFF_START_S
        while True:
            pubsub: Any = self._client.pubsub(ignore_subscribe_messages=True)
            try:
                await pubsub.subscribe(self._channel)
                self._subscribed.set()
                backoff = _BACKOFF_START_S
                self._poke()  # whatever was announced while we were not listening
                while True:
                    message = await pubsub.get_message(timeout=1.0)
                    if message is None:
                        continue
                    if self._queues is None or text(message["data"]) in self._queues:
                        self._poke()
            except (RedisError, OSError) as exc:
                backoff = await self._lost(exc, backoff)
            finally:
                with contextlib.suppress(RedisError, OSError):
                    await (getattr(pubsub, "aclose", None) or pubsub.close)()  # redis 5.0.0
