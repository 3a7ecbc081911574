"""What the memory driver promises beyond the shared contract: isolation of stored values, its
clock, its refusals, tiered counters, the purge, and its place behind the port."""

from __future__ import annotations

from datetime import datetime
from typing import Any

import pytest

from ultimat3.core import FrozenClock, XError, new_id, use_clock
from ultimat3.jobs.adapter import (
    COUNTER_TIERS,
    MAX_ENQUEUE_BATCH,
    AckRequest,
    BackfillLedger,
    BatchSettler,
    ClaimedJob,
    EnqueueRequest,
    JobDriver,
    JobIntrospection,
    LeaseStore,
    MemoryJobDriver,
    StepStore,
    TaskFirer,
    WorkerRegistry,
    memory_job_driver,
)

DAY = 86_400_000


@pytest.fixture
def clock() -> FrozenClock:
    return FrozenClock("2026-05-01T00:00:00Z")


@pytest.fixture
def driver(clock: FrozenClock) -> MemoryJobDriver:
    return memory_job_driver(clock=clock)


def req(
    *, key: str | None = None, payload: Any = None, name: str = "j", **kw: Any
) -> EnqueueRequest:
    fields: dict[str, Any] = {
        "id": new_id(),
        "run_id": new_id(),
        "name": name,
        "queue": "q",
        "payload": {"n": 1} if payload is None else payload,
        "idempotency_key": key or new_id(),
        "max_attempts": 3,
    }
    fields.update(kw)
    return EnqueueRequest(**fields)


async def claim(driver: MemoryJobDriver, limit: int = 10) -> list[ClaimedJob]:
    return await driver.claim(queues=["q"], limit=limit, worker_id="w", visibility_timeout_ms=1000)


async def one(driver: MemoryJobDriver) -> ClaimedJob:
    [job] = await claim(driver, 1)
    return job


def code_of(info: pytest.ExceptionInfo[XError]) -> str:
    return info.value.code


# --- the port --------------------------------------------------------------------------------


def test_the_memory_driver_has_every_port_member() -> None:
    d = memory_job_driver()
    assert isinstance(d, JobDriver)
    assert isinstance(d.steps, StepStore)
    assert isinstance(d.leases, LeaseStore)
    assert isinstance(d.introspect, JobIntrospection)
    assert isinstance(d.backfills, BackfillLedger)
    assert isinstance(d, WorkerRegistry) and isinstance(d, TaskFirer)
    assert isinstance(d, BatchSettler)
    assert d.name == "memory" and memory_job_driver(name="other").name == "other"
    assert "jobs=0" in repr(d)


def test_the_memory_driver_owns_no_connection(driver: MemoryJobDriver) -> None:
    assert driver.owns_connection(object()) is False
    assert driver.owns_connection(None) is False


async def test_without_a_clock_it_reads_the_ambient_clock() -> None:
    d = memory_job_driver()
    frozen = FrozenClock("2030-01-01T00:00:00Z")
    with use_clock(frozen):
        assert await d.now_ms() == frozen.now_ms()
        await d.enqueue(req(delay_ms=5_000))
        assert await claim(d) == []
        frozen.advance("5s")
        assert len(await claim(d)) == 1


async def test_close_leaves_the_rows_readable(driver: MemoryJobDriver) -> None:
    r = req()
    await driver.enqueue(r)
    await driver.close()
    assert (await driver.introspect.show(r.id)).state == "ready"


# --- isolation -------------------------------------------------------------------------------


async def test_no_caller_can_mutate_a_stored_row(driver: MemoryJobDriver) -> None:
    payload = {"items": [1, 2]}
    r = req(payload=payload)
    await driver.enqueue(r)
    payload["items"].append(3)
    job = await one(driver)
    assert job.payload == {"items": [1, 2]}
    job.payload["items"].append(4)
    shown = await driver.introspect.show(r.id)
    assert shown.payload == {"items": [1, 2]}
    shown.payload["items"].append(5)
    output = {"deep": {"x": 1}}
    assert await driver.steps.record(
        r.id, "s", state="completed", worker_id="w", claim=job.claim, output=output
    )
    output["deep"]["x"] = 2
    loaded = await driver.steps.load(r.id)
    loaded["s"].output["deep"]["x"] = 3
    assert (await driver.steps.load(r.id))["s"].output == {"deep": {"x": 1}}
    assert (await driver.introspect.show(r.id)).payload == {"items": [1, 2]}


