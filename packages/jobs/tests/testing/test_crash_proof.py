"""crash_proof: a run killed at every step boundary ends as a clean one, a double effect is
X_JOB_CRASH_DIVERGED naming the step — a step store that drops a write, a step name that is not
stable — once-steps are not crashed between their marker and fn, the unwind is crashed too."""

from __future__ import annotations

import itertools
import uuid
from collections.abc import AsyncIterator
from typing import Any

import psycopg
import pytest
from psycopg import sql
from pydantic import BaseModel

from ultimat3.core import FrozenClock, Signal, XError
from ultimat3.jobs import Concurrency, Retry, job
from ultimat3.jobs.memory import MemoryJobDriver
from ultimat3.jobs.postgres import PostgresJobDriver, migrate, postgres_job_driver
from ultimat3.jobs.testing import crash_proof


class Order(BaseModel):
    order_id: str = "o1"


def _key(o: Order) -> str:
    return f"order:{o.order_id}"


def did(log: list[str], effect: str, answer: Any) -> Any:
    """Record a side effect, answer the step's output."""
    log.append(effect)
    return answer


async def test_a_replay_safe_job_survives_a_crash_at_every_boundary() -> None:
    effects: list[str] = []

    @job(
        input=Order,
        idempotency_key=_key,
        concurrency=Concurrency(key=lambda o: o.order_id, limit=1, when_busy="fail"),
    )
    async def fulfil(input: Order, step: Any, ctx: Any) -> str:
        charge = await step.run("charge", lambda s: did(effects, "charge", "ch_1"))
        await step.sleep("1h")
        await step.run("ship", lambda s: did(effects, "ship", "sh_1"), once=True)
        return f"{charge}/{input.order_id}"

    report = await crash_proof(fulfil, {"order_id": "o7"})
    assert report.state == "done" and report.result == "ch_1/o7"
    assert report.crashes == ("charge:completed", "sleep:1:completed", "ship:completed")
    assert report.calls == {"charge": 1, "ship": 1}
    assert effects == ["charge", "ship"]  # every effect once, whatever the crashes
    assert report.attempts == 4  # three crashed claims, then the one that finished
    assert report.steps["ship"].state == "completed"


async def test_a_step_store_that_drops_a_write_is_caught_as_a_double_effect() -> None:
    charges: list[str] = []

    class DroppingSteps:
        """A driver bug: the first completed write of 'charge' answers True but stores nothing."""

        def __init__(self, inner: Any) -> None:
            self.inner = inner
            self.dropped = False

        async def load(self, job_id: str) -> Any:
            return await self.inner.load(job_id)

        async def record(self, job_id: str, name: str, **kw: Any) -> bool:
            if name == "charge" and kw["state"] == "completed" and not self.dropped:
                self.dropped = True
                return True
            return bool(await self.inner.record(job_id, name, **kw))

    class LossyDriver(MemoryJobDriver):
        def __init__(self, *, clock: FrozenClock) -> None:
            super().__init__(clock=clock)
            self._lossy = DroppingSteps(super().steps)

        @property
        def steps(self) -> Any:
            return self._lossy

    @job(input=Order, idempotency_key=_key)
    async def checkout(input: Order, step: Any, ctx: Any) -> None:
        await step.run("charge", lambda s: did(charges, "ch", "ch_1"))
        await step.run("email", lambda s: "sent")

    clock = FrozenClock()
    with pytest.raises(XError) as exc:
        await crash_proof(checkout, {}, driver=LossyDriver(clock=clock), clock=clock)
    assert exc.value.code == "X_JOB_CRASH_DIVERGED"
    assert exc.value.meta["step"] == "charge"
    assert "'charge'" in exc.value.message and "2 times" in exc.value.message
    assert exc.value.meta["boundary"] == "charge:completed"
    assert exc.value.fix
    assert charges == ["ch", "ch"]  # the customer really was charged twice


async def test_a_step_name_that_is_not_stable_across_replays_is_caught() -> None:
    sends: list[str] = []
    counter = itertools.count()  # state outside the steps: a replay reads a new value

    @job(input=Order, idempotency_key=_key)
    async def notify(input: Order, step: Any, ctx: Any) -> None:
        await step.run(f"send:{next(counter)}", lambda s: did(sends, "mail", "ok"))

    with pytest.raises(XError) as exc:
        await crash_proof(notify, {})
    assert exc.value.code == "X_JOB_CRASH_DIVERGED"
    assert exc.value.meta["step"] == "send:0"
    assert "not stable" in exc.value.message
    assert sends == ["mail", "mail"]


async def test_the_unwind_is_crashed_at_its_boundaries_and_undoes_each_step_once() -> None:
    undone: list[str] = []

    def ship(signal: Signal) -> None:
        raise XError("X_TEST_CRASH_TERMINAL", "address refused")

    from ultimat3.core import register_error_retry

    register_error_retry({"X_TEST_CRASH_TERMINAL": "terminal"})

    @job(input=Order, idempotency_key=_key, compensates=True, retry=Retry(attempts=2))
    async def checkout(input: Order, step: Any, ctx: Any) -> None:
        await step.run("charge", lambda s: "ch_1", compensate=lambda c: undone.append(f"r {c}"))
        await step.run("reserve", lambda s: "rs_1", compensate=lambda r: undone.append(f"x {r}"))
        await step.run("ship", ship)

    report = await crash_proof(checkout, {})
    assert report.state == "dead"
    assert undone == ["x rs_1", "r ch_1"]
    assert report.calls["compensate:charge"] == 1 and report.calls["compensate:reserve"] == 1
    assert "unwinding:completed" in report.crashes
    assert "compensate:reserve:completed" in report.crashes
    assert report.last_error is not None and report.last_error["code"] == "X_TEST_CRASH_TERMINAL"


@pytest.fixture
async def pg(database_url: str) -> AsyncIterator[PostgresJobDriver]:
    schema = f"x_test_{uuid.uuid4().hex[:16]}"
    await migrate(database_url, schema=schema)
    driver = postgres_job_driver(database_url, schema=schema)
    try:
        yield driver
    finally:
        await driver.close()
        async with await psycopg.AsyncConnection.connect(database_url, autocommit=True) as c:
            await c.execute(sql.SQL("DROP SCHEMA {} CASCADE").format(sql.Identifier(schema)))


async def test_crash_proof_on_postgres_waits_out_real_lapses(pg: PostgresJobDriver) -> None:
    effects: list[str] = []

    @job(input=Order, idempotency_key=_key)
    async def two_steps(input: Order, step: Any, ctx: Any) -> int:
        await step.run("a", lambda s: did(effects, "a", 1))
        await step.run("b", lambda s: did(effects, "b", 2))
        return 3

    report = await crash_proof(two_steps, {}, driver=pg, visibility_timeout_ms=200)
    assert (report.state, report.result, report.crashes) == (
        "done",
        3,
        ("a:completed", "b:completed"),
    )
    assert effects == ["a", "b"]
