"""A plain ``def`` body runs in a worker thread with the run's signal and context (it used to
die at run time after three attempts: ``object int can't be used in 'await' expression``);
``async def`` bodies and lambdas are unchanged — memory, then Postgres (``engine``)."""

from __future__ import annotations

import asyncio
import functools
import threading
import time
from typing import Any

from pydantic import BaseModel

from ultimat3.core import current_actor, current_signal
from ultimat3.jobs import Retry, job, job_worker
from ultimat3.jobs._declare.sync_body import runs_in_thread
from ultimat3_testkit.engine_drivers import Engine


class N(BaseModel):
    n: int


SEEN: dict[str, Any] = {}


def resize_image(input: N, step: Any, ctx: Any) -> int:
    SEEN["thread"] = threading.get_ident()
    SEEN["actor"] = current_actor()
    SEEN["signal_is_the_runs"] = current_signal() is ctx.signal
    return input.n * 10


def spins_until_aborted(input: N, step: Any, ctx: Any) -> None:
    deadline = time.monotonic() + 10
    while not ctx.signal.aborted and time.monotonic() < deadline:
        time.sleep(0.005)
    SEEN["heard"] = ctx.signal.reason.code if ctx.signal.reason else None
    ctx.signal.throw_if_aborted()


async def test_a_sync_body_runs_in_a_thread_with_the_runs_context(engine: Engine) -> None:
    resize: Any = job(
        input=N,
        idempotency_key=lambda i: f"r:{i.n}",
        name="sync.resize",
        run=resize_image,  # type: ignore[arg-type]  # the type names async bodies only
    )
    queued = await resize.enqueue({"n": 4})
    await engine.harness([resize]).drain()
    row = await engine.driver.introspect.show(queued.id)
    assert (row.state, row.result, row.attempts) == ("done", 40, 1)
    assert SEEN["thread"] != threading.get_ident()  # not the event loop's thread
    assert SEEN["actor"].id == "job:sync.resize"
    assert SEEN["signal_is_the_runs"] is True


async def test_a_sync_body_hears_its_timeout_through_the_signal(engine: Engine) -> None:
    spins: Any = job(
        input=N, idempotency_key=lambda i: f"s:{i.n}", name="sync.spins",
        run=spins_until_aborted,  # type: ignore[arg-type]
        timeout="100ms", retry=Retry(attempts=1),
    )  # fmt: skip
    queued = await spins.enqueue({"n": 1})
    if engine.clock is None:
        await engine.harness([spins]).drain()
    else:  # the memory harness's frozen clock: run it on the real clock's timer
        worker = job_worker(jobs=[spins], driver=engine.driver, poll_interval_ms=5)
        await worker.start()
        for _ in range(3000):  # bounded by the event (the row dead), not by a sleep's length
            if (await engine.driver.introspect.show(queued.id)).state == "dead":
                break
            await asyncio.sleep(0.01)
        await worker.stop()
    row = await engine.driver.introspect.show(queued.id)
    assert row.state == "dead" and row.last_error is not None
    assert row.last_error["code"] == "X_JOB_TIMEOUT"
    for _ in range(500):  # the body's thread checks its signal every 5 ms: it may trail the settle
        if "heard" in SEEN:
            break
        await asyncio.sleep(0.01)
    assert SEEN["heard"] == "X_JOB_TIMEOUT"


def test_which_bodies_run_in_a_thread() -> None:
    async def coro(i: Any, s: Any, c: Any) -> None:
        return None

    class Callable_:
        def __call__(self, i: Any, s: Any, c: Any) -> None:
            return None

    assert runs_in_thread(resize_image)
    assert runs_in_thread(functools.partial(resize_image))
    assert runs_in_thread(Callable_())
    assert not runs_in_thread(coro)
    assert not runs_in_thread(functools.partial(coro))
    assert not runs_in_thread(lambda i, s, c: coro(i, s, c))
