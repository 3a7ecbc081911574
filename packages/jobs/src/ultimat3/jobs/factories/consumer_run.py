"""The run of one consumer key: the values its callbacks receive (``ConsumerSource``,
``ConsumerBatch``), the cursor port (``CursorStore``, ``ConsumerCursor``), and the loop that reads,
batches, lingers and commits until the stream ends or the run's signal aborts (``ConsumerRun``).
``consumer()`` (``consumer.py``) declares the job over it.
"""

from __future__ import annotations

import asyncio
import contextlib
import inspect
import json
from collections.abc import AsyncIterable, AsyncIterator, Awaitable, Callable, Iterable, Sequence
from contextlib import AbstractAsyncContextManager
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Final, Generic, Literal, Protocol, TypeVar, runtime_checkable

from pydantic import BaseModel, ConfigDict

from ultimat3.core import Signal, XError, current_clock
from ultimat3.jobs import JobContext

T = TypeVar("T")

CONSUMER_LINGER_MS: Final = 50
"""A partly filled batch commits after this many milliseconds without a next item."""


class ConsumerInput(BaseModel):
    """A consumer run's input: the key it reads."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    key: str


@dataclass(frozen=True, slots=True)
class ConsumerSource:
    """What ``open`` and ``lag`` receive: the key, the committed cursor, the run's signal."""

    key: str
    cursor: str | None
    signal: Signal


@dataclass(frozen=True, slots=True)
class ConsumerBatch(Generic[T]):
    """What ``handle`` receives: the key, the items, the cursor before them, the signal."""

    key: str
    items: tuple[T, ...]
    cursor: str | None
    signal: Signal


@runtime_checkable
class CursorStore(Protocol):
    """Where a consumer keeps its cursor: one string per key (``None``: start from scratch)."""

    def load(self, key: str) -> Awaitable[str | None] | str | None: ...

    def save(self, key: str, next: str) -> Awaitable[None] | None: ...


@dataclass(frozen=True, slots=True)
class ConsumerCursor:
    """A ``CursorStore`` from two functions (sync or async)."""

    load: Callable[[str], Awaitable[str | None] | str | None]
    save: Callable[[str, str], Awaitable[None] | None]


Opened = AsyncIterable[T] | Iterable[T]
OpenFn = Callable[[ConsumerSource], Opened[T] | Awaitable[Opened[T]]]
HandleFn = Callable[[ConsumerBatch[T]], Awaitable[str] | str]
KeysFn = Callable[[], Awaitable[Sequence[str]] | Sequence[str]]
LagFn = Callable[[ConsumerSource], Awaitable[int] | int]
TransactionFn = Callable[[], AbstractAsyncContextManager[Any]]
TenantOf = Callable[[ConsumerInput], str] | Literal["none"]


async def call_back(fn: Callable[..., Any], *args: Any) -> Any:
    answer = fn(*args)
    if inspect.isawaitable(answer):
        answer = await answer
    return answer


async def sync_items(items: Iterable[T]) -> AsyncIterator[T]:
    for item in items:
        yield item
        await asyncio.sleep(0)


