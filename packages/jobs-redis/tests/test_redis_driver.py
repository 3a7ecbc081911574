"""What the Redis driver adds to (or must prove beyond) the driver contract: its keys, its
scripts, its clock, atomic batches, refusals naming the offending thing, purge, close."""

from __future__ import annotations

import asyncio
import dataclasses
import importlib.resources
import os
import time
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any, cast

import pytest
from redis.asyncio import Redis
from redis.crc import key_slot

from ultimat3.core import FrozenClock, XError, new_id, use_clock
from ultimat3.jobs.adapter import EnqueueRequest, EnqueueResult, job_cursor
from ultimat3.jobs_redis import RedisJobDriver, redis_job_driver
from ultimat3.jobs_redis import _introspect as introspect_module
from ultimat3.jobs_redis._codec import text as as_text
from ultimat3.jobs_redis._scripts import SCRIPT_NAMES, _shaken, script_sources

VT = 60_000
Req = Callable[..., EnqueueRequest]


async def claim_all(driver: RedisJobDriver, queue: str = "default", **kw: object) -> list:  # type: ignore[type-arg]
    return await driver.claim(
        queues=[queue], limit=1000, worker_id=str(kw.get("worker", "w")), visibility_timeout_ms=VT
    )


# --- keys and scripts ------------------------------------------------------------------------


async def test_every_key_carries_the_prefix_hash_tag_so_one_cluster_slot_holds_them(
    driver: RedisJobDriver, req: Req
) -> None:
    await driver.enqueue_many([req(queue=q, tenant_id="t") for q in ("a", "b", "c")])
    jobs = await driver.claim(queues=["a", "b"], limit=5, worker_id="w", visibility_timeout_ms=VT)
    await driver.steps.record(
        jobs[0].id, "s", state="completed", worker_id="w", claim=jobs[0].claim
    )
    await driver.ack(jobs[0].id, worker_id="w", claim=jobs[0].claim, duration_ms=3)
    await driver.nack(jobs[1].id, worker_id="w", claim=jobs[1].claim, outcome="suspend",
                      run_at_ms=2**42, wait_event="evt")  # fmt: skip
    await driver.leases.acquire("lock", limit=1, holder="h", ttl_ms=1000)
    await driver.introspect.pause_queue("c")
    await driver.register_worker("w", host="h", queues=["a"], slots=2, visibility_timeout_ms=VT)
    await driver.fire_task("nightly", 1, [])
    await driver.backfills.begin("bf", job_id=None, cursor=None)
    keys = [k.decode() async for k in driver.client.scan_iter(match="*" + driver.prefix + "*")]
    assert len(keys) > 15
    assert all(k.startswith("{" + driver.prefix + "}:") for k in keys), keys
    assert {key_slot(k.encode()) for k in keys} == {key_slot(driver.prefix.encode())}


def test_each_operation_is_one_lua_file_in_the_package() -> None:
    folder = importlib.resources.files("ultimat3.jobs_redis").joinpath("lua")
    files = {p.name for p in folder.iterdir() if p.name.endswith(".lua")}
    assert files == {f"{n}.lua" for n in SCRIPT_NAMES} | {"_lib.lua"}
    sources = script_sources()
    assert all("__COUNTER_TIERS__" not in text for text in sources.values())
    # each script carries what it uses of the prelude, and nothing else
    assert "local function now_ms()" in sources["enqueue"]
    assert "local function enqueue_one(" in sources["enqueue"]
    assert "local function enqueue_at(" in sources["enqueue"]
    assert "local function enqueue_pairs(" not in sources["enqueue"]  # enqueue_many's only
    assert "local function enqueue_pairs(" in sources["enqueue_many"]
    assert "local function enqueue_one(" not in sources["enqueue_many"]
    assert "local function move(" not in sources["enqueue"]  # only named in a comment there
    assert "local function count(" not in sources["enqueue"]
    assert "local function count(" in sources["ack"]
    assert "local function now_ms()" in sources["ack"]  # ack uses count, count uses N, ...


