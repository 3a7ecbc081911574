"""The driver's Lua scripts: one ``.lua`` file per operation inside the package (``lua/``), each
prefixed with ``lua/_lib.lua`` and registered once on the client with ``register_script``.

Every script takes one key, the driver's prefix (``{x}:``, a hash tag, so every key a script
derives from it lives in one cluster slot), and its arguments. Redis runs a script atomically,
so each driver operation is one indivisible step on the server, timed by the server's clock
(``redis.call('TIME')``), never the caller's.
"""

from __future__ import annotations

import asyncio
import importlib.resources
import re
from collections.abc import Sequence
from dataclasses import dataclass
from functools import cache
from typing import Any, Final

from redis.asyncio import Redis
from redis.commands.core import AsyncScript
from redis.exceptions import (
    ConnectionError as RedisConnectionError,
)
from redis.exceptions import (
    InvalidResponse,
    NoScriptError,
    RedisError,
    ResponseError,
)
from redis.exceptions import (
    TimeoutError as RedisTimeoutError,
)

from ultimat3.core import XError
from ultimat3.jobs.adapter import COUNTER_TIERS

from ._resp import RespClient

SCRIPT_NAMES: Final[tuple[str, ...]] = (
    "ack",
    "backfill",
    "bulk",
    "cancel",
    "claim",
    "counters",
    "enqueue",
    "enqueue_many",
    "fence",
    "fire_task",
    "heartbeat",
    "import",
    "lease_acquire",
    "lease_holders",
    "lease_release",
    "lease_renew",
    "list",
    "nack",
    "now",
    "pause",
    "progress",
    "promote",
    "purge",
    "redactions",
    "remove",
    "requeue",
    "resolve_step",
    "sample",
    "show",
    "stats",
    "step_record",
    "steps_load",
    "task_fires",
    "wake",
    "worker_deregister",
    "worker_heartbeat",
    "worker_register",
    "workers",
)

Arg = str | int | float | bytes

_inflight: set[asyncio.Task[None]] = set()
"""Pipelines being sent: held here so none is collected before it answers its callers."""


@dataclass(slots=True)
class _Call:
    name: str
    args: tuple[Arg, ...]
    op: str
    answer: asyncio.Future[Any]


# A server that answers but cannot take the write right now: the backend is unavailable. (So is
# one that does not speak Redis at all: InvalidResponse, a protocol error.)
_UNAVAILABLE_REPLIES: Final = ("OOM", "READONLY", "LOADING", "MASTERDOWN", "BUSY", "NOREPLICAS",
                                "NOAUTH", "WRONGPASS")  # fmt: skip


_DEFINITION = re.compile(r"^local (?:function )?([A-Za-z_]\w*)", re.MULTILINE)
_NAME = re.compile(r"[A-Za-z_]\w*")
_COMMENT = re.compile(r"--[^\n]*")  # a name only mentioned in a comment is not a use


def _shaken(prelude: str, body: str) -> str:
    """The prelude's head comment and only the top-level definitions (``local NAME`` / ``local
    function NAME``, each up to the next) that ``body`` uses, directly or through another, in the
    prelude's order; then ``body``. A name in a comment (``--`` to the line's end) is no use of
    it. Redis runs a script's whole text on every call, so a
    definition the script never uses would still cost a closure or a table each time."""
    found = list(_DEFINITION.finditer(prelude))
    head = prelude[: found[0].start()]
    blocks: dict[str, str] = {}
    for m, after in zip(found, [*found[1:], None], strict=True):
        if m.group(1) != "_":  # `local _ = {...}`: only there to mark the prelude's names used
            blocks[m.group(1)] = prelude[
                m.start() : len(prelude) if after is None else after.start()
            ]
    uses = {
        name: {n for n in _NAME.findall(_COMMENT.sub("", text)) if n in blocks and n != name}
        for name, text in blocks.items()
    }
    needed: set[str] = set()
    todo = [n for n in set(_NAME.findall(_COMMENT.sub("", body))) if n in blocks]
    while todo:
        name = todo.pop()
        if name not in needed:
            needed.add(name)
            todo.extend(uses[name])
    return head + "".join(text for name, text in blocks.items() if name in needed) + "\n" + body


@cache
def script_sources() -> dict[str, str]:
    """Every script's full text: what it uses of the prelude, then the operation's body."""
    folder = importlib.resources.files("ultimat3.jobs_redis").joinpath("lua")
    tiers = "{ " + ", ".join(f"{{ {b}, {k} }}" for b, k in COUNTER_TIERS) + " }"
    prelude = folder.joinpath("_lib.lua").read_text("utf-8").replace("__COUNTER_TIERS__", tiers)
    return {
        name: _shaken(prelude, folder.joinpath(f"{name}.lua").read_text("utf-8"))
        for name in SCRIPT_NAMES
    }


