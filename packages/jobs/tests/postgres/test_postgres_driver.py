"""The Postgres driver's own surface: building and closing it, the errors it raises, the batch
settles it adds (ack_many, heartbeat_many), counters moved by settles, leases under contention,
purge, and the public names of ultimat3.jobs.postgres."""

from __future__ import annotations

import asyncio
import json
from typing import Any

import psycopg
import pytest
from psycopg import sql
from psycopg.conninfo import make_conninfo
from psycopg_pool import AsyncConnectionPool

import ultimat3.jobs.postgres as pg
from ultimat3.core import XError, new_id
from ultimat3.jobs.adapter import (
    BatchSettler,
    EnqueueRequest,
    JobDriver,
    JobIntrospection,
    LeaseStore,
    StepStore,
)
from ultimat3.jobs.postgres import AckRequest, PostgresJobDriver, postgres_job_driver
from ultimat3.jobs.postgres._db import Database

NOWHERE = "postgresql://postgres@127.0.0.1:1/test?connect_timeout=2"


def req(i: int = 0, *, name: str = "drv.job", queue: str = "q", **kw: Any) -> EnqueueRequest:
    return EnqueueRequest(
        id=new_id(),
        run_id=new_id(),
        name=name,
        queue=queue,
        payload={"i": i},
        idempotency_key=f"k{i}",
        max_attempts=kw.pop("max_attempts", 3),
        **kw,
    )


async def claim(driver: PostgresJobDriver, limit: int = 100, **kw: Any) -> list[Any]:
    return await driver.claim(
        queues=["q"],
        limit=limit,
        worker_id=kw.pop("worker_id", "w"),
        visibility_timeout_ms=kw.pop("vt", 60_000),
        **kw,
    )


# --- surface ----------------------------------------------------------------------------------


def test_all_names_the_public_surface_exactly() -> None:
    public = {n for n in dir(pg) if not n.startswith("_")}
    modules = {n for n in public if type(getattr(pg, n)).__name__ == "module"}
    assert set(pg.__all__) == public - modules
    assert sorted(pg.__all__) == list(pg.__all__)


async def test_the_driver_implements_every_port_member(pg_driver: PostgresJobDriver) -> None:
    assert isinstance(pg_driver, JobDriver)
    assert isinstance(pg_driver.steps, StepStore)
    assert isinstance(pg_driver.leases, LeaseStore)
    assert isinstance(pg_driver.introspect, JobIntrospection)
    assert pg_driver.name == "postgres" and pg_driver.schema.startswith("x_test_")


# --- errors -----------------------------------------------------------------------------------


async def test_an_unreachable_server_is_driver_unavailable_with_the_cause() -> None:
    driver = postgres_job_driver(NOWHERE, timeout_s=0.5)
    try:
        for call in (driver.now_ms(), driver.enqueue(req()), claim(driver), driver.open()):
            with pytest.raises(XError) as caught:
                await call
            assert caught.value.code == "X_DRIVER_UNAVAILABLE"
            assert isinstance(caught.value.__cause__, psycopg.OperationalError)
    finally:
        await driver.close()


async def test_a_closed_driver_refuses_with_driver_unavailable(database_url: str) -> None:
    driver = postgres_job_driver(database_url)
    await driver.open()
    await driver.close()
    with pytest.raises(XError) as caught:
        await driver.now_ms()
    assert caught.value.code == "X_DRIVER_UNAVAILABLE" and "closed" in caught.value.message


async def test_an_unmigrated_schema_is_config_invalid_naming_migrate(database_url: str) -> None:
    driver = postgres_job_driver(database_url, schema="x_never_migrated")
    try:
        with pytest.raises(XError) as caught:
            await driver.stats()
        assert caught.value.code == "X_CONFIG_INVALID"
        assert "x_never_migrated" in caught.value.message and "queue stats" in caught.value.message
        assert caught.value.fix is not None and "migrate" in caught.value.fix
    finally:
        await driver.close()