def test_a_script_gets_the_prelude_definitions_it_uses_in_order() -> None:
    prelude = (
        "-- head\nlocal P = KEYS[1]\n\nlocal function a()\n  return P\nend\n"
        "local T = { x = true }\nlocal function b()\n  return a() .. 'x'\nend\n"
        "local function c()\n  return T\nend\nlocal _ = { a, b, c }\n"
    )
    shaken = _shaken(prelude, "return b()")
    assert shaken.startswith("-- head\nlocal P = KEYS[1]")
    assert shaken.index("local function a") < shaken.index("local function b")
    assert "local T" not in shaken and "local function c" not in shaken
    assert "local _" not in shaken
    assert shaken.endswith("\nreturn b()")
    # a name only mentioned in a comment pulls nothing in
    assert "local function c" not in _shaken(prelude, "-- unlike c()\nreturn b()")
    commented = prelude.replace("return a()", "return a() -- c")
    assert "local function c" not in _shaken(commented, "return b()")


async def test_every_script_compiles_on_the_server(driver: RedisJobDriver) -> None:
    for name, text in script_sources().items():
        assert await driver.client.script_load(text) == driver._r._shas[name]


async def test_the_clock_is_the_servers_not_the_callers(driver: RedisJobDriver, req: Req) -> None:
    seconds, micros = await driver.client.time()
    server_ms = seconds * 1000 + micros // 1000
    with use_clock(FrozenClock(datetime(2001, 1, 1, tzinfo=UTC))):
        assert abs(await driver.now_ms() - server_ms) < 5_000
        queued = await driver.enqueue(req())
    row = await driver.introspect.show(queued.id)
    assert row.created_at.year > 2001
    assert abs(row.created_at.timestamp() * 1000 - server_ms) < 5_000


# --- enqueue ---------------------------------------------------------------------------------


async def test_a_none_tenant_and_an_empty_tenant_are_different_scopes(
    driver: RedisJobDriver, req: Req
) -> None:
    a = await driver.enqueue(req(key="k", tenant_id=None))
    b = await driver.enqueue(req(key="k", tenant_id=""))
    c = await driver.enqueue(req(key="k", tenant_id=None))
    assert not a.deduped and not b.deduped and a.id != b.id
    assert c.deduped and c.id == a.id
    assert (await driver.introspect.show(b.id)).tenant_id == ""


async def test_enqueue_many_past_one_chunk_is_all_or_nothing(
    driver: RedisJobDriver, req: Req
) -> None:
    batch = [req(key=f"k{i}") for i in range(2500)]
    batch[2400] = req(key="bad", payload={"when": float("nan")})
    with pytest.raises(XError) as caught:
        await driver.enqueue_many(batch)
    assert caught.value.code == "X_INVARIANT"
    assert batch[2400].id in caught.value.message
    assert await driver.stats() == []
    good = [req(key=f"k{i % 1200}") for i in range(2500)]
    results = await driver.enqueue_many(good)
    assert [r.deduped for r in results] == [i >= 1200 for i in range(2500)]
    assert results[1200].id == results[0].id
    assert (await driver.stats())[0].ready == 1200


async def test_enqueue_many_past_the_batch_limit_is_refused_naming_the_count(
    driver: RedisJobDriver, req: Req
) -> None:
    with pytest.raises(XError) as caught:
        await driver.enqueue_many([req() for _ in range(10_001)])
    assert caught.value.code == "X_JOB_ENQUEUE_BATCH_TOO_LARGE"
    assert "10001" in caught.value.message
    assert await driver.stats() == []


async def test_a_row_lost_under_its_live_key_frees_the_key(
    driver: RedisJobDriver, req: Req
) -> None:
    """A live-key entry whose row is gone (an eviction under maxmemory) does not block the key."""
    first = await driver.enqueue(req(key="k"))
    await driver.client.delete("{" + driver.prefix + "}:j:" + first.id)
    second = await driver.enqueue(req(key="k"))
    assert not second.deduped and second.id != first.id


