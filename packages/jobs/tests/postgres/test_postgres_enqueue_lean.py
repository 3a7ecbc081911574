"""The lean enqueue path on Postgres (#16): the single enqueue's blind INSERT written straight from
the request, ``enqueue_many``'s chunks two at a time, the batch-wide guard checks, and the pool's
hot slot — each stores exactly what the one-by-one semantics promise: ids unique and in input
order, one job per live key (the first input's payload, the later ones deduped onto it), the
tenant and the due time as given."""

from __future__ import annotations

import asyncio
import itertools
from collections.abc import Iterator
from datetime import UTC, datetime
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from pydantic import BaseModel

from ultimat3.core import XError, swap_adapter
from ultimat3.jobs import job
from ultimat3.jobs._declare.input_guard import (
    MAX_INPUT_BYTES,
    checked_key,
    checked_payload,
    flat_forms_pass,
    keys_pass,
)
from ultimat3.jobs.adapter import JOB_DRIVER
from ultimat3.jobs.postgres import PostgresJobDriver
from ultimat3.jobs.postgres._db import DriverPool
from ultimat3.jobs.postgres._enqueue import PARALLEL_CHUNKS, Enqueuer

_names = itertools.count()


class Item(BaseModel):
    k: int
    v: int
    org: str | None = None


async def _noop(input: Item, step: Any, ctx: Any) -> None:
    return None


def _job(tenant: bool) -> Any:
    """A job of a name of its own (examples share one schema)."""
    return job(
        input=Item,
        name=f"lean.item{next(_names)}",
        idempotency_key=lambda i: f"key:{i.k}",
        tenant=(lambda i: i.org) if tenant else "none",
        run=_noop,
    )


@pytest.fixture
def installed(pg_driver: PostgresJobDriver) -> Iterator[PostgresJobDriver]:
    with swap_adapter(JOB_DRIVER, pg_driver):
        yield pg_driver


def _expected(inputs: list[dict[str, Any]]) -> dict[tuple[str | None, int], int]:
    """The index of the first input of each live key (tenant, key): the one that is stored."""
    first: dict[tuple[str | None, int], int] = {}
    for i, one in enumerate(inputs):
        first.setdefault((one.get("org"), one["k"]), i)
    return first


async def _check_stored(
    driver: PostgresJobDriver, inputs: list[dict[str, Any]], results: list[Any], due_ms: int | None
) -> None:
    first = _expected(inputs)
    assert len(results) == len(inputs)
    for i, (one, result) in enumerate(zip(inputs, results, strict=True)):
        winner = first[(one.get("org"), one["k"])]
        assert result.deduped == (winner != i)
        assert (result.id, result.run_id) == (results[winner].id, results[winner].run_id)
    stored = [results[i] for i in sorted(first.values())]
    ids = [r.id for r in stored]
    assert len(set(ids)) == len(ids) == len({r.run_id for r in stored})
    assert ids == sorted(ids)  # uuid7s in input order
    for index in sorted(first.values())[:40]:  # a sample of rows, read back
        row = await driver.introspect.show(results[index].id)
        assert row is not None
        one = inputs[index]
        assert row.payload == {"k": one["k"], "v": one["v"], "org": one.get("org")}
        assert row.tenant_id == one.get("org")
        assert row.run_id == results[index].run_id
        if due_ms is not None:
            assert row.run_at == datetime.fromtimestamp(due_ms / 1000, UTC)
            assert row.state == "delayed"


_INPUT = st.fixed_dictionaries(
    {"k": st.integers(0, 40), "v": st.integers(-(2**40), 2**40)},
    optional={"org": st.sampled_from(["org-a", "org-b"])},
)


