"""The scheduler over the real Postgres server: the one-statement fire, a fire killed between its
watermark and its jobs, scheduler processes SIGKILLed around their fires, and the lease."""

from __future__ import annotations

import asyncio
import random
import signal
import subprocess
import sys
import textwrap
import time
from collections import Counter
from datetime import UTC, datetime
from pathlib import Path
from typing import Any
from zoneinfo import ZoneInfo

import psycopg
import pytest
from psycopg import sql
from pydantic import BaseModel

from ultimat3.core import XError, new_id
from ultimat3.jobs import Task, job, task, task_scheduler
from ultimat3.jobs._declare.cron import occurrences
from ultimat3.jobs.postgres import PostgresJobDriver, postgres_job_driver


class Tick(BaseModel):
    at: str


@job(input=Tick, idempotency_key=lambda i: f"tick:{i.at}", queue="ticks")
async def on_tick(input: Tick, step: Any, ctx: Any) -> None:
    return None


def _minutely(name: str = "minutely") -> Task:
    return task(
        name=name, cron="* * * * *", enqueue=lambda at: (on_tick, {"at": at.at.isoformat()})
    )


M0 = int(datetime(2026, 6, 1, 12, tzinfo=UTC).timestamp() * 1000)


def _m(n: int) -> int:
    return M0 + n * 60_000


async def _keys(driver: PostgresJobDriver) -> list[str]:
    return sorted(r.idempotency_key for r in await driver.introspect.list(limit=200))


async def test_a_fire_moves_the_watermark_and_the_jobs_in_one_statement(
    pg_driver: PostgresJobDriver,
) -> None:
    t = _minutely()
    assert await pg_driver.fire_task(t.name, _m(1), t.requests(_m(1)))
    (fire,) = await pg_driver.introspect.task_fires()
    assert (fire.task, fire.occurrence_ms) == ("minutely", _m(1))
    assert await _keys(pg_driver) == ["tick:2026-06-01T12:01:00+00:00"]
    # the same occurrence, or an earlier one, moves nothing and queues nothing
    assert not await pg_driver.fire_task(t.name, _m(1), t.requests(_m(1)))
    assert not await pg_driver.fire_task(t.name, _m(0), t.requests(_m(0)))
    assert len(await _keys(pg_driver)) == 1
    assert [f.occurrence_ms for f in await pg_driver.introspect.task_fires()] == [_m(1)]


async def test_a_fires_jobs_dedupe_as_enqueue_many_does(pg_driver: PostgresJobDriver) -> None:
    fan = task(
        name="fan",
        cron="* * * * *",
        enqueue=lambda at: [(on_tick, {"at": "a"}), (on_tick, {"at": "b"}), (on_tick, {"at": "a"})],
    )
    held = fan.requests(_m(0))[1]
    await pg_driver.enqueue(held)  # a live row already holds "b"
    assert await pg_driver.fire_task("fan", _m(1), fan.requests(_m(1)))
    assert await _keys(pg_driver) == ["tick:a", "tick:b"]


async def test_a_bad_request_refuses_the_fire_before_anything_moves(
    pg_driver: PostgresJobDriver,
) -> None:
    from dataclasses import replace

    t = _minutely()
    bad = replace(t.requests(_m(1))[0], run_id="not-a-uuid")
    with pytest.raises(XError) as exc:
        await pg_driver.fire_task(t.name, _m(1), [bad])
    assert exc.value.code == "X_ID_INVALID"
    assert await pg_driver.introspect.task_fires() == []