def test_bad_configuration_is_refused_at_build() -> None:
    cases: list[tuple[Any, dict[str, Any], str]] = [
        (42, {}, "int"),
        ("", {}, "DSN"),
        ("postgresql://x", {"schema": ""}, "schema"),
        ("postgresql://x", {"schema": "s" * 64}, "63 bytes"),
        ("postgresql://x", {"max_size": 0}, "max_size"),
        ("postgresql://x", {"min_size": -1}, "min_size"),
    ]
    for source, kw, needle in cases:
        with pytest.raises(XError) as caught:
            postgres_job_driver(source, **kw)
        assert caught.value.code == "X_CONFIG_INVALID"
        assert needle in caught.value.message


async def test_argument_refusals_name_the_argument(pg_driver: PostgresJobDriver) -> None:
    cases: list[tuple[Any, str, str]] = [
        (claim(pg_driver, vt=0), "X_INVARIANT", "visibility_timeout_ms"),
        (claim(pg_driver, limit=-1), "X_INVARIANT", "limit"),
        (claim(pg_driver, worker_id=""), "X_INVARIANT", "worker_id"),
        (
            pg_driver.nack(new_id(), worker_id="w", claim=new_id(), outcome="later"),  # type: ignore[arg-type]
            "X_INVARIANT",
            "later",
        ),
        (
            pg_driver.ack(new_id(), worker_id="w", claim=new_id(), result=object()),
            "X_STEP_OUTPUT_UNSERIALIZABLE",
            "result",
        ),
        (
            pg_driver.steps.record(new_id(), "s", state="done", worker_id="w", claim=new_id()),  # type: ignore[arg-type]
            "X_INVARIANT",
            "done",
        ),
        (pg_driver.leases.acquire("k", limit=0, holder="h", ttl_ms=1), "X_INVARIANT", "limit"),
        (pg_driver.leases.acquire("k", limit=1, holder="", ttl_ms=1), "X_INVARIANT", "holder"),
        (pg_driver.leases.acquire("k", limit=1, holder="h", ttl_ms=0), "X_INVARIANT", "ttl_ms"),
        (pg_driver.purge(done_older_than_ms=-1), "X_INVARIANT", "done_older_than_ms"),
        (pg_driver.wake_waiters(""), "X_INVARIANT", "event"),
    ]
    for call, code, needle in cases:
        with pytest.raises(XError) as caught:
            await call
        assert caught.value.code == code, caught.value
        assert needle in caught.value.message, caught.value.message


async def test_settles_with_ids_no_claim_produced_answer_false(
    pg_driver: PostgresJobDriver,
) -> None:
    await pg_driver.enqueue(req())
    [job] = await claim(pg_driver)
    for job_id, claim_token in (("nope", job.claim), (job.id, "nope"), (job.id, job.claim.upper())):
        assert not await pg_driver.ack(job_id, worker_id="w", claim=claim_token)
        assert not await pg_driver.heartbeat(
            job_id, worker_id="w", claim=claim_token, visibility_timeout_ms=1000
        )
    assert await pg_driver.steps.load("nope") == {}
    assert await pg_driver.ack(job.id, worker_id="w", claim=job.claim)


# --- batch settles ----------------------------------------------------------------------------


async def test_ack_many_acks_a_batch_in_one_statement_fenced_per_job(
    pg_driver: PostgresJobDriver,
) -> None:
    await pg_driver.enqueue_many([req(i) for i in range(5)])
    jobs = await claim(pg_driver)
    assert len(jobs) == 5
    acks = [AckRequest(j.id, j.claim, result={"i": i}, duration_ms=10) for i, j in enumerate(jobs)]
    acks[1] = AckRequest(jobs[1].id, new_id())
    acks.append(AckRequest("not-an-id", jobs[0].claim))
    landed = await pg_driver.ack_many(acks, worker_id="w")
    assert landed == [True, False, True, True, True, False]
    assert await pg_driver.ack_many([], worker_id="w") == []
    [stats] = await pg_driver.stats()
    assert (stats.done, stats.running) == (4, 1)
    assert (await pg_driver.introspect.show(jobs[2].id)).result == {"i": 2}
    totals = await pg_driver.introspect.counter_totals(await pg_driver.now_ms() - 60_000)
    assert (totals.done, totals.duration_ms) == (4, 40)


