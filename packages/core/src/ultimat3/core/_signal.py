"""Cancellation: ``Signal`` (the AbortSignal), ``AbortController`` and the ambient signal."""

from __future__ import annotations

import asyncio
import contextlib
import inspect
import logging
import threading
from collections.abc import Awaitable, Callable
from contextvars import ContextVar
from typing import Any, TypeVar, overload

from ._ambient import Binding
from ._durations import format_duration, parse_duration
from ._errors import XError

T = TypeVar("T")
Listener = Callable[[XError], None]
_log = logging.getLogger("ultimat3")


class Signal:
    """Tells whether, and why, work was aborted. Made by an :class:`AbortController`."""

    __slots__ = ("_listeners", "_lock", "_reason")

    def __init__(self) -> None:
        self._reason: XError | None = None
        self._listeners: list[Listener] = []
        self._lock = threading.Lock()

    @property
    def aborted(self) -> bool:
        return self._reason is not None

    @property
    def reason(self) -> XError | None:
        return self._reason

    def throw_if_aborted(self) -> None:
        """Raise the reason if aborted."""
        if self._reason is not None:
            raise self._reason

    def add_listener(self, cb: Listener) -> Callable[[], None]:
        """Call ``cb(reason)`` on abort (at once if already aborted); returns an unsubscribe."""
        with self._lock:
            reason = self._reason
            if reason is None:
                self._listeners.append(cb)
        if reason is not None:
            _call(cb, reason)
            return _noop

        def unsubscribe() -> None:
            with self._lock:
                if cb in self._listeners:
                    self._listeners.remove(cb)

        return unsubscribe

    async def wait(self) -> XError:
        """Return the reason once aborted."""
        reason = self._reason
        if reason is not None:
            return reason
        loop = asyncio.get_running_loop()
        fut: asyncio.Future[XError] = loop.create_future()

        def settle(r: XError) -> None:
            if not fut.done():
                fut.set_result(r)

        def on_abort(r: XError) -> None:
            with contextlib.suppress(RuntimeError):  # a closed loop: nobody waits any more
                loop.call_soon_threadsafe(settle, r)

        unsubscribe = self.add_listener(on_abort)
        try:
            return await fut
        finally:
            unsubscribe()

    def _abort(self, reason: XError) -> bool:
        with self._lock:
            if self._reason is not None:
                return False
            self._reason = reason
            listeners, self._listeners = self._listeners, []
        for cb in listeners:
            _call(cb, reason)
        return True

    def __repr__(self) -> str:
        state = f"aborted={self._reason!r}" if self._reason is not None else "live"
        return f"<Signal {state}>"


def _noop() -> None:
    return None


def _call(cb: Listener, reason: XError) -> None:
    try:
        cb(reason)
    except Exception:
        _log.exception("signal listener %r raised", cb)


class AbortController:
    """Owns a :class:`Signal` and aborts it; the first abort wins."""

    __slots__ = ("signal",)

    def __init__(self) -> None:
        self.signal = Signal()

    def abort(self, reason: XError | None = None) -> None:
        """Abort the signal with ``reason`` (default ``X_ABORTED``); later calls do nothing."""
        if reason is not None and not isinstance(reason, XError):
            raise XError(
                "X_INVARIANT",
                f"abort reason {reason!r} is not an XError",
                fix="abort(XError('X_ABORTED', 'why'))",
            )
        self.signal._abort(reason if reason is not None else XError("X_ABORTED"))


def any_signal(*signals: Signal) -> Signal:
    """A signal that aborts with the first reason of any of ``signals``."""
    controller = AbortController()
    for s in signals:
        if s.reason is not None:
            controller.abort(s.reason)
            return controller.signal
    unsubscribes: list[Callable[[], None]] = []

    def on_abort(reason: XError) -> None:
        controller.abort(reason)
        for unsubscribe in unsubscribes:
            unsubscribe()

    for s in signals:
        unsubscribes.append(s.add_listener(on_abort))
        if controller.signal.aborted:
            break
    if controller.signal.aborted:
        for unsubscribe in unsubscribes:
            unsubscribe()
    return controller.signal