async def test_values_are_stored_in_their_json_form(driver: MemoryJobDriver) -> None:
    when = datetime(2026, 1, 2, 3, 4, 5, tzinfo=FrozenClock().now().tzinfo)
    r = req(payload={"at": when, "t": (1, 2)})
    await driver.enqueue(r)
    job = await one(driver)
    assert job.payload == {"at": "2026-01-02T03:04:05Z", "t": [1, 2]}


async def test_a_payload_with_no_json_form_is_refused_before_anything_is_written(
    driver: MemoryJobDriver,
) -> None:
    good, bad = req(), req(payload={"blob": b"\x00"})
    with pytest.raises(XError) as info:
        await driver.enqueue_many([good, bad])
    assert code_of(info) == "X_INVARIANT" and bad.id in info.value.message
    assert await driver.stats() == []


async def test_a_step_output_with_no_json_form_is_x_step_output_unserializable(
    driver: MemoryJobDriver,
) -> None:
    r = req()
    await driver.enqueue(r)
    job = await one(driver)
    with pytest.raises(XError) as info:
        await driver.steps.record(
            r.id, "s", state="completed", worker_id="w", claim=job.claim, output={1, object()}
        )
    assert code_of(info) == "X_STEP_OUTPUT_UNSERIALIZABLE" and r.id in info.value.message
    assert await driver.steps.load(r.id) == {}
    with pytest.raises(XError) as info:
        await driver.ack(r.id, worker_id="w", claim=job.claim, result=object())
    assert code_of(info) == "X_STEP_OUTPUT_UNSERIALIZABLE" and r.id in info.value.message
    with pytest.raises(XError) as info:
        await driver.progress(r.id, worker_id="w", claim=job.claim, progress={"at": b"\x01"})
    assert code_of(info) == "X_INVARIANT" and r.id in info.value.message
    with pytest.raises(XError) as info:
        await driver.steps.record(
            r.id, "s", state="failed", worker_id="w", claim=job.claim, error={"e": {1, b"x"}}
        )
    assert code_of(info) == "X_INVARIANT" and r.id in info.value.message
    assert (await driver.introspect.show(r.id)).state == "running"


# --- refusals --------------------------------------------------------------------------------


async def test_a_batch_past_max_enqueue_batch_is_refused_whole(driver: MemoryJobDriver) -> None:
    reqs = [req() for _ in range(MAX_ENQUEUE_BATCH + 1)]
    with pytest.raises(XError) as info:
        await driver.enqueue_many(reqs)
    assert code_of(info) == "X_JOB_ENQUEUE_BATCH_TOO_LARGE"
    assert str(MAX_ENQUEUE_BATCH + 1) in info.value.message
    assert await driver.stats() == []


@pytest.mark.parametrize(
    ("field", "value"),
    [("idempotency_key", ""), ("name", ""), ("queue", ""), ("id", ""), ("max_attempts", 0)],
)
async def test_a_malformed_request_is_refused_naming_the_field(
    driver: MemoryJobDriver, field: str, value: object
) -> None:
    fields: dict[str, Any] = {field: value}
    bad = req(**fields)
    with pytest.raises(XError) as info:
        await driver.enqueue_many([req(), bad])
    assert code_of(info) == "X_INVARIANT"
    assert field in info.value.message
    assert await driver.stats() == []