async def test_heartbeat_many_renews_each_lease_it_still_holds(
    pg_driver: PostgresJobDriver,
) -> None:
    await pg_driver.enqueue_many([req(i) for i in range(3)])
    jobs = await claim(pg_driver, vt=1_000)
    before = {j.id: j.lease_expires_at_ms for j in jobs}
    renewed = await pg_driver.heartbeat_many(
        [(jobs[0].id, jobs[0].claim), (jobs[1].id, new_id()), (jobs[2].id, jobs[2].claim)],
        worker_id="w",
        visibility_timeout_ms=60_000,
    )
    assert renewed == [True, False, True]
    rows = {r.id: r for r in await pg_driver.introspect.list(state="running")}
    expiry = rows[jobs[0].id].lease_expires_at
    assert expiry is not None and expiry.timestamp() * 1000 > before[jobs[0].id] + 50_000


# --- counters, leases, purge ------------------------------------------------------------------


async def test_settles_from_many_connections_sum_into_one_bucket(
    database_url: str, pg_schema: str, pg_driver: PostgresJobDriver
) -> None:
    await pg_driver.enqueue_many([req(i) for i in range(40)])
    jobs = await claim(pg_driver)
    drivers = [postgres_job_driver(database_url, schema=pg_schema) for _ in range(4)]
    try:
        await asyncio.gather(
            *(
                drivers[i % 4].ack(j.id, worker_id="w", claim=j.claim, duration_ms=1)
                for i, j in enumerate(jobs)
            )
        )
    finally:
        for d in drivers:
            await d.close()
    since = await pg_driver.now_ms() - 60_000
    rows = await pg_driver.introspect.counters(job="drv.job", since_ms=since)
    assert [(r.bucket_ms, r.done, r.duration_ms) for r in rows] == [(60_000, 40, 40)]


async def test_leases_under_contention_grant_each_slot_once(
    database_url: str, pg_schema: str
) -> None:
    drivers = [postgres_job_driver(database_url, schema=pg_schema, max_size=1) for _ in range(8)]
    try:
        grants = await asyncio.gather(
            *(
                d.leases.acquire("busy", limit=3, holder=f"h{i}", ttl_ms=30_000)
                for i, d in enumerate(drivers)
            )
        )
        held = [g for g in grants if g is not None]
        assert sorted(g.slot for g in held) == [0, 1, 2]
        assert len({g.token for g in held}) == 3
        again = await drivers[0].leases.acquire("busy", limit=3, holder=held[0].holder, ttl_ms=5)
        assert again is not None and again.slot == held[0].slot
        assert again.token > max(g.token for g in held)
    finally:
        for d in drivers:
            await d.close()


async def test_purge_deletes_finished_rows_past_their_retention(
    pg_driver: PostgresJobDriver, database_url: str, pg_schema: str
) -> None:
    await pg_driver.enqueue_many([req(i) for i in range(4)])
    jobs = await claim(pg_driver)
    assert await pg_driver.steps.record(
        jobs[0].id, "s", state="completed", worker_id="w", claim=jobs[0].claim
    )
    assert await pg_driver.ack(jobs[0].id, worker_id="w", claim=jobs[0].claim)
    assert await pg_driver.ack(jobs[1].id, worker_id="w", claim=jobs[1].claim)
    assert await pg_driver.nack(jobs[2].id, worker_id="w", claim=jobs[2].claim, outcome="dead")
    ages = {jobs[0].id: 15, jobs[1].id: 13, jobs[2].id: 91}
    async with await psycopg.AsyncConnection.connect(database_url, autocommit=True) as conn:
        for job_id, days in ages.items():
            await conn.execute(
                sql.SQL(
                    "UPDATE {} SET created_at = now() - make_interval(days => %s), "
                    "finished_at = now() - make_interval(days => %s) WHERE id = %s"
                ).format(sql.Identifier(pg_schema, "x_jobs")),
                (days, days, job_id),
            )
    assert await pg_driver.purge() == 2
    left = {r.id for r in await pg_driver.introspect.list()}
    assert left == {jobs[1].id, jobs[3].id}
    assert await pg_driver.steps.load(jobs[0].id) == {}
    assert await pg_driver.purge() == 0


