"""The outbox relay loop on Postgres: statements per idle minute, with and without the wake, and
the delay from a stage's commit to its publish.

    uv run python tooling/bench/relay_idle.py [--seconds 60] [--stages 20]

Idle cost: two relay loops at their defaults (200 ms doubling to 2 s; 5 s while the wake is
proven) run side by side over one empty outbox for ``--seconds``; one has the LISTEN wake, the
other has it hidden (what a store without ``start_wake`` gets). Every statement each sends
through its store's pool is counted (claims, and the wake's probes), and printed per idle minute
beside the spec's figures (claims: 12 with the wake, 30 without). The LISTEN session's own
``LISTEN`` is one statement at start and is not in the rate.

Wake delay: the waking loop alone, then ``--stages`` single-row stages 1 s apart (each finds the
loop idle), each from its own connection; delay = the driver's ``enqueue_many`` call minus the
stage's ``commit()`` return, both ``time.monotonic``. Median and max. Loopback only; its own
schema, dropped after.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import time
import uuid
from typing import Any

import psycopg
from psycopg import sql

from ultimat3.core import new_id
from ultimat3.jobs import relay_loop
from ultimat3.jobs.adapter import EnqueueRequest
from ultimat3.jobs.postgres import migrate, postgres_job_driver, postgres_outbox_store
from ultimat3.jobs.postgres._outbox import PostgresOutboxStore

URL = os.environ.get("DATABASE_URL", "postgresql://postgres@127.0.0.1:5432/test")


class Counted:
    """Counts the statements a store sends through its pool (claims, probes, marks)."""

    def __init__(self, store: PostgresOutboxStore) -> None:
        self.statements = 0
        self.claims = 0
        db = store._db
        for name in ("fetchall", "fetchone", "rowcount"):
            inner = getattr(db, name)
            setattr(db, name, self._wrap(inner))

    def _wrap(self, inner: Any) -> Any:
        async def counted(query: str, *args: Any, **kw: Any) -> Any:
            self.statements += 1
            if query == "outbox_claim":
                self.claims += 1
            return await inner(query, *args, **kw)

        return counted


class NoWake:
    """The store with its wake hidden."""

    def __init__(self, inner: PostgresOutboxStore) -> None:
        self._inner = inner

    def __getattr__(self, name: str) -> Any:
        if name == "start_wake":
            raise AttributeError(name)
        return getattr(self._inner, name)


def _req(i: int) -> EnqueueRequest:
    return EnqueueRequest(
        id=new_id(),
        run_id=new_id(),
        name="bench.relayed",
        queue="default",
        payload={"i": i},
        idempotency_key=f"b{i}",
        max_attempts=3,
    )


async def main(seconds: float, stages: int) -> None:
    schema = f"x_bench_relay_{uuid.uuid4().hex[:10]}"
    await migrate(URL, schema=schema)
    driver = postgres_job_driver(URL, schema=schema)
    woken_store = postgres_outbox_store(URL, schema=schema)
    polled_store = postgres_outbox_store(URL, schema=schema)
    woken, polled = Counted(woken_store), Counted(polled_store)
    try:
        with_wake = relay_loop(store=woken_store, driver=driver)
        without = relay_loop(store=NoWake(polled_store), driver=driver)  # type: ignore[arg-type]
        await with_wake.start()
        await without.start()
        assert with_wake._wake_handle is not None
        proven = await with_wake._wake_handle.wait_proven(5.0)
        await asyncio.sleep(12)  # past the doubling: steady idle
        w0, p0, wc0, pc0 = woken.statements, polled.statements, woken.claims, polled.claims
        t0 = time.monotonic()
        await asyncio.sleep(seconds)
        minutes = (time.monotonic() - t0) / 60
        await without.stop()
        print(f"relay idle cost over {seconds:.0f} s (steady state, after 12 s of doubling)")
        print(f"  wake proven: {proven}")
        print(
            f"  with the wake:    {(woken.claims - wc0) / minutes:5.1f} claims/min, "
            f"{(woken.statements - w0) / minutes:5.1f} statements/min (spec: 12 claims)"
        )
        print(
            f"  without the wake: {(polled.claims - pc0) / minutes:5.1f} claims/min, "
            f"{(polled.statements - p0) / minutes:5.1f} statements/min (spec: 30 claims)"
        )

        published_at: list[float] = []
        inner_many = driver.enqueue_many

        async def timed(requests: Any, **kw: Any) -> Any:
            published_at.append(time.monotonic())
            return await inner_many(requests, **kw)

        driver.enqueue_many = timed  # type: ignore[method-assign]
        delays: list[float] = []
        for i in range(stages):
            await asyncio.sleep(1.0)
            before = len(published_at)
            async with await psycopg.AsyncConnection.connect(URL) as conn:
                await woken_store.stage(conn, [_req(i)])
                await conn.commit()
                committed = time.monotonic()
            for _ in range(1000):
                if len(published_at) > before:
                    break
                await asyncio.sleep(0.001)
            delays.append((published_at[before] - committed) * 1000)
        await with_wake.stop()
        if delays:
            print(
                f"stage commit -> relay publish, idle relay, {stages} stages 1 s apart: "
                f"median {statistics.median(delays):.1f} ms, max {max(delays):.1f} ms"
            )
    finally:
        await woken_store.close()
        await polled_store.close()
        await driver.close()
        async with await psycopg.AsyncConnection.connect(URL, autocommit=True) as conn:
            await conn.execute(
                sql.SQL("DROP SCHEMA IF EXISTS {} CASCADE").format(sql.Identifier(schema))
            )


if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("--seconds", type=float, default=60.0)
    parser.add_argument("--stages", type=int, default=20)
    a = parser.parse_args()
    asyncio.run(main(a.seconds, a.stages))
