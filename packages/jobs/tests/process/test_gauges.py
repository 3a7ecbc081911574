"""The worker gauges job_worker_in_flight / job_worker_capacity (observable gauges on core's
meter()), reporting every started worker by worker_id, and worker.stats().max_in_flight."""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Iterable, Iterator
from typing import Any

import pytest
from pydantic import BaseModel

from ultimat3.core import FrozenClock, swap_adapter, use_clock
from ultimat3.jobs import job, job_worker
from ultimat3.jobs._process import gauges as _gauges
from ultimat3.jobs.adapter import JOB_DRIVER
from ultimat3.jobs.memory import MemoryJobDriver, memory_job_driver


class N(BaseModel):
    n: int


class FakeMeter:
    def __init__(self) -> None:
        self.gauges: dict[str, Callable[[Any], Iterable[Any]]] = {}

    def create_observable_gauge(
        self, name: str, callbacks: list[Callable[[Any], Iterable[Any]]], **kw: Any
    ) -> object:
        [self.gauges[name]] = callbacks
        return object()

    def read(self, name: str) -> dict[str, int]:
        return {o.attributes["worker_id"]: o.value for o in self.gauges[name](None)}


@pytest.fixture
def fake_meter(monkeypatch: pytest.MonkeyPatch) -> FakeMeter:
    fake = FakeMeter()
    monkeypatch.setattr(_gauges, "meter", lambda: fake)
    monkeypatch.setattr(_gauges, "_registered", [])
    return fake


@pytest.fixture
def driver() -> Iterator[MemoryJobDriver]:
    d = memory_job_driver()
    with use_clock(FrozenClock()), swap_adapter(JOB_DRIVER, d):
        yield d


async def test_the_gauges_report_each_started_worker_in_flight_and_capacity(
    fake_meter: FakeMeter, driver: MemoryJobDriver
) -> None:
    release = asyncio.Event()
    inside = asyncio.Event()

    @job(input=N, idempotency_key=lambda i: str(i.n))
    async def held(input: N, step: Any, ctx: Any) -> None:
        inside.set()
        await release.wait()

    capped = job_worker(jobs=[held], max_in_flight=4, worker_id="capped", handle_signals=False)
    free = job_worker(jobs=[held], worker_id="uncapped", handle_signals=False)
    assert capped.stats().max_in_flight == 4 and free.stats().max_in_flight is None
    await held.enqueue({"n": 1})
    await capped.start()
    await free.start()
    try:
        await inside.wait()
        assert set(fake_meter.gauges) == {
            "job_worker_in_flight",
            "job_worker_capacity",
            "queue_depth",
            "queue_demand",
        }
        in_flight = fake_meter.read("job_worker_in_flight")
        assert in_flight["capped"] + in_flight["uncapped"] == 1
        assert fake_meter.read("job_worker_capacity") == {"capped": 4}  # no cap, no capacity
    finally:
        release.set()
        await capped.stop()
        await free.stop()
    assert fake_meter.read("job_worker_in_flight") == {}  # a stopped worker leaves the gauges