async def test_workers_register_heartbeat_and_expire(pg_driver: PostgresJobDriver) -> None:
    row = await pg_driver.register_worker(
        "w-1", host="h", queues=["a", "b"], slots=4, visibility_timeout_ms=300
    )
    assert (row.id, row.queues, row.slots, row.in_flight) == ("w-1", ("a", "b"), 4, ())
    assert await pg_driver.worker_heartbeat("w-1", in_flight=["j1"])
    [seen] = await pg_driver.introspect.workers()
    assert seen.in_flight == ("j1",)
    await asyncio.sleep(0.4)
    assert await pg_driver.introspect.workers() == []
    await pg_driver.purge()
    assert not await pg_driver.worker_heartbeat("w-1", in_flight=[])
    assert not await pg_driver.deregister_worker("w-1")


def test_the_driver_offers_the_batch_settles_of_the_port(pg_driver: PostgresJobDriver) -> None:
    assert isinstance(pg_driver, BatchSettler)


async def test_the_pool_recovers_from_killed_connections(database_url: str, pg_schema: str) -> None:
    app = f"x_test_{new_id()[:8]}"
    dsn = make_conninfo(database_url, application_name=app)
    driver = postgres_job_driver(dsn, schema=pg_schema, min_size=2, max_size=2)

    async def kill_all() -> int:
        async with await psycopg.AsyncConnection.connect(database_url, autocommit=True) as conn:
            cur = await conn.execute(
                "SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity "
                "WHERE application_name = %s",
                (app,),
            )
            row = await cur.fetchone()
            assert row is not None
            return int(row[0])

    try:
        await driver.enqueue_many([req(i) for i in range(3)])
        assert await kill_all() >= 1
        # a statement safe to repeat is sent again on a fresh connection
        assert (await driver.enqueue(req(9))).deduped is False
        [stats] = await driver.stats()
        assert stats.ready == 4
        assert await kill_all() >= 1
        # a claim may have committed before its connection died: it is not repeated ...
        with pytest.raises(XError) as caught:
            await claim(driver, limit=1)
        assert caught.value.code == "X_DRIVER_UNAVAILABLE"
        # ... and the next one runs on a healthy pool
        got = await claim(driver, limit=10)
        assert len(got) == 4
    finally:
        await driver.close()


async def test_pool_size_names_the_pools_maximum(database_url: str) -> None:
    owned = postgres_job_driver(database_url, max_size=7)
    assert owned.pool_size == 7
    async with AsyncConnectionPool(database_url, min_size=1, max_size=3, open=False) as pool:
        assert postgres_job_driver(pool).pool_size == 3
    await owned.close()