async def test_a_republish_under_another_key_holds_no_live_entry(
    driver: RedisJobDriver, req: Req
) -> None:
    """The id dedupes a republish whose key differs; that key stays free for the next enqueue
    (the script takes the live key first, then gives it back)."""
    first = await driver.enqueue(req(key="a"))
    again = await driver.enqueue(dataclasses.replace(req(key="b"), id=first.id))
    assert again == EnqueueResult(id=first.id, run_id=first.run_id, deduped=True)
    assert not (await driver.enqueue(req(key="b"))).deduped


@pytest.mark.parametrize(
    "extra",
    [
        {},
        {"delay_ms": 60_000},
        {"run_at_ms": 2**42},
        {"run_at_ms": 1},  # in the past: ready now
        {"tenant_id": "t", "concurrency_key": "c"},
        {"tenant_id": ""},
    ],
    ids=["plain", "delayed", "run_at", "run_at_past", "tenant_ckey", "empty_tenant"],
)
async def test_a_single_enqueue_writes_the_row_a_batch_of_one_writes(
    driver: RedisJobDriver, req: Req, extra: dict[str, object]
) -> None:
    """enqueue.lua (one request, its own lean path) and enqueue_many.lua store the same row and
    the same index entries; the single path answers a new row as the request's own ids."""
    one, batched = req(key="a", **extra), req(key="b", **extra)
    # With a tenant, a trace context too (the single path's table); without, none (its plain
    # HSET): either way the batch path's row is the reference.
    trace = {"traceparent": "00-ab-cd-01"} if "tenant_id" in extra else None
    traced = dataclasses.replace(one, trace_context=trace)
    traced_b = dataclasses.replace(batched, trace_context=trace)
    assert await driver.enqueue(traced) == EnqueueResult(
        id=one.id, run_id=one.run_id, deduped=False
    )
    assert (await driver.enqueue_many([traced_b]))[0].deduped is False
    base = "{" + driver.prefix + "}:"
    rows: list[dict[str, object]] = []
    for r in (one, batched):
        raw = await driver.client.hgetall(base + "j:" + r.id)
        stored = {as_text(k): as_text(v) for k, v in raw.items()}
        assert (stored["id"], stored["run_id"]) == (r.id, r.run_id)
        assert stored["idempotency_key"] == r.idempotency_key
        created = int(stored["created_at"])
        assert stored["updated_at"] == stored["created_at"]
        run_at = int(stored["run_at"])
        member = f"{created:016d}:{r.id}"
        state = stored["state"]
        row: dict[str, object] = dict(stored)
        assert await driver.client.zscore(base + "ix", member) == 0
        assert await driver.client.zscore(base + "ix:" + state, member) == 0
        assert await driver.client.zscore(base + "w:default", r.id) == run_at
        for k in ("id", "run_id", "idempotency_key", "lk", "created_at", "updated_at"):
            del row[k]
        # run_at relative to created_at (a delay, or now), absolute when run_at_ms gave it
        row["run_at"] = run_at if "run_at_ms" in extra else run_at - created
        rows.append(row)
    assert rows[0] == rows[1]
    expected = "delayed" if extra.get("delay_ms") or extra.get("run_at_ms") == 2**42 else "ready"
    assert rows[0]["state"] == expected
    assert rows[0].get("tenant_id") == extra.get("tenant_id")
    stored_trace = None if trace is None else '{"traceparent":"00-ab-cd-01"}'
    assert rows[0].get("trace_context") == stored_trace
    if "delay_ms" in extra:
        assert rows[0]["run_at"] == 60_000
    elif "run_at_ms" in extra:
        assert rows[0]["run_at"] == extra["run_at_ms"]
    else:
        assert rows[0]["run_at"] == 0
    # the single path's dedupe answers the holder's ids
    again = await driver.enqueue(req(key="a", **extra))
    assert again == EnqueueResult(id=one.id, run_id=one.run_id, deduped=True)


