"""Spans, metrics and log events, read back through the OpenTelemetry SDK's in-memory exporters
after real runs — on the memory driver and on Postgres (``engine``).

The SDK is a test dependency: each test builds its own TracerProvider / MeterProvider and points
the jobs' tracer and meter at them (the process-wide providers can be set only once), so the
tests stay independent of each other and of every other test in the process.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any
from uuid import uuid4

import pytest
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import (
    HistogramDataPoint,
    InMemoryMetricReader,
    NumberDataPoint,
)
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import SpanKind, StatusCode
from pydantic import BaseModel

from ultimat3.core import XError, capture_log_events
from ultimat3.jobs import Retry, job, job_worker
from ultimat3.jobs._process import gauges as _gauges
from ultimat3.jobs._process import sampler as _sampler
from ultimat3.jobs._run import execute as _execute
from ultimat3.jobs._run import heartbeat as _heartbeat
from ultimat3.jobs._run import run_log as _run_log
from ultimat3.jobs._run.outcome import ExecutionSettings
from ultimat3.jobs._telemetry import spans as _spans
from ultimat3_testkit.engine_drivers import Engine


class Order(BaseModel):
    n: int


@dataclass
class Otel:
    exporter: InMemorySpanExporter
    reader: InMemoryMetricReader
    tracer: Any

    def spans(self, name: str | None = None) -> list[ReadableSpan]:
        got = list(self.exporter.get_finished_spans())
        return [s for s in got if name is None or s.name == name]

    def points(self, metric: str) -> dict[tuple[tuple[str, Any], ...], Any]:
        """``{sorted attribute items: value}`` of one metric, collected now."""
        data = self.reader.get_metrics_data()
        out: dict[tuple[tuple[str, Any], ...], Any] = {}
        if data is None:
            return out
        for rm in data.resource_metrics:
            for sm in rm.scope_metrics:
                for m in sm.metrics:
                    if m.name == metric:
                        for p in m.data.data_points:
                            key = tuple(sorted(dict(p.attributes or {}).items()))
                            if isinstance(p, HistogramDataPoint):
                                out[key] = (p.count, p.sum)
                                continue
                            assert isinstance(p, NumberDataPoint)
                            out[key] = p.value
        return out


@pytest.fixture
def otel(monkeypatch: pytest.MonkeyPatch) -> Iterator[Otel]:
    exporter = InMemorySpanExporter()
    tracer_provider = TracerProvider()
    tracer_provider.add_span_processor(SimpleSpanProcessor(exporter))
    reader = InMemoryMetricReader()
    meter_provider = MeterProvider(metric_readers=[reader])
    tracer = tracer_provider.get_tracer("ultimat3")
    meter = meter_provider.get_meter("ultimat3")
    monkeypatch.setattr(_execute, "tracer", lambda: tracer)
    monkeypatch.setattr(_spans, "tracer", lambda: tracer)
    for module in (_execute, _heartbeat, _gauges, _run_log):
        monkeypatch.setattr(module, "meter", lambda: meter)
    monkeypatch.setattr(_execute, "_jobs_counter", None)
    monkeypatch.setattr(_run_log, "_duration", None)
    monkeypatch.setattr(_heartbeat, "_lost_counter", None)
    monkeypatch.setattr(_gauges, "_registered", [])
    monkeypatch.setattr(_sampler, "_last_read", 0.0)
    yield Otel(exporter, reader, tracer)
    tracer_provider.shutdown()
    meter_provider.shutdown()


def attrs(span: ReadableSpan) -> dict[str, Any]:
    return dict(span.attributes or {})


# --- spans ---------------------------------------------------------------------------------------


async def test_a_run_is_a_consumer_span_in_a_new_trace_linked_to_the_enqueue(
    engine: Engine, otel: Otel
) -> None:
    async def body(input: Order, step: Any, ctx: Any) -> int:
        a = await step.run("reserve", lambda s: input.n)
        return int(await step.run("charge", lambda s: a + 1))

    checkout = job(
        input=Order,
        idempotency_key=lambda i: f"o:{i.n}:{uuid4()}",
        name="obs.checkout",
        queue="obs-q",
        run=body,
    )
    with otel.tracer.start_as_current_span("POST /orders") as request:
        queued = await checkout.enqueue({"n": 1})
    await engine.harness([checkout]).drain()

    [send] = otel.spans("send obs-q")
    assert send.kind == SpanKind.PRODUCER
    assert send.parent is not None
    assert send.parent.span_id == request.get_span_context().span_id
    assert attrs(send)["messaging.message.id"] == queued.id
    assert attrs(send)["messaging.operation.type"] == "send"

    [run] = otel.spans("job obs.checkout")
    assert run.kind == SpanKind.CONSUMER
    assert run.parent is None, "a run starts its own trace"
    assert run.context.trace_id != request.get_span_context().trace_id
    [link] = run.links
    assert link.context.trace_id == request.get_span_context().trace_id
    assert link.context.span_id == send.context.span_id, "linked to the enqueue itself"
    a = attrs(run)
    assert a["messaging.system"] == "ultimat3"
    assert a["messaging.destination.name"] == "obs-q"
    assert a["messaging.message.id"] == queued.id
    assert (a["messaging.operation.type"], a["messaging.operation.name"]) == ("process", "run")
    assert (a["ultimat3.job"], a["ultimat3.run_id"]) == ("obs.checkout", queued.run_id)
    assert (a["ultimat3.attempt"], a["ultimat3.outcome"]) == (1, "done")
    assert run.status.status_code == StatusCode.UNSET

    steps = sorted(otel.spans(), key=lambda s: s.start_time or 0)
    steps = [s for s in steps if s.name.startswith("step ")]
    assert [s.name for s in steps] == ["step reserve", "step charge"]
    for s in steps:
        assert s.parent is not None and s.parent.span_id == run.context.span_id
        assert attrs(s)["ultimat3.step.replayed"] is False
        assert attrs(s)["ultimat3.job_id"] == queued.id


async def test_a_retry_replays_its_completed_steps_as_marked_spans(
    engine: Engine, otel: Otel
) -> None:
    tries: list[int] = []

    async def body(input: Order, step: Any, ctx: Any) -> None:
        await step.run("first", lambda s: 1)

        def flaky(s: Any) -> int:
            tries.append(1)
            if len(tries) == 1:
                raise RuntimeError("the card network blinked")
            return 2

        await step.run("second", flaky)

    flaky_job = job(
        input=Order,
        idempotency_key=lambda i: f"f:{i.n}:{uuid4()}",
        name="obs.flaky",
        queue="obs-q",
        retry=Retry(attempts=3, backoff="fixed", delay="50ms"),
        run=body,
    )
    await flaky_job.enqueue({"n": 1})  # no span: the run has no link
    await engine.harness([flaky_job]).drain()

    runs = sorted(otel.spans("job obs.flaky"), key=lambda s: attrs(s)["ultimat3.attempt"])
    assert [attrs(r)["ultimat3.outcome"] for r in runs] == ["retry", "done"]
    assert all(not r.links for r in runs)
    assert runs[0].status.status_code == StatusCode.ERROR
    assert runs[0].status.description == "RuntimeError"
    assert attrs(runs[0])["error.type"] == "RuntimeError"
    by_run = {
        r.context.span_id: [
            (s.name, attrs(s)["ultimat3.step.replayed"])
            for s in sorted(otel.spans(), key=lambda s: s.start_time or 0)
            if s.parent is not None and s.parent.span_id == r.context.span_id
        ]
        for r in runs
    }
    assert by_run[runs[0].context.span_id] == [("step first", False), ("step second", False)]
    assert by_run[runs[1].context.span_id] == [("step first", True), ("step second", False)]
    [failed] = [s for s in otel.spans("step second") if s.status.status_code == StatusCode.ERROR]
    assert any(e.name == "exception" for e in failed.events)


async def test_without_an_sdk_span_nothing_is_traced_and_nothing_stored(engine: Engine) -> None:
    async def body(input: Order, step: Any, ctx: Any) -> int:
        return int(await step.run("only", lambda s: 1))

    plain = job(
        input=Order,
        idempotency_key=lambda i: f"p:{i.n}:{uuid4()}",
        name="obs.plain",
        queue="obs-q",
        run=body,
    )
    await plain.enqueue({"n": 1})
    [claimed] = await engine.driver.claim(
        queues=["obs-q"], limit=5, worker_id="w", visibility_timeout_ms=30_000
    )
    assert claimed.trace_context is None
    assert _execute._run_tracer() is None, "the API alone: no run span is made"
    outcome = await _execute.execute_job(claimed, plain, driver=engine.driver)
    assert outcome.outcome == "done"


# --- metrics -------------------------------------------------------------------------------------


async def test_jobs_total_counts_each_settled_attempt_by_queue_and_outcome(
    engine: Engine, otel: Otel
) -> None:
    async def fine(input: Order, step: Any, ctx: Any) -> None:
        return None

    async def broken(input: Order, step: Any, ctx: Any) -> None:
        raise RuntimeError("never works")  # retryable: one retry, then the dead letter

    ok = job(input=Order, idempotency_key=lambda i: f"ok:{i.n}", name="obs.ok", queue="a", run=fine)
    bad = job(
        input=Order,
        idempotency_key=lambda i: f"bad:{i.n}",
        name="obs.bad",
        queue="b",
        retry=Retry(attempts=2, backoff="fixed", delay="50ms"),
        run=broken,
    )
    await ok.enqueue_many([{"n": 1}, {"n": 2}, {"n": 3}])
    await bad.enqueue({"n": 1})
    await engine.harness([ok, bad]).drain()
    assert otel.points("jobs_total") == {
        (("job", "obs.ok"), ("outcome", "done"), ("queue", "a")): 3,
        (("job", "obs.bad"), ("outcome", "retry"), ("queue", "b")): 1,
        (("job", "obs.bad"), ("outcome", "dead"), ("queue", "b")): 1,
    }
    durations = otel.points("job_duration_seconds")
    assert {k: count for k, (count, _) in durations.items()} == {
        (("job", "obs.ok"), ("outcome", "done"), ("queue", "a")): 3,
        (("job", "obs.bad"), ("outcome", "retry"), ("queue", "b")): 1,
        (("job", "obs.bad"), ("outcome", "dead"), ("queue", "b")): 1,
    }
    assert all(total >= 0 for _, total in durations.values())


async def test_a_lost_lease_is_one_point_on_job_leases_lost_total(
    engine: Engine, otel: Otel
) -> None:
    class NoRenewal:
        """The driver, with every renewal refused: the lease is lost at the first."""

        def __init__(self, inner: Any) -> None:
            self.inner = inner

        def __getattr__(self, name: str) -> Any:
            return getattr(self.inner, name)

        async def heartbeat(self, *args: Any, **kw: Any) -> bool:
            return False

    async def body(input: Order, step: Any, ctx: Any) -> None:
        reason = await asyncio.wait_for(ctx.signal.wait(), timeout=5)
        raise reason

    held = job(
        input=Order, idempotency_key=lambda i: f"h:{i.n}", name="obs.held", queue="lq", run=body
    )
    await held.enqueue({"n": 1})
    [claimed] = await engine.driver.claim(
        queues=["lq"], limit=1, worker_id="w", visibility_timeout_ms=300
    )
    with capture_log_events() as events:
        outcome = await _execute.execute_job(
            claimed,
            held,
            driver=NoRenewal(engine.driver),
            settings=ExecutionSettings(visibility_timeout_ms=300),
        )
    assert outcome.outcome == "lost"
    assert otel.points("job_leases_lost_total") == {(("queue", "lq"),): 1}
    [lost] = [e for e in events if e["event"] == "jobs.lease.lost"]
    want = {"level": "error", "job": "obs.held", "job_id": claimed.id, "attempt": 1}
    assert {k: lost[k] for k in want} == want
    assert lost["queue"] == "lq" and lost["code"] == "X_JOB_LEASE_LOST"
    [run] = otel.spans("job obs.held")
    assert run.status.status_code == StatusCode.ERROR
    assert attrs(run)["ultimat3.outcome"] == "lost"


async def _until(check: Any, what: str, within_s: float = 10.0) -> None:
    deadline = asyncio.get_running_loop().time() + within_s
    while True:
        last = check()
        if last is True:
            return
        if asyncio.get_running_loop().time() > deadline:
            raise AssertionError(f"{what}: last seen {last!r}")
        await asyncio.sleep(0.02)


async def test_queue_depth_and_demand_follow_the_backlog_and_the_runs(
    engine: Engine, otel: Otel
) -> None:
    gate = asyncio.Event()

    async def body(input: Order, step: Any, ctx: Any) -> None:
        await gate.wait()

    slow = job(
        input=Order, idempotency_key=lambda i: f"s:{i.n}", name="obs.slow", queue="dq", run=body
    )
    await slow.enqueue_many([{"n": i} for i in range(5)])
    await slow.enqueue({"n": 99}, delay="1h")  # not due: neither depth nor demand
    worker = job_worker(
        jobs=[slow],
        driver=engine.driver,
        max_in_flight=2,
        handle_signals=False,
        depth_sample_interval_ms=50,
        poll_interval_ms=20,
        idle_poll_max_ms=50,
    )
    assert otel.points("queue_depth") == {}, "nothing sampled before a worker starts"
    await worker.start()
    try:
        want = {"depth": {(("queue", "dq"),): 3}, "demand": {(("queue", "dq"),): 5}}

        def sampled() -> Any:
            got = {
                "depth": otel.points("queue_depth"),
                "demand": otel.points("queue_demand"),
            }
            return got == want or got

        await _until(sampled, "2 running, 3 due")
        assert otel.points("job_worker_in_flight") == {(("worker_id", worker.id),): 2}
        assert otel.points("job_worker_capacity") == {(("worker_id", worker.id),): 2}
        gate.set()
        want = {"depth": {(("queue", "dq"),): 0}, "demand": {(("queue", "dq"),): 0}}
        await _until(sampled, "all five done")
    finally:
        gate.set()
        await worker.stop()
    assert otel.points("jobs_total") == {
        (("job", "obs.slow"), ("outcome", "done"), ("queue", "dq")): 5
    }
    assert otel.points("queue_depth") == {}, "a stopped worker reports no sample"


async def test_the_sampler_reads_no_store_until_the_gauges_are_read(
    engine: Engine, otel: Otel
) -> None:
    calls: list[list[str]] = []
    driver = engine.driver
    real = driver.sample_queues

    async def counting(queues: Any) -> Any:
        calls.append(list(queues))
        return await real(queues)

    async def body(input: Order, step: Any, ctx: Any) -> None:
        return None

    quiet = job(input=Order, idempotency_key=lambda i: str(i.n), name="obs.q", queue="sq", run=body)
    worker = job_worker(
        jobs=[quiet], driver=driver, handle_signals=False, depth_sample_interval_ms=20
    )
    object.__setattr__(driver, "sample_queues", counting)
    try:
        await worker.start()
        await asyncio.sleep(0.2)
        assert calls == [], "no collection, no statement"
        otel.points("queue_depth")  # the first read wakes the sampler at once
        await _until(lambda: len(calls) >= 1 or calls, "a sample after the first read")
        assert calls[0] == ["sq"], "one statement for every queue served"
        assert otel.points("queue_depth") == {(("queue", "sq"),): 0}
    finally:
        await worker.stop()
        del driver.sample_queues


def test_a_bad_sample_interval_is_refused() -> None:
    async def body(input: Order, step: Any, ctx: Any) -> None:
        return None

    j = job(input=Order, idempotency_key=lambda i: str(i.n), name="obs.cfg", run=body)
    with pytest.raises(XError) as exc:
        job_worker(jobs=[j], depth_sample_interval_ms=0)
    assert exc.value.code == "X_CONFIG_INVALID"
    assert "depth_sample_interval_ms" in exc.value.message


async def test_a_row_the_claim_buries_counts_once_as_dead_on_jobs_total(
    engine: Engine, otel: Otel
) -> None:
    async def body(input: Order, step: Any, ctx: Any) -> None:
        return None

    once = job(
        input=Order,
        idempotency_key=lambda i: f"b:{i.n}",
        name="obs.buried",
        queue="bq",
        retry=Retry(attempts=1),
        run=body,
    )
    await once.enqueue({"n": 1})
    [claimed] = await engine.driver.claim(
        queues=["bq"], limit=1, worker_id="died", visibility_timeout_ms=200
    )
    assert claimed.attempt == claimed.max_attempts, "its final attempt"
    if engine.clock is not None:
        engine.clock.advance(300)
    else:
        await asyncio.sleep(0.35)
    worker = job_worker(jobs=[once], driver=engine.driver, handle_signals=False)
    assert await worker.run_pass() == 0, "buried, never handed out"
    assert worker.stats().dead_lettered == 1
    assert otel.points("jobs_total") == {
        (("job", "obs.buried"), ("outcome", "dead"), ("queue", "bq")): 1
    }


async def test_an_unwind_gives_each_compensation_its_own_step_span(
    engine: Engine, otel: Otel
) -> None:
    undone: list[str] = []

    async def body(input: Order, step: Any, ctx: Any) -> None:
        await step.run("charge", lambda s: "ch_1", compensate=lambda out, s: undone.append(out))
        await step.run("ship", lambda s: (_ for _ in ()).throw(XError("X_INVARIANT", "no stock")))

    checkout = job(
        input=Order,
        idempotency_key=lambda i: f"c:{i.n}",
        name="obs.saga",
        queue="cq",
        compensates=True,
        retry=Retry(attempts=1),
        run=body,
    )
    await checkout.enqueue({"n": 1})
    await engine.harness([checkout]).drain()
    assert undone == ["ch_1"]
    kinds = {
        s.name: (attrs(s)["ultimat3.step.kind"], attrs(s)["ultimat3.step.replayed"])
        for s in otel.spans()
        if s.name.startswith("step ")
    }
    assert kinds["step compensate:charge"] == ("compensate", False)
    runs = otel.spans("job obs.saga")
    [comp] = otel.spans("step compensate:charge")
    assert comp.parent is not None
    assert comp.parent.span_id in {r.context.span_id for r in runs}


async def test_a_failing_sample_is_logged_once_per_streak_and_leaves_a_gap() -> None:
    from ultimat3.jobs.memory import memory_job_driver

    class Flaky:
        def __init__(self) -> None:
            self.inner = memory_job_driver()
            self.down = True

        async def sample_queues(self, queues: Any) -> Any:
            if self.down:
                raise XError("X_DRIVER_UNAVAILABLE", "the store is down")
            return await self.inner.sample_queues(queues)

    driver = Flaky()
    sampler = _sampler.DepthSampler(interval_ms=50)
    with capture_log_events() as events:
        await sampler.sample(driver, ["q"])
        await sampler.sample(driver, ["q"])
        assert sampler.fresh() == ()
        driver.down = False
        await sampler.sample(driver, ["q"])
        assert [(s.queue, s.depth) for s in sampler.fresh()] == [("q", 0)]
        driver.down = True
        await sampler.sample(driver, ["q"])
    failed = [e for e in events if e["event"] == "jobs.sample.failed"]
    assert [e["level"] for e in failed] == ["warning", "warning"], "one per failing streak"
    assert "the store is down" in failed[0]["error"]
    await asyncio.sleep(0.2)  # past three intervals: the last good sample is no longer reported
    assert sampler.fresh() == ()
