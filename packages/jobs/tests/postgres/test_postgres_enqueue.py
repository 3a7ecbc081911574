"""Enqueue on Postgres: one statement per enqueue, one per 1,000 distinct inputs of an
enqueue_many, every refusal before the first write, and the notify that rides the statement."""

from __future__ import annotations

import asyncio
import time
from collections import Counter
from dataclasses import replace
from typing import Any, cast

import psycopg
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ultimat3.core import XError, capture_log_events, new_id
from ultimat3.jobs.adapter import ENQUEUE_CHUNK, MAX_ENQUEUE_BATCH, EnqueueRequest
from ultimat3.jobs.postgres import PostgresJobDriver, _enqueue, postgres_job_driver, wake_channel


def req(i: int = 0, *, queue: str = "q", key: str | None = None, **kw: Any) -> EnqueueRequest:
    return EnqueueRequest(
        id=new_id(),
        run_id=new_id(),
        name="enq.job",
        queue=queue,
        payload={"i": i},
        idempotency_key=key if key is not None else f"k{i}",
        max_attempts=3,
        **kw,
    )


async def test_a_single_enqueue_is_one_statement(
    pg_driver: PostgresJobDriver, statements: Counter[str]
) -> None:
    first = await pg_driver.enqueue(req(1))
    assert statements == Counter({"enqueue_blind": 1}), "a new key: one plain INSERT"
    statements.clear()
    again = await pg_driver.enqueue(req(1))
    assert statements == Counter({"enqueue_blind": 1, "enqueue": 1, "enqueue_holder": 1}), (
        "the blind INSERT met the key: ON CONFLICT, then the winner read back"
    )
    assert (again.id, again.run_id, again.deduped) == (first.id, first.run_id, True)
    statements.clear()
    republished = await pg_driver.enqueue(replace(req(2), id=first.id))
    assert (republished.id, republished.deduped) == (first.id, True), "the same id is the job"
    assert statements == Counter({"enqueue": 1, "enqueue_holder": 1}), "the job is held: no blind"
    statements.clear()
    await pg_driver.enqueue(replace(req(3), name="enq.other"))
    assert statements == Counter({"enqueue_blind": 1}), "the hold is per job"
    [stats] = await pg_driver.stats()
    assert stats.ready == 2