@pytest.mark.parametrize("optional", [False, True], ids=["none", "all"])
async def test_an_enqueue_stores_the_row_fields_and_only_the_optional_ones_given(
    driver: RedisJobDriver, req: Req, optional: bool
) -> None:
    """The row's field list is written out twice in the script (a table-free HSET when no
    tenant, concurrency key or trace context is given, a table otherwise): both carry the 13
    fields every row has, plus exactly the optional ones given."""
    r = req(tenant_id="t", concurrency_key="c") if optional else req()
    if optional:
        r = dataclasses.replace(r, trace_context={"traceparent": "00-ab-cd-01"})
    await driver.enqueue(r)
    row = await driver.client.hgetall("{" + driver.prefix + "}:j:" + r.id)
    every = ["id", "run_id", "name", "queue", "attempts", "max_attempts", "run_at", "created_at",
             "idempotency_key", "payload", "lk", "state", "updated_at"]  # fmt: skip
    given = ["tenant_id", "concurrency_key", "trace_context"] if optional else []
    assert sorted(as_text(k) for k in row) == sorted(every + given)
    shown = await driver.introspect.show(r.id)
    assert (shown.tenant_id, shown.concurrency_key) == (("t", "c") if optional else (None, None))
    assert shown.attempts == 0 and shown.state == "ready" and shown.payload == {"n": 1}


async def test_every_queue_enqueued_to_is_counted_in_stats(
    driver: RedisJobDriver, req: Req
) -> None:
    """A queue's first row (and the first of a state) notes the queue; later rows of it need not."""
    await driver.enqueue_many([req(queue="a"), req(queue="a"), req(queue="b", delay_ms=60_000)])
    await driver.enqueue(req(queue="b"))
    assert [(s.queue, s.ready, s.delayed) for s in await driver.stats()] == [
        ("a", 2, 0),
        ("b", 1, 1),
    ]


# --- refusals --------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("field", "value", "needle"),
    [
        ("name", "", "name is empty"),
        ("queue", "", "queue is empty"),
        ("idempotency_key", "", "idempotency_key is empty"),
        ("max_attempts", 0, "max_attempts 0"),
        ("delay_ms", 1.5, "delay_ms 1.5"),
        ("payload", {"b": b"raw"}, "payload of job"),
    ],
)
async def test_an_enqueue_refusal_names_the_job_and_the_field(
    driver: RedisJobDriver, req: Req, field: str, value: object, needle: str
) -> None:
    # cast: some values are deliberately of the wrong type; the driver's refusal is the test
    bad = dataclasses.replace(req(), **{field: cast(Any, value)})
    with pytest.raises(XError) as caught:
        await driver.enqueue(bad)
    assert caught.value.code == "X_INVARIANT"
    assert needle in caught.value.message and bad.id in caught.value.message
    assert await driver.stats() == []


async def test_claim_refusals_name_the_bad_argument(driver: RedisJobDriver) -> None:
    for kwargs, needle in (
        ({"visibility_timeout_ms": 0}, "visibility_timeout_ms 0"),
        ({"limit": -1}, "limit -1"),
        ({"worker_id": ""}, "worker_id is empty"),
    ):
        args: dict[str, object] = {
            "queues": ["q"], "limit": 1, "worker_id": "w", "visibility_timeout_ms": VT,
        }  # fmt: skip
        args.update(kwargs)
        with pytest.raises(XError) as caught:
            await driver.claim(**args)  # type: ignore[arg-type]
        assert caught.value.code == "X_INVARIANT"
        assert needle in caught.value.message


async def test_a_nack_with_no_such_outcome_is_refused(driver: RedisJobDriver) -> None:
    with pytest.raises(XError) as caught:
        await driver.nack("j1", worker_id="w", claim="c", outcome="later")  # type: ignore[arg-type]
    assert caught.value.code == "X_INVARIANT" and "'later'" in caught.value.message


async def test_an_unstorable_result_refuses_only_a_claim_that_holds_the_row(
    driver: RedisJobDriver, req: Req
) -> None:
    await driver.enqueue(req())
    (job,) = await claim_all(driver)
    assert not await driver.ack(job.id, worker_id="w", claim="stale", result=object())
    assert not await driver.steps.record(
        job.id, "s", state="completed", worker_id="w", claim="stale", output=object()
    )
    assert not await driver.progress(job.id, worker_id="w", claim="stale", progress={"x": object()})
    with pytest.raises(XError) as caught:
        await driver.ack(job.id, worker_id="w", claim=job.claim, result=object())
    assert caught.value.code == "X_STEP_OUTPUT_UNSERIALIZABLE" and job.id in caught.value.message
    with pytest.raises(XError) as caught:
        await driver.steps.record(
            job.id, "s", state="completed", worker_id="w", claim=job.claim, output=object()
        )
    assert caught.value.code == "X_STEP_OUTPUT_UNSERIALIZABLE" and "'s'" in caught.value.message
    assert (await driver.introspect.show(job.id)).state == "running"


