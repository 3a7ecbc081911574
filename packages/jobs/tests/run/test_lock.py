"""with_lock(): one holder fleet-wide, renewal, fencing tokens, refusals — over the memory
driver's lease store (on the system clock) and over Postgres's (``store``); losing a lock on the
frozen clock is memory-only, with a real-time variant on Postgres."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

import pytest

from ultimat3.core import AbortController, FrozenClock, XError, retry_classification, swap_adapter
from ultimat3.jobs._run.lock import LockGrant, hold_lock, with_lock
from ultimat3.jobs.adapter import JOB_DRIVER, LeaseStore, memory_job_driver
from ultimat3_testkit.engine_drivers import ENGINE_DRIVERS, Engine, open_engine


@pytest.fixture(params=ENGINE_DRIVERS)
async def store(request: pytest.FixtureRequest, database_url: str) -> AsyncIterator[LeaseStore]:
    """A lease store on a real clock: the memory driver's (the system clock), then Postgres's."""
    if request.param == "memory":
        yield memory_job_driver().leases
        return
    async with open_engine("postgres", database_url) as engine:
        yield engine.driver.leases


async def test_a_second_caller_with_wait_zero_is_refused_naming_the_holder(
    store: LeaseStore,
) -> None:
    inside = asyncio.Event()
    release = asyncio.Event()

    async def first(grant: LockGrant) -> str:
        inside.set()
        await release.wait()
        return "first"

    task = asyncio.create_task(with_lock("digest:1", first, ttl="2s", store=store))
    await inside.wait()
    holder = (await store.holders("lock:digest:1"))[0].holder
    with pytest.raises(XError) as refused:
        await with_lock("digest:1", lambda g: "second", ttl="2s", wait=0, store=store)
    assert refused.value.code == "X_LOCK_NOT_ACQUIRED"
    assert refused.value.status == 409
    assert retry_classification(refused.value.code) == "retryable"
    assert holder in refused.value.message and "digest:1" in refused.value.message
    release.set()
    assert await task == "first"


async def test_a_waiting_caller_gets_the_lock_after_release_with_a_greater_token(
    store: LeaseStore,
) -> None:
    tokens: list[int] = []

    async def hold(grant: LockGrant) -> None:
        tokens.append(grant.token)
        await asyncio.sleep(0.05)

    await asyncio.gather(
        with_lock("k", hold, ttl="1s", store=store),
        with_lock("k", hold, ttl="1s", wait="1s", poll="10ms", store=store),
    )
    assert len(tokens) == 2 and tokens[1] > tokens[0]
    assert await store.holders("lock:k") == []


async def test_renewal_keeps_the_lock_past_its_ttl(store: LeaseStore) -> None:

    # a 1 s ttl: on a loaded machine a Postgres renewal can take longer than a 200 ms one allows
    async def long(grant: LockGrant) -> bool:
        await asyncio.sleep(2.5)  # 2.5 ttls
        with pytest.raises(XError) as busy:
            await with_lock("renewed", lambda g: None, ttl="1s", wait=0, store=store)
        assert busy.value.code == "X_LOCK_NOT_ACQUIRED"
        return grant.signal.aborted

    assert await with_lock("renewed", long, ttl="1s", store=store) is False


# memory only: the frozen clock jumps past the ttl (variant on Postgres below)
async def test_a_lost_lock_aborts_the_signal_and_the_call_raises_even_if_fn_returned() -> None:
    clock = FrozenClock()
    store = memory_job_driver(clock=clock).leases

    async def paused(grant: LockGrant) -> str:
        clock.advance("5s")  # the holder "paused" past its ttl: the grant expired
        await asyncio.sleep(0.25)
        assert grant.signal.aborted
        assert grant.signal.reason is not None and grant.signal.reason.code == "X_LOCK_LOST"
        return "finished anyway"

    with pytest.raises(XError) as lost:
        await with_lock("lost", paused, ttl="300ms", store=store)
    assert lost.value.code == "X_LOCK_LOST" and "lost" in lost.value.message


async def test_on_postgres_a_lock_taken_over_aborts_the_signal_and_the_call_raises(
    pg_engine: Engine,
) -> None:
    store = pg_engine.driver.leases

    async def taken_over(grant: LockGrant) -> str:
        [mine] = await store.holders("lock:lost")
        # its ttl passed while this holder was stalled, and another holder took the key
        assert await store.release("lock:lost", mine.slot, holder=mine.holder)
        theirs = await store.acquire("lock:lost", limit=1, holder="other", ttl_ms=60_000)
        assert theirs is not None and theirs.token > grant.token
        await asyncio.wait_for(grant.signal.wait(), timeout=2)  # the next renewal is refused
        assert grant.signal.reason is not None and grant.signal.reason.code == "X_LOCK_LOST"
        return "finished anyway"

    with pytest.raises(XError) as lost:
        await with_lock("lost", taken_over, ttl="300ms", store=store)
    assert lost.value.code == "X_LOCK_LOST" and "lost" in lost.value.message
    assert [g.holder for g in await store.holders("lock:lost")] == ["other"]


async def test_hold_lock_is_the_async_with_form(store: LeaseStore) -> None:
    async with hold_lock("cm", ttl="1s", store=store) as grant:
        assert grant.key == "cm" and grant.token > 0
        assert [g.holder for g in await store.holders("lock:cm")]
    assert await store.holders("lock:cm") == []


async def test_the_installed_drivers_lease_store_is_the_default(engine: Engine) -> None:
    async with hold_lock("ambient", ttl="1s"):  # the engine's driver is installed
        assert len(await engine.driver.leases.holders("lock:ambient")) == 1


async def test_no_lease_store_is_refused_with_the_fix() -> None:
    class NoLeases:
        name = "hand-rolled"

    with swap_adapter(JOB_DRIVER, NoLeases()), pytest.raises(XError) as missing:  # type: ignore[misc]
        await with_lock("x", lambda g: None, ttl="1s")
    assert missing.value.code == "X_LOCK_STORE_MISSING"
    assert "hand-rolled" in missing.value.message
    assert missing.value.fix is not None and "store=" in missing.value.fix


async def test_an_empty_key_is_refused() -> None:
    with pytest.raises(XError) as empty:
        await with_lock(" ", lambda g: None, ttl="1s", store=memory_job_driver().leases)
    assert empty.value.code == "X_INVARIANT"


async def test_an_aborted_caller_signal_stops_the_wait(store: LeaseStore) -> None:
    controller = AbortController()
    controller.abort()
    with pytest.raises(XError) as aborted:
        await with_lock("sig", lambda g: None, ttl="1s", store=store, signal=controller.signal)
    assert aborted.value.code == "X_ABORTED"
    assert await store.holders("lock:sig") == []