class DeadlineSignal(Signal):
    """A :class:`Signal` that aborts after a delay; :meth:`cancel` disarms it."""

    __slots__ = ("_handle",)

    def __init__(self) -> None:
        super().__init__()
        self._handle: asyncio.TimerHandle | None = None

    def cancel(self) -> None:
        """Disarm the timer without aborting (the work finished in time)."""
        if self._handle is not None:
            self._handle.cancel()
            self._handle = None

    def _abort(self, reason: XError) -> bool:
        self.cancel()
        return super()._abort(reason)


def deadline_signal(ms: int, *, reason: XError | None = None) -> DeadlineSignal:
    """A signal that aborts ``ms`` milliseconds from now (default reason ``X_JOB_TIMEOUT``)."""
    delay = parse_duration(ms, name="deadline", allow_zero=True)
    why = reason or XError("X_JOB_TIMEOUT", f"the deadline of {format_duration(delay)} passed")
    signal = DeadlineSignal()
    if delay == 0:
        signal._abort(why)
        return signal
    try:
        loop = asyncio.get_running_loop()
    except RuntimeError:
        raise XError(
            "X_INVARIANT",
            "deadline_signal needs a running event loop",
            fix="call deadline_signal(ms) from async code",
        ) from None
    signal._handle = loop.call_later(delay / 1000, signal._abort, why)
    return signal


def never_signal() -> Signal:
    """A signal nothing can abort."""
    return Signal()


_signal_var: ContextVar[Signal | None] = ContextVar("ultimat3_signal", default=None)


def current_signal() -> Signal | None:
    """The ambient signal, or ``None``."""
    return _signal_var.get()


def use_signal(signal: Signal | None) -> Binding[Signal | None]:
    """Make ``signal`` ambient for a ``with`` / ``async with`` block (``None`` clears it)."""
    return Binding(_signal_var, signal)


def throw_if_aborted(ctx_or_signal: object = None) -> None:
    """Raise the reason if the signal (or ``ctx.signal``, or the ambient one) is aborted."""
    if ctx_or_signal is None:
        signal = current_signal()
    elif isinstance(ctx_or_signal, Signal):
        signal = ctx_or_signal
    else:
        candidate = getattr(ctx_or_signal, "signal", None)
        if not isinstance(candidate, Signal):
            raise XError(
                "X_INVARIANT",
                f"throw_if_aborted: {type(ctx_or_signal).__name__} has no .signal Signal",
                fix="pass a Signal or a ctx with a .signal, e.g. throw_if_aborted(ctx)",
            )
        signal = candidate
    if signal is not None:
        signal.throw_if_aborted()


@overload
async def run_to_completion(fn: Callable[[], Awaitable[T]]) -> T: ...
@overload
async def run_to_completion(fn: Awaitable[T]) -> T: ...
@overload
async def run_to_completion(fn: Callable[[], T]) -> T: ...
async def run_to_completion(fn: Any) -> Any:
    """Run ``fn`` to its end with no ambient signal, shielded from task cancellation."""

    async def inner() -> Any:
        with use_signal(None):
            result: Any = fn if inspect.isawaitable(fn) else fn()
            if inspect.isawaitable(result):
                result = await result
            return result

    task = asyncio.ensure_future(inner())
    try:
        return await asyncio.shield(task)
    except asyncio.CancelledError:
        if task.done():
            return task.result()  # the inner work itself was cancelled: this re-raises
        while not task.done():
            try:
                await asyncio.shield(task)
            except asyncio.CancelledError:
                continue
            except BaseException:
                break
        if not task.cancelled():
            task.exception()  # retrieved: the caller was cancelled, that wins
        raise