async def test_a_single_enqueue_whose_holder_finished_meanwhile_asks_again(
    pg_driver: PostgresJobDriver, statements: Counter[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """The INSERT met the live holder, which finished before the read-back: the enqueue is sent
    again and queues a new job, as it would have a moment later."""
    first = await pg_driver.enqueue(req(1))
    db = pg_driver._enqueuer._db
    fetchone = db.fetchone
    finished = False

    async def finish_first(name: str, params: Any, **kw: Any) -> Any:
        nonlocal finished
        if name == "enqueue_holder" and not finished:
            finished = True
            await pg_driver.introspect.cancel(first.id)  # the holder leaves the live states
        return await fetchone(name, params, **kw)

    monkeypatch.setattr(db, "fetchone", finish_first)
    statements.clear()
    again = await pg_driver.enqueue(req(1))
    assert not again.deduped and again.id != first.id
    assert statements == Counter(
        {"enqueue_blind": 1, "enqueue": 2, "enqueue_holder": 1, "cancel": 1}
    )


async def test_enqueue_many_sends_one_statement_per_1000_distinct_inputs(
    pg_driver: PostgresJobDriver, statements: Counter[str]
) -> None:
    assert ENQUEUE_CHUNK == 1000
    res = await pg_driver.enqueue_many([req(i) for i in range(2500)])
    assert statements == Counter({"enqueue_many_blind": 3}) and len(res) == 2500
    statements.clear()
    dupes = [req(i, key=f"d{i % 900}") for i in range(2000)]
    res = await pg_driver.enqueue_many(dupes)
    assert statements == Counter({"enqueue_many_blind": 1}), "in-batch duplicates cost nothing"
    assert [r.id for r in res[900:]] == [r.id for r in res[:900]] + [r.id for r in res[:200]]
    assert all(r.deduped for r in res[900:]) and not any(r.deduped for r in res[:900])


async def test_a_batch_meeting_a_taken_id_falls_back_to_the_conflict_tolerant_insert(
    pg_driver: PostgresJobDriver, statements: Counter[str]
) -> None:
    first = await pg_driver.enqueue_many([req(1), req(2)])
    statements.clear()
    again = [replace(req(3), id=first[0].id), req(4)]
    res = await pg_driver.enqueue_many(again)
    assert [(r.id, r.deduped) for r in res] == [(first[0].id, True), (again[1].id, False)]
    assert statements == Counter({"enqueue_many_blind": 1, "enqueue_many": 1})
    [stats] = await pg_driver.stats()
    assert stats.ready == 3


async def test_a_job_whose_batch_met_a_live_key_probes_its_next_batches(
    pg_driver: PostgresJobDriver, statements: Counter[str]
) -> None:
    """The blind INSERT fails whole on a live key; that job's batches then probe the live keys
    first (no failed statement while they keep meeting them: each such batch renews the hold),
    and go blind again once the hold passed."""
    probing = pg_driver._enqueuer._probing
    held = await pg_driver.enqueue_many([req(i) for i in range(3)])
    statements.clear()
    with capture_log_events() as events:
        res = await pg_driver.enqueue_many([req(i) for i in range(5)])  # k0..k2 are live
    assert statements == Counter({"enqueue_many_blind": 1, "enqueue_many": 1})
    probing_events = [e for e in events if e["event"] == "jobs.enqueue.probing"]
    assert [(e["job"], e["hold_s"]) for e in probing_events] == [("enq.job", 60.0)]
    assert [r.deduped for r in res] == [True, True, True, False, False]
    assert [r.id for r in res[:3]] == [r.id for r in held]
    [stats] = await pg_driver.stats()
    assert stats.ready == 5, "the failed blind statement wrote nothing"
    assert probing["enq.job"][1] == _enqueue.PROBE_HOLD_S
    probing["enq.job"] = (time.monotonic() + 1.0, 60.0)  # as if most of the hold had passed
    statements.clear()
    again = await pg_driver.enqueue_many([req(i) for i in range(4, 7)])  # k4 is live
    assert statements == Counter({"enqueue_many_fresh": 1})
    assert [r.deduped for r in again] == [True, False, False]
    assert probing["enq.job"][0] > time.monotonic() + 59, "a probed batch meeting one renews"
    statements.clear()
    await pg_driver.enqueue_many([req(i) for i in range(7, 9)])
    assert statements == Counter({"enqueue_many_fresh": 1}), "still held"
    probing["enq.job"] = (time.monotonic() - 0.001, 60.0)  # the hold passed
    statements.clear()
    await pg_driver.enqueue_many([req(i) for i in range(9, 11)])
    assert statements == Counter({"enqueue_many_blind": 1})
    probing["enq.job"] = (time.monotonic() + 60, 60.0)
    other = EnqueueRequest(new_id(), new_id(), "enq.other", "q", {}, "k0", 3)
    statements.clear()
    await pg_driver.enqueue_many([other])
    assert statements == Counter({"enqueue_many_blind": 1}), "the hold is per job"


def test_the_probe_hold_doubles_on_each_failed_blind_batch_up_to_an_hour() -> None:
    enqueuer = _enqueue.Enqueuer(cast(Any, None))
    holds = []
    for _ in range(8):
        enqueuer.met_live({"j"}, again=True)
        holds.append(enqueuer._probing["j"][1])
    assert holds == [60.0, 120.0, 240.0, 480.0, 960.0, 1920.0, 3600.0, 3600.0]
    enqueuer.met_live({"j"}, again=False)
    until, hold = enqueuer._probing["j"]
    assert hold == 3600.0 and until > time.monotonic() + 3500, "a probed hit renews, not doubles"
    assert not enqueuer.blind({"j", "k"}) and enqueuer.blind({"k"})


async def test_enqueue_many_dedupes_an_id_repeated_in_the_batch(
    pg_driver: PostgresJobDriver,
) -> None:
    first = req(1)
    again = replace(req(2), id=first.id)
    res = await pg_driver.enqueue_many([first, again])
    assert [(r.id, r.run_id, r.deduped) for r in res] == [
        (first.id, first.run_id, False),
        (first.id, first.run_id, True),
    ]
    [stats] = await pg_driver.stats()
    assert stats.ready == 1


async def test_every_refusal_comes_before_the_first_write(pg_driver: PostgresJobDriver) -> None:
    good = [req(i) for i in range(1500)]
    cases: list[tuple[EnqueueRequest, str, str]] = [
        (replace(req(9), id="not-a-uuid"), "X_ID_INVALID", "not-a-uuid"),
        (replace(req(9), run_id=new_id().upper()), "X_ID_INVALID", "run_id"),
        (replace(req(9), idempotency_key=""), "X_INVARIANT", "idempotency_key"),
        (replace(req(9), queue="nul\x00queue"), "X_INVARIANT", "NUL"),
        (replace(req(9), max_attempts=0), "X_INVARIANT", "max_attempts"),
        (replace(req(9), payload={"b": b"bytes"}), "X_INVARIANT", "payload"),
        (replace(req(9), payload={"s": "nul\x00"}), "X_INVARIANT", "NUL"),
        (replace(req(9), delay_ms=1.5), "X_INVARIANT", "delay_ms"),  # type: ignore[arg-type]
    ]
    for bad, code, needle in cases:
        with pytest.raises(XError) as caught:
            await pg_driver.enqueue_many([*good, bad])
        assert caught.value.code == code, caught.value
        assert needle in caught.value.message
        with pytest.raises(XError):
            await pg_driver.enqueue(bad)
    assert await pg_driver.stats() == []


async def test_more_than_max_enqueue_batch_is_refused(pg_driver: PostgresJobDriver) -> None:
    with pytest.raises(XError) as caught:
        await pg_driver.enqueue_many([req(i) for i in range(MAX_ENQUEUE_BATCH + 1)])
    assert caught.value.code == "X_JOB_ENQUEUE_BATCH_TOO_LARGE"
    assert str(MAX_ENQUEUE_BATCH + 1) in caught.value.message


async def test_concurrent_enqueues_of_one_key_make_one_job(pg_driver: PostgresJobDriver) -> None:
    attempts = [req(1, key="same") for _ in range(20)]
    results = await asyncio.gather(*(pg_driver.enqueue(r) for r in attempts))
    assert len({r.id for r in results}) == 1
    assert sum(not r.deduped for r in results) == 1
    batches = await asyncio.gather(
        *(pg_driver.enqueue_many([req(2, key="batch"), req(3, key=f"b{i}")]) for i in range(10))
    )
    assert len({b[0].id for b in batches}) == 1
    [stats] = await pg_driver.stats()
    assert stats.ready == 1 + 1 + 10


async def test_an_enqueue_notifies_its_queue_on_commit_only(
    pg_driver: PostgresJobDriver, database_url: str, pg_schema: str
) -> None:
    channel = wake_channel(pg_schema)
    async with await psycopg.AsyncConnection.connect(database_url, autocommit=True) as listener:
        await listener.execute(psycopg.sql.SQL("LISTEN {}").format(psycopg.sql.Identifier(channel)))
        async with await psycopg.AsyncConnection.connect(database_url) as conn:
            await pg_driver.enqueue(req(1, queue="rolled"), connection=conn)
            await conn.rollback()
            await pg_driver.enqueue(req(2, queue="kept"), connection=conn)
            await conn.commit()
        # a delayed row notifies too: the woken worker's claim reads when it falls due
        await pg_driver.enqueue(req(3, queue="later", delay_ms=60_000))
        await pg_driver.enqueue(req(4, queue="direct"))
        # inside the queue's window it goes silent, and one trailing notification follows its
        # commit (past the window, it notifies itself): "direct" twice either way
        await pg_driver.enqueue(req(5, queue="direct"))
        got: list[str] = []
        async for note in listener.notifies(timeout=0.5):
            assert note.channel == channel
            got.append(note.payload)
    assert got == ["kept", "later", "direct", "direct"]


async def test_the_driver_reads_the_database_clock(pg_driver: PostgresJobDriver) -> None:
    async with await psycopg.AsyncConnection.connect(pg_driver_dsn(pg_driver)) as conn:
        cur = await conn.execute("SELECT floor(extract(epoch FROM clock_timestamp()) * 1000)")
        row = await cur.fetchone()
    assert row is not None
    assert abs(await pg_driver.now_ms() - int(row[0])) < 2_000


def pg_driver_dsn(driver: PostgresJobDriver) -> str:
    dsn = driver._db._dsn  # the fixture built it from a DSN
    assert dsn is not None
    return dsn


async def test_batches_racing_on_overlapping_keys_never_deadlock(
    pg_driver: PostgresJobDriver, database_url: str, pg_schema: str
) -> None:
    other = postgres_job_driver(database_url, schema=pg_schema)
    try:
        for round_ in range(5):
            keys = [f"r{round_}-{i}" for i in range(300)]
            forward = [req(i, key=k) for i, k in enumerate(keys)]
            backward = [req(i, key=k) for i, k in enumerate(reversed(keys))]
            a, b = await asyncio.gather(
                pg_driver.enqueue_many(forward), other.enqueue_many(backward)
            )
            by_key = {r.idempotency_key: res.id for r, res in zip(forward, a, strict=True)}
            for r, res in zip(backward, b, strict=True):
                assert by_key[r.idempotency_key] == res.id
            assert sum(not x.deduped for x in a + b) == 300
    finally:
        await other.close()
    [stats] = await pg_driver.stats()
    assert stats.ready == 1500


# --- the batch checks answer what the one-by-one checks answer ----------------------------------

_TEXTS = st.sampled_from(["q", "", "a\x00b", "x" * 2100, "ok"])
_MAYBE = st.one_of(st.none(), _TEXTS, st.just(7))
_UUIDS = st.one_of(st.builds(new_id), st.sampled_from(["NOT-A-UUID", new_id().upper(), 5]))
_PAYLOADS = st.recursive(
    st.one_of(
        st.none(), st.booleans(), st.integers(), st.text(max_size=3), st.floats(), st.just((1,))
    ),
    lambda inner: st.one_of(
        st.lists(inner, max_size=3),
        st.dictionaries(st.one_of(st.text(max_size=2), st.integers()), inner, max_size=3),
    ),
    max_leaves=6,
)
_REQUESTS = st.builds(
    EnqueueRequest,
    id=_UUIDS,
    run_id=_UUIDS,
    name=_TEXTS,
    queue=_TEXTS,
    payload=_PAYLOADS,
    idempotency_key=_TEXTS,
    max_attempts=st.sampled_from([1, 3, 0, True, 2.0]),
    tenant_id=_MAYBE,
    concurrency_key=_MAYBE,
    delay_ms=st.sampled_from([None, 5, 5.0]),
    run_at_ms=st.sampled_from([None, 1_700_000_000_000, "soon"]),
)


@given(st.lists(_REQUESTS, max_size=6))
@settings(max_examples=300, deadline=None)
def test_the_batch_checks_pass_exactly_the_batches_whose_every_request_passes(
    requests: list[EnqueueRequest],
) -> None:
    from ultimat3.jobs.postgres._enqueue import _all_plainly_valid, _flat_plain, _plainly_valid
    from ultimat3.jobs.postgres._rows import is_plain_json

    assert _all_plainly_valid(requests) == all(_plainly_valid(r) for r in requests)
    payloads = [r.payload for r in requests]
    if _flat_plain(payloads):  # the batch's shortcut never passes what the walk would not
        assert all(is_plain_json(p) for p in payloads)


# --- the typed arrays an enqueue_many chunk travels as ------------------------------------------

_ARRAY_TEXT = st.text(st.characters(codec="utf-8", exclude_characters="\x00"), max_size=8)


@given(
    st.lists(st.one_of(st.none(), _ARRAY_TEXT, st.sampled_from(['"', "\\", "NULL", "{,}", " "]))),
    st.lists(st.one_of(st.none(), st.integers(-(2**63), 2**63 - 1)), max_size=8),
)
@settings(max_examples=150, deadline=None)
def test_the_array_literals_read_back_as_the_values_written(
    database_url: str, texts: list[str | None], ints: list[int | None]
) -> None:
    from ultimat3.jobs.postgres._enqueue import array_ints, array_text

    with psycopg.connect(database_url, autocommit=True) as conn:
        for literal, values, kind in (
            (array_text(texts), texts, "text[]"),
            (array_ints(ints), ints, "bigint[]"),
        ):
            if all(v is None for v in values):
                assert literal is None  # a NULL array: ROWS FROM pads the column with NULLs
                continue
            row = conn.execute(f"SELECT %s::{kind}", [literal]).fetchone()
            assert row is not None and row[0] == values


def test_a_text_holding_a_nul_stays_one_element() -> None:
    from ultimat3.jobs.postgres._enqueue import array_text

    assert array_text(["a\x00b", 'c"']) == '{"a\x00b","c\\""}'


async def test_enqueue_many_stores_every_column_as_given(
    pg_driver: PostgresJobDriver, database_url: str, pg_schema: str
) -> None:
    odd = ['quote"d', "back\\slash", "{brace,comma}", "NULL", " spaced ", "é✓", "plain"]
    batch = [
        replace(
            req(i, key=f"{text}:{i}", queue=f"q{text}"),
            name=f"n{text}",
            payload={"t": text, "i": [i, None]},
            tenant_id=None if i % 2 else text,
            concurrency_key=text if i % 3 else None,
            run_at_ms=None if i % 2 else 4_102_444_800_000,
            delay_ms=None if i % 3 else 60_000,
            trace_context=None if i % 2 else {"traceparent": f"00-{text}"},
        )
        for i, text in enumerate(odd)
    ]
    res = await pg_driver.enqueue_many(batch)
    assert [(r.id, r.run_id, r.deduped) for r in res] == [(b.id, b.run_id, False) for b in batch]
    query = psycopg.sql.SQL(
        "SELECT id::text, run_id::text, name, queue, idempotency_key, tenant_id, concurrency_key,"
        " max_attempts, payload, trace_context, run_at > now() + interval '30 seconds' FROM {}"
    ).format(psycopg.sql.Identifier(pg_schema, "x_jobs"))
    async with await psycopg.AsyncConnection.connect(database_url) as conn:
        stored = {r[0]: r[1:] for r in await (await conn.execute(query)).fetchall()}
    assert stored == {
        b.id: (
            b.run_id,
            b.name,
            b.queue,
            b.idempotency_key,
            b.tenant_id,
            b.concurrency_key,
            b.max_attempts,
            b.payload,
            b.trace_context,
            b.run_at_ms is not None or b.delay_ms is not None,
        )
        for b in batch
    }
