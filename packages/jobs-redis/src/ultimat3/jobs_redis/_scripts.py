"""The driver's Lua scripts: one ``.lua`` file per operation inside the package (``lua/``), each
prefixed with ``lua/_lib.lua`` and registered once on the client with ``register_script``.

Every script takes one key, the driver's prefix (``{x}:``, a hash tag, so every key a script
derives from it lives in one cluster slot), and its arguments. Redis runs a script atomically,
so each driver operation is one indivisible step on the server, timed by the server's clock
(``redis.call('TIME')``), never the caller's.
"""

from __future__ import annotations

import importlib.resources
from collections.abc import Sequence
from functools import cache
from typing import Any, Final

from redis.asyncio import Redis
from redis.commands.core import AsyncScript
from redis.exceptions import (
    ConnectionError as RedisConnectionError,
)
from redis.exceptions import (
    InvalidResponse,
    RedisError,
    ResponseError,
)
from redis.exceptions import (
    TimeoutError as RedisTimeoutError,
)

from ultimat3.core import XError
from ultimat3.jobs._model import COUNTER_TIERS

SCRIPT_NAMES: Final[tuple[str, ...]] = (
    "ack",
    "backfill",
    "bulk",
    "cancel",
    "claim",
    "counters",
    "enqueue",
    "fence",
    "heartbeat",
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
    "remove",
    "requeue",
    "resolve_step",
    "show",
    "stats",
    "step_record",
    "steps_load",
    "task_fire",
    "task_fires",
    "wake",
    "worker_deregister",
    "worker_heartbeat",
    "worker_register",
    "workers",
)

Arg = str | int | float | bytes

# A server that answers but cannot take the write right now: the backend is unavailable. (So is
# one that does not speak Redis at all: InvalidResponse, a protocol error.)
_UNAVAILABLE_REPLIES: Final = ("OOM", "READONLY", "LOADING", "MASTERDOWN", "BUSY", "NOREPLICAS")


@cache
def script_sources() -> dict[str, str]:
    """Every script's full text: the prelude, then the operation's body."""
    folder = importlib.resources.files("ultimat3.jobs_redis").joinpath("lua")
    tiers = "{ " + ", ".join(f"{{ {b}, {k} }}" for b, k in COUNTER_TIERS) + " }"
    prelude = folder.joinpath("_lib.lua").read_text("utf-8").replace("__COUNTER_TIERS__", tiers)
    return {
        name: prelude + "\n" + folder.joinpath(f"{name}.lua").read_text("utf-8")
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
    (one script run) and every Redis failure leaves as an ``XError``."""

    def __init__(self, client: Redis, prefix: str) -> None:
        self.client = client
        self.base = "{" + prefix + "}:"
        self._scripts: dict[str, AsyncScript] = {
            name: client.register_script(text) for name, text in script_sources().items()
        }
        kwargs = client.connection_pool.connection_kwargs
        self.where = (
            str(kwargs.get("path") or f"{kwargs.get('host', '?')}:{kwargs.get('port', '?')}")
            + f"/{kwargs.get('db', 0)}"
        )

    async def run(self, name: str, *args: Arg, op: str | None = None) -> Any:
        script = self._scripts[name]
        try:
            return await script(keys=[self.base], args=args, client=self.client)
        except RedisError as exc:
            raise self._wrap(exc, op or name) from exc

    async def run_many(self, name: str, batches: Sequence[Sequence[Arg]], *, op: str) -> list[Any]:
        """One script run per batch, all in one ``MULTI``/``EXEC`` (one round trip, all or
        nothing)."""
        script = self._scripts[name]
        try:
            async with self.client.pipeline(transaction=True) as pipe:
                for args in batches:
                    await script(keys=[self.base], args=args, client=pipe)
                return list(await pipe.execute())
        except RedisError as exc:
            raise self._wrap(exc, op) from exc

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
