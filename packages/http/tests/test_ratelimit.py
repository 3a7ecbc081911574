"""``rate_limiter()``: GCRA's guarantees as properties on the memory store, the same decisions on
the Postgres and Redis stores (real servers), atomic under concurrent hits, and its refusals."""

from __future__ import annotations

import asyncio
import os
import uuid

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from redis.asyncio import Redis

from ultimat3.core import FrozenClock, XError
from ultimat3.http import (
    RateLimitStore,
    memory_rate_limit_store,
    postgres_rate_limit_store,
    rate_limiter,
    redis_rate_limit_store,
)

DATABASE_URL = os.environ.get("DATABASE_URL") or "postgresql://postgres@127.0.0.1:5432/test"

steps = st.lists(st.integers(0, 400), min_size=1, max_size=60)  # ms between hits


async def run(store: RateLimitStore, gaps: list[int], *, limit: int, window: int) -> list[bool]:
    clock = FrozenClock(0)
    limiter = rate_limiter(limit=limit, window=window, store=store, clock=clock)
    key = uuid.uuid4().hex
    out = []
    for gap in gaps:
        clock.advance(gap) if gap else None
        out.append((await limiter.hit(key)).allowed)
    return out


@given(steps, st.integers(1, 10))
async def test_no_span_admits_more_than_the_bucket_plus_its_refill(
    gaps: list[int], limit: int
) -> None:
    """Over any span of length L, at most limit + L * limit / window hits pass."""
    window = 1_000
    interval = window // limit
    verdicts = await run(memory_rate_limit_store(), gaps, limit=limit, window=window)
    times = [sum(gaps[: i + 1]) for i in range(len(gaps))]
    passed = [t for t, ok in zip(times, verdicts, strict=True) if ok]
    for i, start in enumerate(passed):
        for j in range(i, len(passed)):
            assert j - i + 1 <= limit + (passed[j] - start) // interval


@given(st.integers(1, 20), st.integers(0, 5_000))
async def test_a_refusal_says_exactly_when_the_next_hit_passes(limit: int, idle: int) -> None:
    clock = FrozenClock(0)
    limiter = rate_limiter(limit=limit, window="1s", clock=clock)
    clock.advance(idle) if idle else None
    for _ in range(limit):
        assert (await limiter.hit("k")).allowed
    denied = await limiter.hit("k")
    assert not denied.allowed and denied.remaining == 0
    wait_ms = round(denied.retry_after_seconds * 1000)
    assert wait_ms >= 1
    clock.advance(wait_ms - 1) if wait_ms > 1 else None
    assert not (await limiter.hit("k")).allowed
    clock.advance(1)
    assert (await limiter.hit("k")).allowed


async def test_remaining_counts_down_and_check_raises_x_rate_limited() -> None:
    limiter = rate_limiter(limit=3, window="1m", clock=FrozenClock(0))
    assert [(await limiter.hit("a")).remaining for _ in range(3)] == [2, 1, 0]
    with pytest.raises(XError) as info:
        await limiter.check("a")
    assert info.value.code == "X_RATE_LIMITED" and info.value.retry == "retry-after"
    assert info.value.meta["retry_after_seconds"] == 20.0
    assert (await limiter.check("b")).allowed  # keys are independent


async def test_shared_scope_over_the_memory_store_is_refused() -> None:
    with pytest.raises(XError) as info:
        rate_limiter(limit=600, window="1m", scope="shared")
    assert info.value.code == "X_RATE_LIMIT_NOT_SHARED"
    with pytest.raises(XError) as info:
        rate_limiter(limit=600, window="1m", store=memory_rate_limit_store(), scope="shared")
    assert info.value.code == "X_RATE_LIMIT_NOT_SHARED"


@pytest.mark.parametrize(
    "kwargs",
    [
        {"limit": 0, "window": "1m"},
        {"limit": True, "window": "1m"},
        {"limit": 10, "window": 5},
        {"limit": 10, "window": "1m", "scope": "fleet"},
        {"limit": 10, "window": "1m", "store": object()},
    ],
)
def test_a_bad_configuration_is_refused(kwargs: dict[str, object]) -> None:
    with pytest.raises(XError) as info:
        rate_limiter(**kwargs)  # type: ignore[arg-type]
    assert info.value.code == "X_CONFIG_INVALID"


async def test_an_empty_key_is_refused() -> None:
    with pytest.raises(XError) as info:
        await rate_limiter(limit=1, window="1s").hit("")
    assert info.value.code == "X_CONFIG_INVALID"


SHARED = settings(
    max_examples=15, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)


@SHARED
@given(gaps=steps, limit=st.integers(1, 6))
async def test_postgres_decides_as_the_memory_store(
    pg_schema: str, gaps: list[int], limit: int
) -> None:
    store = postgres_rate_limit_store(DATABASE_URL, schema=pg_schema)
    try:
        await store.migrate()
        got = await run(store, gaps, limit=limit, window=1_000)
    finally:
        await store.close()
    assert got == await run(memory_rate_limit_store(), gaps, limit=limit, window=1_000)


@SHARED
@given(gaps=steps, limit=st.integers(1, 6))
async def test_redis_decides_as_the_memory_store(
    redis_prefix: tuple[Redis, str], gaps: list[int], limit: int
) -> None:
    client, prefix = redis_prefix
    store = redis_rate_limit_store(client, prefix=prefix)
    got = await run(store, gaps, limit=limit, window=1_000)
    assert got == await run(memory_rate_limit_store(), gaps, limit=limit, window=1_000)


async def test_concurrent_hits_on_postgres_spend_exactly_the_limit(pg_schema: str) -> None:
    store = postgres_rate_limit_store(DATABASE_URL, schema=pg_schema)
    try:
        await store.migrate()
        limiter = rate_limiter(
            limit=10, window="1h", store=store, scope="shared", clock=FrozenClock(0)
        )
        verdicts = await asyncio.gather(*(limiter.hit("vendor") for _ in range(40)))
    finally:
        await store.close()
    assert sum(v.allowed for v in verdicts) == 10


async def test_concurrent_hits_on_redis_spend_exactly_the_limit(
    redis_prefix: tuple[Redis, str],
) -> None:
    client, prefix = redis_prefix
    limiter = rate_limiter(
        limit=10,
        window="1h",
        store=redis_rate_limit_store(client, prefix=prefix),
        scope="shared",
        clock=FrozenClock(0),
    )
    verdicts = await asyncio.gather(*(limiter.hit("vendor") for _ in range(40)))
    assert sum(v.allowed for v in verdicts) == 10
    assert await client.pttl(prefix + "vendor") > 0  # the key expires once the bucket refills


def test_a_bad_table_name_is_refused() -> None:
    with pytest.raises(XError) as info:
        postgres_rate_limit_store(DATABASE_URL, table="rate; drop table x")
    assert info.value.code == "X_CONFIG_INVALID"