async def test_claim_heartbeat_and_nack_refuse_nonsense(driver: MemoryJobDriver) -> None:
    with pytest.raises(XError) as info:
        await driver.claim(queues=["q"], limit=1, worker_id="w", visibility_timeout_ms=0)
    assert code_of(info) == "X_INVARIANT" and "visibility_timeout_ms" in info.value.message
    with pytest.raises(XError) as info:
        await driver.claim(queues=["q"], limit=-1, worker_id="w", visibility_timeout_ms=10)
    assert code_of(info) == "X_INVARIANT" and "-1" in info.value.message
    with pytest.raises(XError) as info:
        await driver.claim(queues=["q"], limit=1, worker_id="", visibility_timeout_ms=10)
    assert code_of(info) == "X_INVARIANT" and "worker_id" in info.value.message
    await driver.enqueue(req())
    job = await one(driver)
    with pytest.raises(XError) as info:
        await driver.nack(job.id, worker_id="w", claim=job.claim, outcome="explode")  # type: ignore[arg-type]
    assert code_of(info) == "X_INVARIANT" and "explode" in info.value.message
    with pytest.raises(XError) as info:
        await driver.heartbeat(job.id, worker_id="w", claim=job.claim, visibility_timeout_ms=-5)
    assert code_of(info) == "X_INVARIANT" and "-5" in info.value.message
    with pytest.raises(XError) as info:
        await driver.steps.record(job.id, "s", state="done", worker_id="w", claim=job.claim)  # type: ignore[arg-type]
    assert code_of(info) == "X_INVARIANT" and "done" in info.value.message
    with pytest.raises(XError) as info:
        await driver.steps.record(job.id, "", state="started", worker_id="w", claim=job.claim)
    assert code_of(info) == "X_INVARIANT" and job.id in info.value.message
    assert await claim(driver, 0) == []


async def test_introspection_refuses_unknown_states_and_naive_times(
    driver: MemoryJobDriver,
) -> None:
    intro = driver.introspect
    with pytest.raises(XError) as info:
        await intro.list(state="lost")  # type: ignore[arg-type]
    assert code_of(info) == "X_INVARIANT" and "lost" in info.value.message
    with pytest.raises(XError) as info:
        await intro.list(created_from=datetime(2026, 1, 1))
    assert code_of(info) == "X_INVARIANT" and "created_from" in info.value.message
    for bulk in (intro.remove_many, intro.requeue_many, intro.promote_many):
        with pytest.raises(XError) as info:
            await bulk(state="lost")  # type: ignore[arg-type]
        assert code_of(info) == "X_INVARIANT" and "lost" in info.value.message
    with pytest.raises(XError) as info:
        await intro.pause_queue("")
    assert code_of(info) == "X_INVARIANT" and "queue" in info.value.message
    with pytest.raises(XError) as info:
        await intro.pause_task("")
    assert code_of(info) == "X_INVARIANT" and "task" in info.value.message


async def test_resolve_step_refuses_a_running_job_and_a_known_outcome(
    driver: MemoryJobDriver,
) -> None:
    r = req()
    await driver.enqueue(r)
    job = await one(driver)
    assert await driver.steps.record(
        r.id, "done-step", state="completed", worker_id="w", claim=job.claim
    )
    with pytest.raises(XError) as info:
        await driver.introspect.resolve_step(r.id, "done-step", ran=True)
    assert code_of(info) == "X_INVARIANT" and r.id in info.value.message
    assert "running" in info.value.message
    assert await driver.nack(r.id, worker_id="w", claim=job.claim, outcome="dead")
    with pytest.raises(XError) as info:
        await driver.introspect.resolve_step(r.id, "done-step", ran=False)
    assert code_of(info) == "X_INVARIANT" and "already completed" in info.value.message
    assert "done-step" in (await driver.steps.load(r.id))


async def test_a_cancel_without_a_reason_says_an_operator_cancelled(
    driver: MemoryJobDriver,
) -> None:
    r = req()
    await driver.enqueue(r)
    row = await driver.introspect.cancel(r.id)
    assert row.last_error is not None
    assert row.last_error["code"] == "X_ABORTED"
    assert "operator" in row.last_error["message"]


async def test_requeue_keeps_the_run_id_and_clears_the_finish(driver: MemoryJobDriver) -> None:
    r = req()
    await driver.enqueue(r)
    job = await one(driver)
    assert await driver.ack(r.id, worker_id="w", claim=job.claim, result={"ok": True})
    row = await driver.introspect.requeue(r.id)
    assert (row.run_id, row.result, row.finished_at) == (r.run_id, None, None)


# --- leases, backfills, workers, task fires ---------------------------------------------------