@pytest.mark.parametrize(
    ("kwargs", "needle"),
    [
        ({"prefix": ""}, "prefix ''"),
        ({"prefix": "a{b}"}, "prefix 'a{b}'"),
        ({"connect_timeout": 0}, "connect_timeout 0"),
        ({"command_timeout": -1.0}, "command_timeout -1.0"),
    ],
)
def test_a_driver_with_bad_settings_is_refused_naming_the_setting(
    kwargs: dict[str, object], needle: str
) -> None:
    with pytest.raises(XError) as caught:
        redis_job_driver("redis://127.0.0.1:6379/0", **kwargs)  # type: ignore[arg-type]
    assert caught.value.code == "X_CONFIG_INVALID"
    assert needle in caught.value.message


def test_something_that_is_neither_a_url_nor_a_client_is_refused() -> None:
    with pytest.raises(XError) as caught:
        redis_job_driver(6379)  # type: ignore[arg-type]
    assert caught.value.code == "X_CONFIG_INVALID" and "6379" in caught.value.message
    with pytest.raises(XError) as caught:
        redis_job_driver("http://user:secret@127.0.0.1:6379")
    assert caught.value.code == "X_CONFIG_INVALID"
    assert "http://" in caught.value.message and "secret" not in caught.value.message


# --- operator surface beyond the suite --------------------------------------------------------


