"""A plain ``def`` body runs in a worker thread (``asyncio.to_thread``), as a Celery user
expects, with the run's context copied into it: ``ctx.signal`` is the run's (poll
``ctx.signal.aborted`` between units of work, or ``ctx.signal.throw_if_aborted()``), and the
ambient actor, tenant and signal are the run's. The event loop keeps serving the other runs
while it works. An ``async def`` body is awaited as always; a ``lambda`` is called on the loop
and its answer awaited when it is awaitable (``run=lambda i, s, c: other(i, s, c)``).

A thread cannot be cancelled: past its timeout or the drain budget the run is settled as usual
and the thread is left to finish, logged ``jobs.timeout.abandoned``; durable steps
(``step.run``, ``step.sleep``) are coroutines and need an ``async def`` body."""

from __future__ import annotations

import asyncio
import functools
import inspect
from collections.abc import Callable
from typing import Any


def _target(body: Callable[..., Any]) -> Any:
    target: Any = body
    while isinstance(target, functools.partial):
        target = target.func
    return target


def runs_in_thread(body: Callable[..., Any]) -> bool:
    """Whether ``body`` is a plain ``def`` (or a callable object whose ``__call__`` is one)."""
    target = _target(body)
    if inspect.iscoroutinefunction(target) or inspect.isasyncgenfunction(target):
        return False
    if inspect.isfunction(target) or inspect.ismethod(target):
        return target.__name__ != "<lambda>"
    call = getattr(type(target), "__call__", None)  # noqa: B004 (a callable object's own)
    if call is not None and not inspect.isbuiltin(target) and not isinstance(target, type):
        return not inspect.iscoroutinefunction(call)
    return False


def as_async_body(body: Callable[..., Any]) -> Callable[..., Any]:
    """``body`` as a coroutine function of ``(input, step, ctx)``."""
    if runs_in_thread(body):

        @functools.wraps(body)
        async def in_thread(input: Any, step: Any, ctx: Any) -> Any:
            out = await asyncio.to_thread(body, input, step, ctx)
            return await out if inspect.isawaitable(out) else out

        return in_thread
    if inspect.iscoroutinefunction(_target(body)):
        return body

    @functools.wraps(body)
    async def on_loop(input: Any, step: Any, ctx: Any) -> Any:
        out = body(input, step, ctx)
        return await out if inspect.isawaitable(out) else out

    return on_loop