class ConsumerRun(Generic[T]):
    """One run of one key: read, batch, commit, until the stream ends or the signal aborts."""

    def __init__(self, spec: RunSpec[T], key: str, ctx: JobContext) -> None:
        self.spec = spec
        self.key = key
        self.ctx = ctx
        self.signal = ctx.signal
        self.committed: str | None = None
        self.done = 0
        self.batches = 0
        self.buffer: list[T] = []

    async def go(self) -> dict[str, Any]:
        spec = self.spec
        loaded = await call_back(spec.cursor.load, self.key)
        if loaded is not None and not isinstance(loaded, str):
            raise XError(
                "X_INVARIANT",
                f"consumer {spec.name!r}: cursor.load({self.key!r}) answered {loaded!r}, not a "
                "str or None",
                fix="store the cursor handle answered as text; answer None for a new key",
                meta={"job": spec.name, "key": self.key},
            )
        self.committed = loaded
        opened = await call_back(spec.open, ConsumerSource(self.key, loaded, self.signal))
        if isinstance(opened, AsyncIterable):
            iterator: AsyncIterator[T] = aiter(opened)
        elif isinstance(opened, Iterable) and not isinstance(opened, str | bytes):
            iterator = sync_items(opened)
        else:
            raise XError(
                "X_INVARIANT",
                f"consumer {spec.name!r}: open() answered a {type(opened).__name__}, not an "
                "AsyncIterable of items",
                fix="open=lambda source: vendor.stream(source.key, source.cursor, source.signal)",
                meta={"job": spec.name, "key": self.key},
            )
        aborted = asyncio.ensure_future(self.signal.wait())
        pending: asyncio.Future[T] | None = None
        try:
            while True:
                if self._stopped():
                    break
                if pending is None:
                    pending = asyncio.ensure_future(anext(iterator))
                linger = spec.linger_ms / 1000 if self.buffer else None
                racing: set[asyncio.Future[Any]] = {pending, aborted}
                await asyncio.wait(racing, timeout=linger, return_when="FIRST_COMPLETED")
                if self._stopped():
                    break  # the items read and not committed are delivered again
                if not pending.done():  # the linger passed without a next item
                    await self._commit()
                    continue
                try:
                    item = pending.result()
                except StopAsyncIteration:
                    pending = None
                    if self.buffer:
                        await self._commit()
                    return self._result("ended")
                pending = None
                self.buffer.append(item)
                if len(self.buffer) >= spec.batch:
                    await self._commit()
            reason = self.signal.reason
            assert reason is not None
            raise reason
        finally:
            aborted.cancel()
            if pending is not None and not pending.done():
                pending.cancel()
                await asyncio.wait({pending})  # a cancel of this run itself still propagates
                if not pending.cancelled():
                    pending.exception()  # retrieved: the stream ended as it was stopped
            closer = getattr(iterator, "aclose", None)
            if closer is not None:
                with contextlib.suppress(Exception):
                    await closer()

    def _stopped(self) -> bool:
        return self.signal.aborted

    async def _commit(self) -> None:
        spec = self.spec
        items = tuple(self.buffer)
        batch = ConsumerBatch(self.key, items, self.committed, self.signal)
        if spec.transaction is not None:
            async with spec.transaction():
                after = await self._handle(batch)
                await call_back(spec.cursor.save, self.key, after)
        else:
            after = await self._handle(batch)
            await call_back(spec.cursor.save, self.key, after)
        self.buffer = []
        self.committed = after
        self.done += len(items)
        self.batches += 1
        await self._report(current_clock().now())

    async def _handle(self, batch: ConsumerBatch[T]) -> str:
        after = await call_back(self.spec.handle, batch)
        if not isinstance(after, str):
            raise XError(
                "X_INVARIANT",
                f"consumer {self.spec.name!r}: handle answered {after!r} for key {self.key!r}; "
                "it must answer the cursor past its batch, a str",
                fix="return items[-1].cursor (the position after the last item handled)",
                meta={"job": self.spec.name, "key": self.key},
            )
        return after

    async def _report(self, at: datetime) -> None:
        behind: int | None = None
        if self.spec.lag is not None:
            answer = await call_back(
                self.spec.lag, ConsumerSource(self.key, self.committed, self.signal)
            )
            if isinstance(answer, int) and not isinstance(answer, bool) and answer >= 0:
                behind = answer
            else:
                self.ctx.log.warning("jobs.consumer.lag-invalid", key=self.key, lag=repr(answer))
        note = json.dumps(
            {"consumer": {"key": self.key, "last_batch_at": at.isoformat(), "lag": behind}}
        )
        self.ctx.progress(self.done, self.done + (behind or 0), note)
        self.ctx.log.debug(
            "jobs.consumer.batch", key=self.key, items=self.done, batches=self.batches, lag=behind
        )

    def _result(self, how: str) -> dict[str, Any]:
        return {
            "key": self.key,
            "items": self.done,
            "batches": self.batches,
            "cursor": self.committed,
            "ended": how,
        }


@dataclass(frozen=True, slots=True)
class RunSpec(Generic[T]):
    name: str
    keys: KeysFn
    open: OpenFn[T]
    handle: HandleFn[T]
    cursor: CursorStore | ConsumerCursor
    batch: int
    lag: LagFn | None
    transaction: TransactionFn | None
    linger_ms: int


__all__ = [
    "CONSUMER_LINGER_MS",
    "ConsumerBatch",
    "ConsumerCursor",
    "ConsumerInput",
    "ConsumerRun",
    "ConsumerSource",
    "CursorStore",
    "RunSpec",
    "call_back",
]
