"""``concurrency_limiter``: starts per sliding window per tenant — the window property
(hypothesis), its refusals, and a run over the rate handed back uncounted with X_RATE_LIMITED, on
the memory driver and on Postgres (``engine``)."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from pydantic import BaseModel

from ultimat3.core import XError
from ultimat3.jobs import (
    ConcurrencyLimiter,
    ExecutionSettings,
    concurrency_limiter,
    execute_job,
    job,
    job_worker,
)
from ultimat3.jobs.adapter import ClaimedJob, JobDriver
from ultimat3.jobs.memory import memory_job_driver
from ultimat3_testkit.engine_drivers import Engine, EngineDriver

# --- the window ---------------------------------------------------------------------------------

attempts = st.lists(
    st.tuples(st.integers(0, 50), st.sampled_from(["acme", "umbrella", None])),
    min_size=1,
    max_size=80,
)


@settings(max_examples=300, deadline=None)
@given(rate=st.integers(1, 4), window_ms=st.integers(1, 40), steps=attempts)
def test_no_window_holds_more_starts_than_the_rate_and_a_refusal_names_when_it_may_start(
    rate: int, window_ms: int, steps: list[tuple[int, str | None]]
) -> None:
    limiter = concurrency_limiter(rate_per_tenant=rate, window=window_ms)
    now_ms = 0
    started: dict[str | None, list[int]] = {}
    for gap, tenant in steps:
        now_ms += gap
        mine = started.setdefault(tenant, [])
        in_window = [t for t in mine if t > now_ms - window_ms]
        wait = limiter.try_start(tenant, now_ms / 1000)
        if wait is None:
            assert len(in_window) < rate  # it started: the window had room
            mine.append(now_ms)
        else:
            assert len(in_window) == rate  # refused only when the window is full
            # the wait is exactly until the oldest start in the window ages out
            assert wait == min(in_window) + window_ms - now_ms
    for times in started.values():  # the sliding property over every recorded start
        for i, t in enumerate(times):
            assert sum(1 for u in times[i:] if u < t + window_ms) <= rate


def test_a_refused_run_may_start_once_its_wait_has_passed() -> None:
    limiter = concurrency_limiter(rate_per_tenant=2, window="1s")
    assert limiter.try_start("acme", 10.0) is None
    assert limiter.try_start("acme", 10.25) is None
    wait = limiter.try_start("acme", 10.5)
    assert wait == 500
    assert limiter.try_start("umbrella", 10.5) is None  # another tenant has its own window
    assert limiter.try_start(None, 10.5) is None  # rows with no tenant share one bucket
    assert limiter.try_start("acme", 10.5 + wait / 1000) is None
    assert limiter.try_start("acme", 11.0) is not None  # 10.25 and 11.0 fill the window again


def test_idle_tenants_are_forgotten_once_many_are_tracked() -> None:
    limiter = concurrency_limiter(rate_per_tenant=1, window="1s")
    for n in range(5000):
        assert limiter.try_start(f"t{n}", n * 10.0) is None  # each older than the window
    assert limiter.tracked() < 4100


@pytest.mark.parametrize(
    ("kwargs", "names"),
    [
        ({"rate_per_tenant": 0}, "rate_per_tenant 0"),
        ({"rate_per_tenant": True}, "rate_per_tenant True"),
        ({"rate_per_tenant": 2.5}, "rate_per_tenant 2.5"),
        ({"rate_per_tenant": 3, "window": "soon"}, "window 'soon'"),
        ({"rate_per_tenant": 3, "window": 0}, "window 0"),
        ({"rate_per_tenant": 3, "window": -5}, "window -5"),
    ],
)
def test_bad_settings_are_refused_naming_the_setting(kwargs: dict[str, Any], names: str) -> None:
    with pytest.raises(XError) as caught:
        concurrency_limiter(**kwargs)
    assert caught.value.code == "X_CONFIG_INVALID"
    assert names in caught.value.message
    assert caught.value.fix is not None and "concurrency_limiter(" in caught.value.fix


# --- in a run -----------------------------------------------------------------------------------


@pytest.fixture
def driver(engine: Engine) -> EngineDriver:
    """The memory driver, then Postgres: installed as JOB_DRIVER."""
    return engine.driver


class Sync(BaseModel):
    n: int


ran: list[int] = []


async def _sync(input: Sync, step: Any, ctx: Any) -> int:
    ran.append(input.n)
    return input.n


sync = job(input=Sync, idempotency_key=lambda i: f"sync:{i.n}", name="limited_sync", run=_sync)


def test_the_worker_refuses_a_limiter_that_is_not_one() -> None:
    not_one: Any = {"rate_per_tenant": 3}
    with pytest.raises(XError) as caught:
        job_worker(jobs=[sync], limiter=not_one, driver=memory_job_driver())
    assert caught.value.code == "X_CONFIG_INVALID"
    assert "is not a concurrency_limiter" in caught.value.message
    worker = job_worker(
        jobs=[sync], limiter=concurrency_limiter(rate_per_tenant=3), driver=memory_job_driver()
    )
    assert worker is not None


async def _claim_all(driver: JobDriver) -> list[ClaimedJob]:
    return await driver.claim(
        queues=["default"], limit=10, worker_id="w1", visibility_timeout_ms=30_000
    )


async def test_a_run_over_its_tenant_s_rate_is_handed_back_uncounted_with_x_rate_limited(
    driver: EngineDriver,
) -> None:
    ran.clear()
    now = [100.0]
    limiter = concurrency_limiter(rate_per_tenant=2, window="1m")
    assert isinstance(limiter, ConcurrencyLimiter)
    run = ExecutionSettings(limiter=limiter, monotonic=lambda: now[0])
    acme = [await sync.enqueue({"n": n}, tenant_id="acme") for n in (1, 2, 3)]
    other = await sync.enqueue({"n": 4}, tenant_id="umbrella")
    claimed = {c.id: c for c in await _claim_all(driver)}
    outcomes = {}
    for result in (*acme, other):
        now[0] += 1.0  # starts one second apart
        outcomes[result.id] = await execute_job(
            claimed[result.id], sync, driver=driver, settings=run
        )
    assert sorted(ran) == [1, 2, 4]  # acme's third waits; umbrella was never held up by acme
    third = outcomes[acme[2].id]
    assert third.outcome == "release" and third.landed
    assert third.delay_ms == 58_000  # the first start (at 101 s) ages out of the minute at 161 s
    row = await driver.introspect.show(acme[2].id)
    assert row.state in ("ready", "delayed")
    assert row.attempts == 0  # uncounted: a backlog is never dead-lettered for waiting
    assert row.last_error is not None and row.last_error["code"] == "X_RATE_LIMITED"
    assert row.last_error["meta"]["tenant_id"] == "acme"
    assert row.run_at > row.created_at