@given(
    inputs=st.lists(_INPUT, min_size=1, max_size=30),
    tenant=st.booleans(),
    later=st.booleans(),
)
@settings(
    max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
async def test_single_enqueues_store_what_the_semantics_promise(
    installed: PostgresJobDriver, inputs: list[dict[str, Any]], tenant: bool, later: bool
) -> None:
    declared = _job(tenant)
    if not tenant:
        inputs = [{k: v for k, v in one.items() if k != "org"} for one in inputs]
    due_ms = 4_102_444_800_000 if later else None  # 2100-01-01
    results = [await declared.enqueue(one, run_at=due_ms) for one in inputs]
    await _check_stored(installed, inputs, results, due_ms)


@given(
    inputs=st.lists(_INPUT, min_size=1, max_size=60),
    tenant=st.booleans(),
    later=st.booleans(),
    repeat=st.integers(1, 3),
)
@settings(
    max_examples=20, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
async def test_batches_store_what_the_semantics_promise(
    installed: PostgresJobDriver,
    inputs: list[dict[str, Any]],
    tenant: bool,
    later: bool,
    repeat: int,
) -> None:
    """Keys repeat within a batch and across batches (``repeat`` batches of the same inputs):
    every later input of a live key is deduped onto the first, whichever path took it."""
    declared = _job(tenant)
    if not tenant:
        inputs = [{k: v for k, v in one.items() if k != "org"} for one in inputs]
    due_ms = 4_102_444_800_000 if later else None
    results: list[Any] = []
    for _ in range(repeat):
        results += await declared.enqueue_many(inputs, run_at=due_ms)
    await _check_stored(installed, inputs * repeat, results, due_ms)


async def test_chunks_of_distinct_keys_go_two_at_a_time_and_answer_in_input_order(
    installed: PostgresJobDriver, monkeypatch: pytest.MonkeyPatch
) -> None:
    declared = _job(False)
    in_flight = 0
    most = 0
    chunk = Enqueuer._enqueue_chunk

    async def counting(self: Enqueuer, *args: Any) -> Any:
        nonlocal in_flight, most
        in_flight += 1
        most = max(most, in_flight)
        try:
            return await chunk(self, *args)
        finally:
            in_flight -= 1

    monkeypatch.setattr(Enqueuer, "_enqueue_chunk", counting)
    inputs = [{"k": n, "v": n} for n in range(5500)]
    results = await declared.enqueue_many(inputs)
    assert most == PARALLEL_CHUNKS
    assert [r.deduped for r in results] == [False] * 5500
    ids = [r.id for r in results]
    assert ids == sorted(ids) and len(set(ids)) == 5500
    for n in (0, 999, 1000, 2999, 5499):
        row = await installed.introspect.show(results[n].id)
        assert row is not None and row.payload == {"k": n, "v": n, "org": None}


async def test_a_failing_chunk_stops_the_chunks_not_yet_sent(
    installed: PostgresJobDriver, monkeypatch: pytest.MonkeyPatch
) -> None:
    declared = _job(False)
    sent = 0
    chunk = Enqueuer._enqueue_chunk

    async def second_fails(self: Enqueuer, *args: Any) -> Any:
        nonlocal sent
        sent += 1
        if sent == 2:
            raise XError("X_DRIVER_UNAVAILABLE", "the second chunk failed", fix="retry")
        await asyncio.sleep(0.05)
        return await chunk(self, *args)

    monkeypatch.setattr(Enqueuer, "_enqueue_chunk", second_fails)
    with pytest.raises(XError, match="the second chunk failed"):
        await declared.enqueue_many([{"k": n, "v": n} for n in range(6000)])
    assert sent == 2  # the four chunks after it were never sent


async def test_inside_a_transaction_chunks_go_one_after_another(
    installed: PostgresJobDriver,
) -> None:
    enqueuer = installed._enqueuer
    assert enqueuer.lanes(6, None) == PARALLEL_CHUNKS
    assert enqueuer.lanes(6, object()) == 1  # type: ignore[arg-type]
    assert enqueuer.lanes(1, None) == 1


async def test_the_hot_slot_gives_every_connection_back_by_the_end_of_the_step(
    installed: PostgresJobDriver,
) -> None:
    declared = _job(False)
    for n in range(20):
        await declared.enqueue({"k": n, "v": n})
    pool = installed._db._pool
    assert isinstance(pool, DriverPool)
    await asyncio.sleep(0.05)  # the step's end, then the return's own task
    stats = pool.get_stats()
    assert stats["pool_size"] == stats["pool_available"]  # none held outside the pool


async def test_a_waiting_caller_gets_the_connection_not_the_hot_slot(
    installed: PostgresJobDriver,
) -> None:
    pool = await installed._db.open()
    assert isinstance(pool, DriverPool)
    held = [await pool.getconn() for _ in range(pool.max_size)]
    waiter = asyncio.ensure_future(pool.getconn(timeout=5))
    await asyncio.sleep(0.05)
    assert not waiter.done()
    await pool.putconn(held.pop())  # someone waits: it goes to them, never into the slot
    got = await asyncio.wait_for(waiter, 2)
    assert not pool._hot
    for conn in [*held, got]:
        await pool.putconn(conn)


_TEXT = st.text(
    st.characters(codec="utf-8", exclude_categories=["Cs"]), max_size=6
) | st.sampled_from(["\x00", "a\x00", "\ud800", "é", ""])
_LEAF = (
    _TEXT
    | st.integers(-(2**70), 2**70)
    | st.floats(allow_nan=True, allow_infinity=True)
    | st.booleans()
    | st.none()
)
_FORM = st.dictionaries(_TEXT, _LEAF, max_size=4) | st.lists(_LEAF, max_size=2)


@given(st.lists(_FORM, min_size=1, max_size=5), st.sampled_from([40, 400, MAX_INPUT_BYTES]))
@settings(max_examples=400, deadline=None)
def test_the_batch_guard_passes_only_forms_the_one_by_one_guard_passes(
    forms: list[Any], cap: int
) -> None:
    if not flat_forms_pass(forms, max_bytes=cap):
        return  # decides nothing: each takes checked_payload
    for form in forms:
        checked_payload("j", None, None, max_bytes=cap, form=form)  # type: ignore[arg-type]


@given(st.lists(_TEXT | st.text(max_size=600) | st.integers(), min_size=1, max_size=6))
@settings(max_examples=300, deadline=None)
def test_the_batch_key_check_passes_only_keys_checked_key_passes(keys: list[Any]) -> None:
    if not keys_pass(keys):
        return
    for key in keys:
        assert type(key) is str and key
        assert checked_key("j", key) == key