async def test_the_drivers_own_pool_reuses_one_cursor_per_connection(
    database_url: str, pg_schema: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Statements on the driver's own pool go through each connection's one cursor (a new
    cursor per statement rebuilds its adapters), the single enqueue's through none (lean); a
    closed cursor is replaced, and a caller's pool of plain connections gets a cursor per
    statement, the enqueue's too, as conn.execute would."""
    made: list[Any] = []
    original = psycopg.AsyncConnection.cursor

    def counting(self: Any, *a: Any, **kw: Any) -> Any:
        cursor = original(self, *a, **kw)
        made.append(cursor)
        return cursor

    monkeypatch.setattr(psycopg.AsyncConnection, "cursor", counting)
    driver = postgres_job_driver(database_url, schema=pg_schema, min_size=1, max_size=1)
    try:
        for i in range(5):
            await driver.enqueue(req(i))
        assert made == [], "the single enqueue's statements go lean, through no cursor"
        for _ in range(5):
            await driver.now_ms()
        assert len(made) == 1, "one cursor for five statements on one pooled connection"
        await made[0].close()
        await driver.now_ms()
        assert len(made) == 2 and not made[1].closed
        assert (await driver.stats())[0].ready == 5 and len(made) == 2
    finally:
        await driver.close()
    made.clear()
    async with AsyncConnectionPool(database_url, min_size=1, max_size=1, open=False) as pool:
        theirs = postgres_job_driver(pool, schema=pg_schema)
        for i in range(6, 9):
            await theirs.enqueue(req(i))
        assert len(made) == 3


async def test_a_statement_cancelled_mid_flight_costs_the_pool_nothing(
    database_url: str, pg_schema: str
) -> None:
    """The driver's own pool takes its connections back without a commit (they are autocommit);
    one left mid-statement by a cancelled call is closed and replaced, never handed out again,
    even with room for one connection only."""
    driver = postgres_job_driver(database_url, schema=pg_schema, min_size=1, max_size=1)
    blocker = await psycopg.AsyncConnection.connect(database_url)
    try:
        held = req(1)
        await blocker.execute(
            sql.SQL(
                "INSERT INTO {} (id, run_id, name, queue, state, idempotency_key, max_attempts,"
                " run_at, created_at, updated_at) VALUES (%s, %s, %s, 'q', 'ready', %s, 3, now(),"
                " now(), now())"
            ).format(sql.Identifier(pg_schema, "x_jobs")),
            (held.id, held.run_id, held.name, held.idempotency_key),
        )  # uncommitted: an enqueue of the same key waits on it
        waiting = asyncio.ensure_future(driver.enqueue(req(1)))  # the same key: k1
        await asyncio.sleep(0.3)
        assert not waiting.done()
        waiting.cancel()
        with pytest.raises(asyncio.CancelledError):
            await waiting
        await blocker.rollback()
        done = await asyncio.wait_for(driver.enqueue(req(3)), 10)
        assert not done.deduped
        assert await driver.now_ms() > 0
        await asyncio.sleep(0.2)
        [stats] = await driver.stats()
        assert stats.ready == 1, "the cancelled enqueue was cancelled on the server too"
    finally:
        await blocker.close()
        await driver.close()


async def test_acks_made_together_share_one_statement_each_fenced(
    pg_driver: PostgresJobDriver, monkeypatch: pytest.MonkeyPatch
) -> None:
    await pg_driver.enqueue_many([req(i) for i in range(200)])
    jobs = await claim(pg_driver, limit=200)
    sent: list[int] = []
    original = Database.fetchall

    async def counting(self: Database, name: str, params: Any, **kw: Any) -> Any:
        if name == "ack_many":
            sent.append(len(json.loads(params["rows"])))
        return await original(self, name, params, **kw)

    monkeypatch.setattr(Database, "fetchall", counting)
    claims = [j.claim if i % 10 else new_id() for i, j in enumerate(jobs)]  # every 10th: stale
    landed = await asyncio.gather(
        *(
            pg_driver.ack(j.id, worker_id="w", claim=c, duration_ms=1)
            for j, c in zip(jobs, claims, strict=True)
        )
    )
    assert landed == [bool(i % 10) for i in range(200)]
    assert sum(sent) == 200 and len(sent) <= 2, sent
    [stats] = await pg_driver.stats()
    assert (stats.done, stats.running) == (180, 20)


async def test_a_failing_shared_ack_statement_reaches_every_caller() -> None:
    driver = postgres_job_driver(NOWHERE, timeout_s=0.5)
    try:
        results = await asyncio.gather(
            *(driver.ack(new_id(), worker_id="w", claim=new_id()) for _ in range(5)),
            return_exceptions=True,
        )
    finally:
        await driver.close()
    assert all(isinstance(r, XError) and r.code == "X_DRIVER_UNAVAILABLE" for r in results)


async def test_a_claim_tells_which_runs_have_no_steps_so_loading_them_is_free(
    pg_driver: PostgresJobDriver, monkeypatch: pytest.MonkeyPatch
) -> None:
    await pg_driver.enqueue_many([req(i) for i in range(2)])
    bare, stepped = await claim(pg_driver)
    assert await pg_driver.steps.record(
        stepped.id, "s", state="completed", worker_id="w", claim=stepped.claim, output=1
    )
    assert await pg_driver.nack(stepped.id, worker_id="w", claim=stepped.claim, outcome="release")
    [again] = await claim(pg_driver)
    assert again.id == stepped.id
    loads: list[str] = []
    original = Database.fetchall

    async def counting(self: Database, name: str, params: Any, **kw: Any) -> Any:
        loads.append(name)
        return await original(self, name, params, **kw)

    monkeypatch.setattr(Database, "fetchall", counting)
    assert await pg_driver.steps.load(bare.id) == {}
    assert loads == [], "a run the claim saw without steps is loaded without a round trip"
    assert list(await pg_driver.steps.load(again.id)) == ["s"]
    assert await pg_driver.steps.record(
        bare.id, "t", state="completed", worker_id="w", claim=bare.claim, output=2
    )
    assert list(await pg_driver.steps.load(bare.id)) == ["t"]
    assert loads.count("steps_load") == 2