async def test_the_lease_store_refuses_nonsense(driver: MemoryJobDriver) -> None:
    with pytest.raises(XError) as info:
        await driver.leases.acquire("k", limit=0, holder="h", ttl_ms=10)
    assert code_of(info) == "X_INVARIANT" and "limit 0" in info.value.message
    with pytest.raises(XError) as info:
        await driver.leases.acquire("k", limit=1, holder="h", ttl_ms=0)
    assert code_of(info) == "X_INVARIANT" and "ttl_ms 0" in info.value.message
    with pytest.raises(XError) as info:
        await driver.leases.acquire("k", limit=1, holder="", ttl_ms=10)
    assert code_of(info) == "X_INVARIANT" and "holder" in info.value.message
    with pytest.raises(XError) as info:
        await driver.leases.renew("", 0, holder="h", ttl_ms=10)
    assert code_of(info) == "X_INVARIANT" and "key" in info.value.message


async def test_the_backfill_ledger_refuses_unknown_passes_and_bad_states(
    driver: MemoryJobDriver,
) -> None:
    ghost = new_id()
    with pytest.raises(XError) as info:
        await driver.backfills.advance(ghost, rows=1, cursor=None)
    assert code_of(info) == "X_INVARIANT" and ghost in info.value.message
    row = await driver.backfills.begin("b", job_id=None, cursor=None)
    with pytest.raises(XError) as info:
        await driver.backfills.advance(row.id, rows=-1, cursor=None)
    assert code_of(info) == "X_INVARIANT" and "-1" in info.value.message
    with pytest.raises(XError) as info:
        await driver.backfills.finish(row.id, state="running")
    assert code_of(info) == "X_INVARIANT" and "running" in info.value.message
    with pytest.raises(XError) as info:
        await driver.backfills.list(limit=0)
    assert code_of(info) == "X_JOB_PAGE_INVALID" and "0" in info.value.message
    with pytest.raises(XError) as info:
        await driver.backfills.begin("", job_id=None, cursor=None)
    assert code_of(info) == "X_INVARIANT"


async def test_workers_and_task_fires_refuse_nonsense(driver: MemoryJobDriver) -> None:
    with pytest.raises(XError) as info:
        await driver.register_worker("w", host="h", queues=[], slots=1, visibility_timeout_ms=0)
    assert code_of(info) == "X_INVARIANT" and "visibility_timeout_ms" in info.value.message
    with pytest.raises(XError) as info:
        await driver.register_worker("", host="h", queues=[], slots=1, visibility_timeout_ms=5)
    assert code_of(info) == "X_INVARIANT"
    with pytest.raises(XError) as info:
        await driver.fire_task("", 1, [])
    assert code_of(info) == "X_INVARIANT"
    assert not await driver.deregister_worker("nobody")


# --- counters ----------------------------------------------------------------------------------


async def test_counters_keep_finer_buckets_for_shorter_spans(
    driver: MemoryJobDriver, clock: FrozenClock
) -> None:
    await driver.enqueue(req(name="c"))
    job = await one(driver)
    assert await driver.ack(job.id, worker_id="w", claim=job.claim, duration_ms=7)
    t0 = clock.now_ms()
    tiers = [bucket for bucket, _kept in COUNTER_TIERS]

    async def buckets(since_ms: int) -> list[tuple[int, int, int]]:
        rows = await driver.introspect.counters(job="c", since_ms=since_ms)
        return [(r.bucket_ms, r.done, r.duration_ms) for r in rows]

    assert await buckets(t0 - 3_600_000) == [(tiers[0], 1, 7)]
    clock.advance("2d")
    assert await buckets(clock.now_ms() - 3_600_000) == [], "the hour holds no settle"
    assert await buckets(clock.now_ms() - 3 * DAY) == [(tiers[1], 1, 7)]
    clock.advance("7d")
    assert await buckets(clock.now_ms() - 10 * DAY) == [(tiers[2], 1, 7)]
    assert (await driver.introspect.counter_totals(clock.now_ms() - 10 * DAY)).done == 1
    clock.advance("22d")
    assert await buckets(clock.now_ms() - 40 * DAY) == [], "past 30 days nothing is kept"
    assert (await driver.introspect.counter_totals(0)).done == 0