def unavailable(exc: BaseException, *, where: str, op: str) -> XError:
    return XError(
        "X_DRIVER_UNAVAILABLE",
        f"the Redis job driver could not {op}: Redis at {where} is unavailable "
        f"({type(exc).__name__}: {exc})",
        fix="check that redis-server is up and reachable at that address; the call is safe to "
        "retry (an enqueue retried under its id adds no second row)",
        meta={"driver": "redis", "op": op, "redis": where},
    )


class ScriptRunner:
    """The client, the key prefix and the registered scripts; every call is one ``EVALSHA``
    (one script run) and every Redis failure leaves as an ``XError``.

    With ``fast`` (a :class:`~ultimat3.jobs_redis._resp.RespClient`, what the driver makes from a
    URL) every call goes on its one pipelined connection at once: concurrent calls share it
    without waiting for each other, each still its own atomic script with its own answer or
    refusal. A script the server forgot (it restarted) is loaded again and the call re-run, in
    one round trip.

    Without it (a ``redis.asyncio.Redis`` you passed in), calls go through that client: a call
    made while nothing else is on its way goes out at once, alone; calls made while one is on its
    way wait for it and then go together in one pipeline. A caller that stops waiting (it was
    cancelled) never takes the others' calls down with it: a gathered batch is sent by a task of
    its own.
    """

    def __init__(
        self,
        client: Redis,
        prefix: str,
        *,
        timeout_s: float | None = None,
        fast: RespClient | None = None,
    ) -> None:
        self.client = client
        self._timeout_s = timeout_s
        self.base = "{" + prefix + "}:"
        self._texts = script_sources()
        self._scripts: dict[str, AsyncScript] = {
            name: client.register_script(text) for name, text in self._texts.items()
        }
        self._shas = {name: script.sha for name, script in self._scripts.items()}
        self._fast = fast
        self._pending: list[_Call] = []
        self._busy = False
        kwargs = client.connection_pool.connection_kwargs
        self.where = (
            str(kwargs.get("path") or f"{kwargs.get('host', '?')}:{kwargs.get('port', '?')}")
            + f"/{kwargs.get('db', 0)}"
        )

    async def run(self, name: str, *args: Arg, op: str | None = None) -> Any:
        fast = self._fast
        if fast is not None:
            try:
                sent = fast.send("EVALSHA", self._shas[name], 1, self.base, *args)
                reply = await (
                    fast.call("EVALSHA", self._shas[name], 1, self.base, *args)
                    if sent is None
                    else sent
                )
                if type(reply) is ResponseError and str(reply).startswith("NOSCRIPT"):
                    reply = await self._reload(fast, name, args)
            except RedisError as exc:
                raise self._wrap(exc, op or name) from exc
            except TypeError as exc:  # an argument hiredis cannot send (None, a bool, a list)
                raise XError(
                    "X_INVARIANT",
                    f"the Redis job driver's script {op or name!r} got an argument it cannot "
                    f"send: {exc}",
                    fix="pass str, int, float or bytes (opt() for an optional value)",
                    meta={"driver": "redis", "op": op or name},
                ) from exc
            if isinstance(reply, RedisError):
                raise self._wrap(reply, op or name) from reply
            return reply
        what = op or name
        if self._busy:
            call = _Call(name, args, what, asyncio.get_running_loop().create_future())
            self._pending.append(call)
            return await call.answer
        self._busy = True
        try:
            (reply,) = await self._evalsha([(name, args)])
        except RedisError as exc:
            raise self._wrap(exc, what) from exc
        except TimeoutError as exc:
            raise unavailable(exc, where=self.where, op=what) from exc
        finally:
            self._next()
        if isinstance(reply, RedisError):
            raise self._wrap(reply, what) from reply
        return reply

    def _next(self) -> None:
        """The call (or batch) on its way has its answer: send what gathered meanwhile."""
        batch, self._pending = self._pending, []
        if not batch:
            self._busy = False
            return
        task = asyncio.ensure_future(self._send(batch))
        _inflight.add(task)
        task.add_done_callback(_inflight.discard)

    async def _send(self, batch: list[_Call]) -> None:
        try:
            replies = await self._evalsha([(call.name, call.args) for call in batch])
        except BaseException as exc:
            for call in batch:
                if not call.answer.done():
                    failure: BaseException = exc
                    if isinstance(exc, RedisError):
                        failure = self._wrap(exc, call.op)
                        failure.__cause__ = exc
                    elif isinstance(exc, TimeoutError):
                        failure = unavailable(exc, where=self.where, op=call.op)
                        failure.__cause__ = exc
                    call.answer.set_exception(failure)
            if not isinstance(exc, Exception):
                raise
            return
        finally:
            self._next()
        for call, reply in zip(batch, replies, strict=True):
            if call.answer.done():
                continue
            if isinstance(reply, RedisError):
                refused = self._wrap(reply, call.op)
                refused.__cause__ = reply
                call.answer.set_exception(refused)
            else:
                call.answer.set_result(reply)

    async def _evalsha(self, batch: list[tuple[str, tuple[Arg, ...]]]) -> list[Any]:
        """Every call's reply (or its ``RedisError``), in order, within the command timeout (the
        builtin ``TimeoutError`` past it; the connection is dropped, never reused half-read)."""
        if self._timeout_s is None:
            return await self._evalsha_now(batch)
        async with asyncio.timeout(self._timeout_s):
            return await self._evalsha_now(batch)

    async def _evalsha_now(self, batch: list[tuple[str, tuple[Arg, ...]]]) -> list[Any]:
        """A script the server forgot (it restarted) is loaded and the calls it refused are run
        again."""
        replies = await self._pipeline(batch)
        missed = [i for i, r in enumerate(replies) if isinstance(r, NoScriptError)]
        if missed:
            async with self.client.pipeline(transaction=False) as pipe:
                for name in sorted({batch[i][0] for i in missed}):
                    pipe.script_load(self._texts[name])
                await pipe.execute()
            again = await self._pipeline([batch[i] for i in missed])
            for i, reply in zip(missed, again, strict=True):
                replies[i] = reply
        return replies

    async def _pipeline(self, batch: list[tuple[str, tuple[Arg, ...]]]) -> list[Any]:
        if len(batch) == 1:
            name, args = batch[0]
            try:
                return [await self.client.evalsha(self._scripts[name].sha, 1, self.base, *args)]
            except ResponseError as exc:
                return [exc]
        async with self.client.pipeline(transaction=False) as pipe:
            for name, args in batch:
                pipe.evalsha(self._scripts[name].sha, 1, self.base, *args)
            return list(await pipe.execute(raise_on_error=False))

    @property
    def fast(self) -> RespClient | None:
        """The lean client (``None`` over a ``redis.asyncio`` client passed in)."""
        return self._fast

    async def _reload(self, fast: RespClient, name: str, args: tuple[Arg, ...]) -> Any:
        """``SCRIPT LOAD`` and the ``EVALSHA`` again, pipelined: one round trip."""
        loaded = fast.send("SCRIPT", "LOAD", self._texts[name])
        again = fast.send("EVALSHA", self._shas[name], 1, self.base, *args)
        if loaded is None or again is None:  # the connection dropped since: the next one
            await fast.call("SCRIPT", "LOAD", self._texts[name])
            return await fast.call("EVALSHA", self._shas[name], 1, self.base, *args)
        loaded_reply, reply = await asyncio.gather(loaded, again)
        if isinstance(loaded_reply, RedisError):
            raise loaded_reply
        return reply

    async def close(self) -> None:
        if self._fast is not None:
            await self._fast.close()

    async def run_many(self, name: str, batches: Sequence[Sequence[Arg]], *, op: str) -> list[Any]:
        """One script run per batch, all in one ``MULTI``/``EXEC`` (one round trip, all or
        nothing: the script is known to the server before the ``MULTI``)."""
        script = self._scripts[name]
        try:
            async with asyncio.timeout(self._timeout_s):
                async with self.client.pipeline(transaction=True) as pipe:
                    for args in batches:
                        await script(keys=[self.base], args=args, client=pipe)
                    return list(await pipe.execute())
        except RedisError as exc:
            raise self._wrap(exc, op) from exc
        except TimeoutError as exc:
            raise unavailable(exc, where=self.where, op=op) from exc

    def _wrap(self, exc: RedisError, op: str) -> XError:
        if isinstance(exc, RedisConnectionError | RedisTimeoutError | InvalidResponse):
            return unavailable(exc, where=self.where, op=op)
        text = str(exc)
        if isinstance(exc, ResponseError) and text.startswith(_UNAVAILABLE_REPLIES):
            return unavailable(exc, where=self.where, op=op)
        return XError(
            "X_INVARIANT",
            f"the Redis job driver's script {op!r} failed on {self.where}: {text}",
            fix="check the server is Redis >= 7 and that nothing else writes under the "
            f"driver's key prefix {self.base!r}",
            meta={"driver": "redis", "op": op},
        )