async def test_a_fire_killed_between_its_watermark_and_its_jobs_leaves_neither(
    pg_driver: PostgresJobDriver, database_url: str, pg_schema: str
) -> None:
    t = _minutely()
    assert await pg_driver.fire_task(t.name, _m(1), t.requests(_m(1)))
    requests = t.requests(_m(2))
    async with await psycopg.AsyncConnection.connect(database_url) as holder:
        # an open transaction holds the occurrence's job key: the fire's insert waits on it,
        # AFTER its watermark upsert ran in the same statement
        await pg_driver.enqueue(replace_id(requests[0]), connection=holder)
        fire = asyncio.ensure_future(pg_driver.fire_task(t.name, _m(2), requests))
        pid = await _waiting_backend(database_url, pg_schema)
        async with await psycopg.AsyncConnection.connect(database_url, autocommit=True) as probe:
            # the watermark row is locked by the in-flight fire: it moved, uncommitted
            with pytest.raises(psycopg.errors.LockNotAvailable):
                await probe.execute(
                    sql.SQL("SELECT 1 FROM {} WHERE task = %s FOR UPDATE NOWAIT").format(
                        sql.Identifier(pg_schema, "x_task_fires")
                    ),
                    (t.name,),
                )
            await probe.execute("SELECT pg_terminate_backend(%s)", (pid,))
        with pytest.raises(XError):
            await fire
        await holder.rollback()
    assert [f.occurrence_ms for f in await pg_driver.introspect.task_fires()] == [_m(1)]
    assert await _keys(pg_driver) == ["tick:2026-06-01T12:01:00+00:00"]
    # the occurrence is still due, and fires exactly once
    assert await pg_driver.fire_task(t.name, _m(2), t.requests(_m(2)))
    assert not await pg_driver.fire_task(t.name, _m(2), t.requests(_m(2)))
    assert len(await _keys(pg_driver)) == 2


def replace_id(request: Any) -> Any:
    from dataclasses import replace

    return replace(request, id=new_id(), run_id=new_id())


async def _waiting_backend(url: str, schema: str) -> int:
    """The backend whose fire_task statement is waiting on a lock."""
    async with await psycopg.AsyncConnection.connect(url, autocommit=True) as conn:
        for _ in range(200):
            cur = await conn.execute(
                "SELECT pid FROM pg_stat_activity WHERE wait_event_type = 'Lock' "
                "AND query LIKE %s AND pid <> pg_backend_pid()",
                (f'%"{schema}"."x_task_fires"%',),
            )
            row = await cur.fetchone()
            if row is not None:
                return int(row[0])
            await asyncio.sleep(0.05)
    raise AssertionError("no fire_task statement waited on the held key")


async def test_one_scheduler_leads_over_postgres_and_a_dead_one_is_replaced_within_a_lease(
    database_url: str, pg_schema: str
) -> None:
    drivers = [postgres_job_driver(database_url, schema=pg_schema) for _ in range(2)]
    lease_ms = 1500
    a, b = (
        task_scheduler(
            purge=False, tasks=[_minutely()], driver=d, lease_ms=lease_ms, renew_ms=500, tick_ms=100
        )
        for d in drivers
    )
    try:
        await a.start()
        await asyncio.sleep(0.3)
        await b.start()
        for _ in range(15):  # 1.5 s: one lease, at least two renewals
            await asyncio.sleep(0.1)
            assert (a.leading, b.leading) == (True, False)
        # a dies: its loop stops and nobody hands the lease back
        assert a._loop is not None
        a._loop.cancel()
        died = time.monotonic()
        while not b.leading:
            await asyncio.sleep(0.05)
            assert time.monotonic() - died < (lease_ms + 600) / 1000  # + a tick, under load
    finally:
        await b.stop()
        for d in drivers:
            await d.close()


SCHEDULER = """
import asyncio, sys, time, uuid
from datetime import UTC, datetime
from typing import Any
from zoneinfo import ZoneInfo

from pydantic import BaseModel

from ultimat3.jobs import job, task, task_scheduler
from ultimat3.jobs.postgres import postgres_job_driver

url, schema, origin, real0 = sys.argv[1], sys.argv[2], int(sys.argv[3]), float(sys.argv[4])
SPEED = 60  # one simulated minute per real second: a minutely task fires every second


class Fast:
    def now_ms(self) -> int:
        return origin + int((time.time() - real0) * SPEED * 1000)

    def now(self) -> datetime:
        return datetime.fromtimestamp(self.now_ms() / 1000, UTC)


class Tick(BaseModel):
    at: str
    nonce: str


@job(input=Tick, idempotency_key=lambda i: f"{i.at}:{i.nonce}", queue="ticks")
async def on_tick(input: Tick, step: Any, ctx: Any) -> None:
    return None


# a fresh key per build: a second fire of one occurrence would show as a second row
minutely = task(
    name="minutely",
    cron="* * * * *",
    catch_up="all",
    enqueue=lambda at: (on_tick, {"at": at.at.isoformat(), "nonce": uuid.uuid4().hex}),
)


async def main() -> None:
    driver = postgres_job_driver(url, schema=schema)
    s = task_scheduler(
        purge=False,
        tasks=[minutely], driver=driver, clock=Fast(), lease_ms=1000, renew_ms=300, tick_ms=50
    )
    await s.start()
    print("started", flush=True)
    await asyncio.Event().wait()


asyncio.run(main())
"""