async def test_a_rare_filter_pages_right_across_many_bounded_scans(
    driver: RedisJobDriver, req: Req, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(introspect_module, "LIST_SCAN_BUDGET", 7)
    results = await driver.enqueue_many(
        [req(name="rare" if i % 10 == 3 else "common") for i in range(120)]
    )
    rare = [r.id for i, r in enumerate(results) if i % 10 == 3]
    seen: list[str] = []
    after = None
    while page := await driver.introspect.list(name="rare", limit=5, after=after):
        seen.extend(row.id for row in page)
        after = job_cursor(page[-1])
    assert sorted(seen) == sorted(rare) and len(seen) == len(set(seen)) == 12
    back = await driver.introspect.list(name="rare", limit=5, before=job_cursor(
        await driver.introspect.show(seen[-1])))  # fmt: skip
    assert [r.id for r in back] == seen[-6:-1]


async def test_purge_deletes_finished_rows_past_retention_in_bounded_runs(
    driver: RedisJobDriver, req: Req
) -> None:
    await driver.enqueue_many([req() for _ in range(1205)])
    jobs = await claim_all(driver) + await claim_all(driver)
    assert len(jobs) == 1205
    for job in jobs[:1100]:
        await driver.steps.record(job.id, "s", state="completed", worker_id="w", claim=job.claim)
        assert await driver.ack(job.id, worker_id="w", claim=job.claim)
    for job in jobs[1100:1150]:
        assert await driver.nack(job.id, worker_id="w", claim=job.claim, outcome="dead")
    assert await driver.purge() == 0
    await asyncio.sleep(0.02)
    assert await driver.purge(done_older_than_ms=1, dead_older_than_ms=10**9) == 1100
    assert await driver.purge(done_older_than_ms=1, dead_older_than_ms=0) == 50
    counts = (await driver.stats())[0]
    assert (counts.done, counts.dead, counts.running) == (0, 0, 55)
    with pytest.raises(XError) as caught:
        await driver.introspect.show(jobs[0].id)
    assert caught.value.code == "X_JOB_NOT_FOUND"
    steps_key = "{" + driver.prefix + "}:s:" + jobs[0].id
    assert not await driver.client.exists(steps_key)
    with pytest.raises(XError) as caught:
        await driver.purge(done_older_than_ms=-1)
    assert caught.value.code == "X_INVARIANT" and "done_older_than_ms -1" in caught.value.message


async def test_purge_drops_expired_workers(driver: RedisJobDriver) -> None:
    await driver.register_worker("gone", host="h", queues=["q"], slots=None,
                                 visibility_timeout_ms=50)  # fmt: skip
    await driver.register_worker("here", host="h", queues=["q"], slots=1,
                                 visibility_timeout_ms=VT)  # fmt: skip
    await asyncio.sleep(0.1)
    assert [w.id for w in await driver.introspect.workers()] == ["here"]
    assert await driver.worker_heartbeat("gone", in_flight=[])  # expired, not yet purged
    await asyncio.sleep(0.1)
    await driver.purge()
    assert not await driver.worker_heartbeat("gone", in_flight=[])
    assert await driver.worker_heartbeat("here", in_flight=["j1"])
    (here,) = await driver.introspect.workers()
    assert here.in_flight == ("j1",) and here.slots == 1


async def test_counter_buckets_expire_by_themselves(driver: RedisJobDriver, req: Req) -> None:
    await driver.enqueue(req())
    (job,) = await claim_all(driver)
    await driver.ack(job.id, worker_id="w", claim=job.claim, duration_ms=5)
    keys = {k async for k in driver.client.scan_iter(match="{" + driver.prefix + "}:c:*")}
    assert len(keys) == 3  # a set: SCAN may answer a key more than once
    ttls = sorted([await driver.client.pttl(k) for k in keys])
    assert 0 < ttls[0] <= 86_400_000 + 120_000 + 60_000
    assert ttls[-1] > 29 * 86_400_000


async def test_claims_racing_from_many_clients_never_share_a_job(
    driver: RedisJobDriver, req: Req
) -> None:
    url = os.environ.get("REDIS_URL", "redis://127.0.0.1:6379/0")
    await driver.enqueue_many([req() for _ in range(600)])
    others = [redis_job_driver(url, prefix=driver.prefix) for _ in range(6)]

    async def drain(d: RedisJobDriver, worker: str) -> list[str]:
        got: list[str] = []
        while jobs := await d.claim(
            queues=["default"], limit=7, worker_id=worker, visibility_timeout_ms=VT
        ):
            for job in jobs:
                assert await d.ack(job.id, worker_id=worker, claim=job.claim)
            got.extend(job.id for job in jobs)
        return got

    try:
        started = time.monotonic()
        batches = await asyncio.gather(*(drain(d, f"w{i}") for i, d in enumerate(others)))
        assert time.monotonic() - started < 30
    finally:
        for d in others:
            await d.close()
    every = [job_id for batch in batches for job_id in batch]
    assert len(every) == len(set(every)) == 600
    assert sum(1 for b in batches if b) > 1
    assert (await driver.stats())[0].done == 600


async def test_close_closes_only_a_client_the_driver_made(req: Req) -> None:
    url = os.environ.get("REDIS_URL", "redis://127.0.0.1:6379/0")
    client = Redis.from_url(url)
    try:
        lent = redis_job_driver(client, prefix="t-" + new_id())
        assert await lent.now_ms() > 0
        await lent.close()
        assert await client.ping()
    finally:
        await client.aclose()


async def test_a_claim_steps_over_rows_gone_from_under_their_indexes(
    driver: RedisJobDriver, req: Req
) -> None:
    """A row deleted behind the driver's back (an eviction, a stray DEL) is dropped from the
    queue's sets by the next claim instead of failing it."""
    lapsing = await driver.enqueue(req())
    (held,) = await driver.claim(
        queues=["default"], limit=1, worker_id="w", visibility_timeout_ms=50
    )
    assert held.id == lapsing.id
    gone, kept = await driver.enqueue_many([req(), req()])
    base = "{" + driver.prefix + "}:"
    await driver.client.delete(base + "j:" + held.id, base + "j:" + gone.id)
    await asyncio.sleep(0.1)
    assert [j.id for j in await claim_all(driver)] == [kept.id]
    assert await claim_all(driver) == []
    assert await driver.client.zcard(base + "w:default") == 0
    assert await driver.client.zrange(base + "r:default", 0, -1) == [kept.id.encode()]