async def test_counters_bucket_by_the_minute(driver: MemoryJobDriver, clock: FrozenClock) -> None:
    clock.set("2026-05-01T00:00:30Z")
    await driver.enqueue_many([req(name="m"), req(name="m")])
    a, b = await claim(driver)
    assert await driver.ack(a.id, worker_id="w", claim=a.claim)
    clock.advance("40s")
    assert await driver.nack(b.id, worker_id="w", claim=b.claim, outcome="retry")
    rows = await driver.introspect.counters(job="m", since_ms=clock.now_ms() - 600_000)
    assert [(r.bucket_start.isoformat(), r.done, r.retried) for r in rows] == [
        ("2026-05-01T00:00:00+00:00", 1, 0),
        ("2026-05-01T00:01:00+00:00", 0, 1),
    ]


# --- purge -------------------------------------------------------------------------------------


async def test_purge_deletes_rows_past_their_retention(
    driver: MemoryJobDriver, clock: FrozenClock
) -> None:
    done, dead, live = req(), req(), req(delay_ms=100 * DAY)
    await driver.enqueue_many([done, dead, live])
    a, b = await claim(driver)
    assert await driver.ack(done.id, worker_id="w", claim=a.claim if a.id == done.id else b.claim)
    assert await driver.nack(
        dead.id, worker_id="w", claim=a.claim if a.id == dead.id else b.claim, outcome="dead"
    )
    assert await driver.steps.load(done.id) == {}
    await driver.register_worker("w1", host="h", queues=["q"], slots=1, visibility_timeout_ms=1000)
    grant = await driver.leases.acquire("k", limit=1, holder="h", ttl_ms=1000)
    assert grant is not None
    clock.advance("13d")
    assert await driver.purge() == 0
    clock.advance("1d")
    assert await driver.purge() == 1
    ids = {r.id for r in await driver.introspect.list(limit=10)}
    assert ids == {dead.id, live.id}
    clock.advance("76d")
    assert await driver.purge() == 1
    assert {r.id for r in await driver.introspect.list(limit=10)} == {live.id}
    assert not await driver.worker_heartbeat("w1", in_flight=[]), "an expired worker is purged"
    assert not await driver.leases.renew("k", grant.slot, holder="h", ttl_ms=10)


async def test_purge_takes_shorter_retention(driver: MemoryJobDriver, clock: FrozenClock) -> None:
    r = req()
    await driver.enqueue(r)
    job = await one(driver)
    assert await driver.introspect.cancel(r.id, "stop") is not None
    assert not await driver.ack(r.id, worker_id="w", claim=job.claim)
    clock.advance("2h")
    assert await driver.purge(dead_older_than_ms=3_600_000) == 1


# --- the clock drives leases ---------------------------------------------------------------------


async def test_a_lease_lapses_exactly_at_its_expiry(
    driver: MemoryJobDriver, clock: FrozenClock
) -> None:
    await driver.enqueue(req())
    job = await one(driver)
    clock.advance(999)
    assert await claim(driver) == []
    clock.advance(1)
    [again] = await claim(driver)
    assert (again.id, again.attempt) == (job.id, 2)


# --- batch settles -----------------------------------------------------------------------------


async def test_ack_many_checks_every_result_before_any_lands(driver: MemoryJobDriver) -> None:
    await driver.enqueue_many([req(), req()])
    a, b = await claim(driver)
    with pytest.raises(XError) as info:
        await driver.ack_many(
            [AckRequest(a.id, a.claim, result=1), AckRequest(b.id, b.claim, result=object())],
            worker_id="w",
        )
    assert code_of(info) == "X_STEP_OUTPUT_UNSERIALIZABLE" and b.id in info.value.message
    assert {s.queue: s.running for s in await driver.stats()} == {"q": 2}


async def test_ack_many_lands_one_ack_per_job(driver: MemoryJobDriver) -> None:
    await driver.enqueue(req())
    job = await one(driver)
    twice = [AckRequest(job.id, job.claim, result=1), AckRequest(job.id, job.claim, result=2)]
    assert await driver.ack_many(twice, worker_id="w") == [True, False]
    assert (await driver.introspect.show(job.id)).result == 1


async def test_heartbeat_many_refuses_a_non_positive_timeout(driver: MemoryJobDriver) -> None:
    with pytest.raises(XError) as info:
        await driver.heartbeat_many([], worker_id="w", visibility_timeout_ms=0)
    assert code_of(info) == "X_INVARIANT" and "visibility_timeout_ms 0" in info.value.message
