"""The no-op job of every system in ``redis_bench.py``, and what its body records.

Every body does one thing: ``seen(x)``. In ``drain`` mode ``x`` is the job's number and the
worker process notes when the first body started and when the N-th ended; in ``pickup`` mode ``x``
is the job's number too and the body notes ``[x, time.time()]`` (the bench subtracts the moment
the enqueue call returned). When the N-th body has run the
process writes its record to Redis once (``bench:result``), so the measuring itself costs no
round trip per job. RQ forks a child per job, so its bodies count in Redis instead (an INCR per
job; RQ's per-job fork costs far more). Configured by the environment: ``BENCH_URL``,
``BENCH_MODE`` (``drain`` | ``pickup``), ``BENCH_N``.
"""

from __future__ import annotations

import json
import os
import time
from typing import Any

import redis

URL = os.environ.get("BENCH_URL", "redis://127.0.0.1:6379/0")
MODE = os.environ.get("BENCH_MODE", "drain")
N = int(os.environ.get("BENCH_N", "10000"))

_first: float | None = None
_count = 0
_starts: list[list[float]] = []


def seen(x: float) -> None:
    global _first, _count
    now = time.time()
    if MODE == "pickup":
        _starts.append([x, now])
        if len(_starts) == N:
            _write({"starts": _starts})
        return
    if _first is None:
        _first = now
    _count += 1
    if _count == N:
        _write({"first": _first, "last": time.time()})


def _write(record: dict[str, Any]) -> None:
    with redis.Redis.from_url(URL) as client:
        client.set("bench:result", json.dumps(record))


def seen_in_redis(x: float) -> None:
    """``seen`` for a worker that forks per job: the count lives in Redis."""
    now = time.time()
    with redis.Redis.from_url(URL) as client:
        if MODE == "pickup":
            if client.rpush("bench:starts", json.dumps([x, now])) == N:
                values = [json.loads(v) for v in client.lrange("bench:starts", 0, -1)]
                client.set("bench:result", json.dumps({"starts": values}))
            return
        client.setnx("bench:first", now)
        if client.incr("bench:count") == N:
            first = float(client.get("bench:first") or now)
            client.set("bench:result", json.dumps({"first": first, "last": time.time()}))


# --- ultimat3 -----------------------------------------------------------------------------------


def ultimat3_job() -> Any:
    from pydantic import BaseModel

    from ultimat3.jobs import job

    class X(BaseModel):
        x: float

    async def body(input: X, step: Any, ctx: Any) -> None:
        seen(input.x)

    return job(input=X, idempotency_key=lambda i: repr(i.x), name="bench.noop", run=body)


# --- arq ----------------------------------------------------------------------------------------


async def arq_noop(ctx: Any, x: float) -> None:
    seen(x)


# --- SAQ ----------------------------------------------------------------------------------------


async def saq_noop(ctx: Any, *, x: float) -> None:
    seen(x)


# --- RQ -----------------------------------------------------------------------------------------


def rq_noop(x: float) -> None:
    seen_in_redis(x)


# --- Dramatiq -----------------------------------------------------------------------------------

_dramatiq_actor: Any = None


def dramatiq_actor() -> Any:
    """The actor, on a RedisBroker made once per process (Dramatiq wants the broker first)."""
    global _dramatiq_actor
    if _dramatiq_actor is None:
        import dramatiq
        from dramatiq.brokers.redis import RedisBroker

        dramatiq.set_broker(RedisBroker(url=URL))

        @dramatiq.actor(actor_name="bench_noop", max_retries=0)
        def bench_noop(x: float) -> None:
            seen(x)

        _dramatiq_actor = bench_noop
    return _dramatiq_actor