def test_schedulers_sigkilled_around_their_fires_fire_each_occurrence_exactly_once(
    tmp_path: Path, database_url: str, pg_schema: str
) -> None:
    script = tmp_path / "scheduler_process.py"
    script.write_text(textwrap.dedent(SCHEDULER))
    origin = M0 - 30_000
    real0 = time.time()
    rng = random.Random(8)
    argv = [sys.executable, str(script), database_url, pg_schema, str(origin), repr(real0)]
    for _ in range(6):
        procs = [subprocess.Popen(argv, stdout=subprocess.PIPE, text=True) for _ in range(2)]
        try:
            for p in procs:
                assert p.stdout is not None and p.stdout.readline() == "started\n"
            deadline = [time.monotonic() + rng.uniform(0.2, 2.0) for _ in procs]
            for when, p in sorted(zip(deadline, procs, strict=True), key=lambda x: x[0]):
                time.sleep(max(0.0, when - time.monotonic()))
                p.send_signal(signal.SIGKILL)  # mid-tick, mid-fire or idle: wherever it is
        finally:
            for p in procs:
                if p.poll() is None:
                    p.kill()
                p.wait()
                assert p.stdout is not None
                p.stdout.close()
    fired, watermark = asyncio.run(_fired(database_url, pg_schema))
    per_occurrence = Counter(fired)
    assert per_occurrence, "nothing fired"
    assert max(per_occurrence.values()) == 1, per_occurrence.most_common(3)
    # no gap (catch_up='all'), no job without its watermark and no watermark without its jobs
    first = min(per_occurrence)
    expected: list[int] = []
    for instant in occurrences("* * * * *", ZoneInfo("UTC"), first - 1):
        if instant > watermark:
            break
        expected.append(instant)
    assert sorted(per_occurrence) == expected
    assert len(expected) >= 6


async def _fired(url: str, schema: str) -> tuple[list[int], int]:
    async with await psycopg.AsyncConnection.connect(url, autocommit=True) as conn:
        cur = await conn.execute(
            sql.SQL("SELECT payload->>'at' FROM {}").format(sql.Identifier(schema, "x_jobs"))
        )
        ats = [int(datetime.fromisoformat(r[0]).timestamp() * 1000) for r in await cur.fetchall()]
        cur = await conn.execute(
            sql.SQL("SELECT occurrence_ms FROM {} WHERE task = 'minutely'").format(
                sql.Identifier(schema, "x_task_fires")
            )
        )
        row = await cur.fetchone()
        assert row is not None
        return ats, int(row[0])


async def test_an_idle_minute_on_postgres_is_six_statements_for_fifty_tasks(
    pg_driver: PostgresJobDriver, monkeypatch: pytest.MonkeyPatch
) -> None:
    from ultimat3.core import FrozenClock

    sent: Counter[str] = Counter()
    db = pg_driver._db
    run = db._run

    async def counted(name: str, *args: Any) -> Any:
        sent[name] += 1
        return await run(name, *args)

    monkeypatch.setattr(db, "_run", counted)
    clock = FrozenClock("2026-06-01T12:00:30Z")
    tasks = [
        task(name=f"daily-{i}", cron=f"{i} 3 * * *", enqueue=lambda at: (on_tick, {"at": "x"}))
        for i in range(50)
    ]
    s = task_scheduler(purge=False, tasks=tasks, driver=pg_driver, clock=clock)
    await s.tick()
    assert s.leading
    assert sent == Counter({"lease_acquire": 1, "task_fires": 1, "paused_tasks": 1})
    sent.clear()
    for _ in range(60):  # one idle minute, a tick a (frozen) second
        clock.advance("1s")
        await s.tick()
    assert sent == Counter({"lease_renew": 6})
    await s.stop()
