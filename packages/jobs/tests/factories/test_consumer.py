"""consumer(): every row of the spec's table on the memory driver, and the declaration
refusals."""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from contextlib import asynccontextmanager, contextmanager
from typing import Any

import pytest

from ultimat3.core import XError, swap_adapter
from ultimat3.jobs import Retry, job_worker
from ultimat3.jobs.adapter import JOB_DRIVER, JobDriver
from ultimat3.jobs.factories.consumer import (
    CONSUMER_LINGER_MS,
    Consumer,
    ConsumerBatch,
    ConsumerCursor,
    ConsumerSource,
    consumer,
)
from ultimat3.jobs.memory import MemoryJobDriver, memory_job_driver
from ultimat3.jobs.testing import job_harness


class Upstream:
    """A stream of items ``0..n-1``; an item's cursor is the index after it. ``follow=True``
    keeps the stream open after the last item (waiting for more, as a live queue does)."""

    def __init__(self, n: int = 0, *, follow: bool = False) -> None:
        self.items = list(range(n))
        self.follow = follow
        self.opened: list[str | None] = []
        self.yielded_at: list[float] = []
        self.more = asyncio.Event()

    def push(self, count: int) -> None:
        start = len(self.items)
        self.items.extend(range(start, start + count))
        self.more.set()

    async def stream(self, source: ConsumerSource) -> AsyncIterator[int]:
        self.opened.append(source.cursor)
        at = int(source.cursor or 0)
        while True:
            while at < len(self.items):
                self.yielded_at.append(time.monotonic())
                yield self.items[at]
                at += 1
            if not self.follow:
                return
            self.more.clear()
            await self.more.wait()


class Sink:
    """The app's side: applied items, and the cursor table (with every save)."""

    def __init__(self) -> None:
        self.applied: list[int] = []
        self.batches: list[tuple[int, ...]] = []
        self.cursors: dict[str, str] = {}
        self.saves: list[tuple[str, str, float]] = []

    async def handle(self, batch: ConsumerBatch[int]) -> str:
        self.applied.extend(batch.items)
        self.batches.append(batch.items)
        return str(batch.items[-1] + 1)

    def cursor(self) -> ConsumerCursor:
        def save(key: str, next: str) -> None:
            self.cursors[key] = next
            self.saves.append((key, next, time.monotonic()))

        return ConsumerCursor(load=self.cursors.get, save=save)


def _consumer(up: Upstream, sink: Sink, **kw: Any) -> Consumer:
    options: dict[str, Any] = {
        "name": "sync-orders",
        "tenant": "none",
        "keys": lambda: ["acct_1"],
        "open": up.stream,
        "handle": sink.handle,
        "cursor": sink.cursor(),
        "batch": 3,
    }
    options.update(kw)
    return consumer(**options)


async def _until(check: Callable[[], bool | Awaitable[bool]], within_s: float = 5.0) -> None:
    deadline = time.monotonic() + within_s
    while True:
        answer = check()
        if not isinstance(answer, bool):
            answer = await answer
        if answer:
            return
        if time.monotonic() > deadline:
            raise AssertionError("the condition did not hold in time")
        await asyncio.sleep(0.01)


@contextmanager
def _bound(driver: JobDriver) -> Iterator[None]:
    with swap_adapter(JOB_DRIVER, driver):
        yield


# --- the run -----------------------------------------------------------------------------------


async def test_a_run_reads_in_batches_and_saves_the_cursor_past_each() -> None:
    up, sink = Upstream(7), Sink()
    sync = _consumer(up, sink)
    async with job_harness(jobs=[sync, sync.arm]) as harness:
        trace = await harness(sync, {"key": "acct_1"})
    assert trace.state == "done"
    assert sink.batches == [(0, 1, 2), (3, 4, 5), (6,)]
    assert [s[:2] for s in sink.saves] == [("acct_1", "3"), ("acct_1", "6"), ("acct_1", "7")]
    assert trace.result == {
        "key": "acct_1",
        "items": 7,
        "batches": 3,
        "cursor": "7",
        "ended": "ended",
    }
    assert trace.steps == {}


async def test_a_run_starts_from_the_saved_cursor() -> None:
    up, sink = Upstream(5), Sink()
    sink.cursors["acct_1"] = "3"
    sync = _consumer(up, sink)
    async with job_harness(jobs=[sync]) as harness:
        await harness(sync, {"key": "acct_1"})
    assert up.opened == ["3"]
    assert sink.applied == [3, 4]


async def test_one_live_row_per_key_and_one_running_body_per_key() -> None:
    up, sink = Upstream(1), Sink()
    sync = _consumer(up, sink)
    assert sync.idempotency_key_for({"key": "acct_1"}) == "consumer:sync-orders:acct_1"
    assert sync.concurrency_key_for({"key": "acct_1"}) == "acct_1"
    assert sync.concurrency == 1
    assert sync.when_busy == "wait"
    assert sync.timeout_ms is None
    async with job_harness(jobs=[sync]) as harness:
        first = await harness.enqueue(sync, {"key": "acct_1"})
        second = await harness.enqueue(sync, {"key": "acct_1"})
        other = await harness.enqueue(sync, {"key": "acct_2"})
    assert second.deduped
    assert second.id == first.id
    assert not other.deduped


async def test_the_supervisor_enqueues_arm_at_rearm_and_arm_enqueues_every_key() -> None:
    up, sink = Upstream(2), Sink()
    sync = _consumer(up, sink, keys=lambda: ["a", "b", "a"], rearm="5m")
    assert sync.supervisor.name == "sync-orders.supervisor"
    assert sync.supervisor.cron == "*/5 * * * *"
    assert sync.supervisor.tz == "UTC"
    assert sync.supervisor.calls(0) == [(sync.arm, {})]
    assert sync.arm.name == "sync-orders.arm"
    async with job_harness(jobs=[sync, sync.arm]) as harness:
        armed = await harness(sync.arm, {})
        rows = await harness.rows(name="sync-orders")
    assert armed.result == {"keys": 2, "started": ["a", "b"]}
    assert sorted((r.payload["key"], r.state) for r in rows) == [("a", "done"), ("b", "done")]


@pytest.mark.parametrize(("rearm", "cron"), [("1m", "* * * * *"), (60_000 * 60, "0 * * * *")])
def test_rearm_becomes_the_supervisors_cron(rearm: Any, cron: str) -> None:
    sync = _consumer(Upstream(), Sink(), rearm=rearm)
    assert sync.supervisor.cron == cron


async def test_arm_is_a_no_op_while_a_key_runs_and_a_restart_once_it_has_not() -> None:
    up, sink = Upstream(2, follow=True), Sink()
    sync = _consumer(up, sink)
    driver = memory_job_driver()
    worker = job_worker(jobs=[sync, sync.arm], driver=driver, handle_signals=False)
    with _bound(driver):
        await worker.start()
        try:
            await sync.arm.enqueue({})
            await _until(lambda: sink.cursors.get("acct_1") == "2")  # linger committed 0, 1
            running = await driver.introspect.list(name="sync-orders", state="running")
            assert len(running) == 1
            again = await sync.enqueue({"key": "acct_1"})
            assert again.deduped
            assert again.id == running[0].id
            await worker.drain()
        finally:
            await worker.stop()
    released = await driver.introspect.show(running[0].id)
    assert released.state == "ready"  # drained: handed back, not settled
    assert up.opened == [None]


async def test_a_dead_key_restarts_on_the_next_arm() -> None:
    up, sink = Upstream(4), Sink()
    broken = {"on": True}

    async def handle(batch: ConsumerBatch[int]) -> str:
        if broken["on"]:
            raise RuntimeError("the warehouse is down")
        return await sink.handle(batch)

    sync = _consumer(up, sink, handle=handle, retry=Retry(attempts=2, delay=10))
    async with job_harness(jobs=[sync, sync.arm]) as harness:
        await harness(sync.arm, {})
        dead = await harness.rows(name="sync-orders", state="dead")
        assert len(dead) == 1
        assert dead[0].attempts == 2
        assert dead[0].last_error is not None
        assert "warehouse" in dead[0].last_error["message"]
        broken["on"] = False
        armed = await harness(sync.arm, {})
        assert armed.result == {"keys": 1, "started": ["acct_1"]}
        done = await harness.rows(name="sync-orders", state="done")
    assert len(done) == 1
    assert sink.applied == [0, 1, 2, 3]


async def test_an_upstream_throw_takes_the_jobs_retry_and_keeps_the_committed_cursor() -> None:
    sink = Sink()
    opened: list[str | None] = []

    async def flaky(source: ConsumerSource) -> AsyncIterator[int]:
        opened.append(source.cursor)
        start = int(source.cursor or 0)
        for i in range(start, 10):
            if i == 4 and len(opened) == 1:
                raise ConnectionError("the vendor hung up")
            yield i

    sync = _consumer(Upstream(), sink, open=flaky, retry=Retry(attempts=3, delay=10))
    async with job_harness(jobs=[sync]) as harness:
        trace = await harness(sync, {"key": "acct_1"})
    assert trace.state == "done"
    assert trace.attempts == 2
    assert opened == [None, "3"]  # the batch 0..2 committed; item 3 (read, not committed) again
    assert sink.applied == [0, 1, 2, 3, 4, 5, 6, 7, 8, 9]
    assert sink.cursors["acct_1"] == "10"


async def test_a_quiet_stream_commits_its_partial_batch_after_the_linger() -> None:
    up, sink = Upstream(2, follow=True), Sink()
    sync = _consumer(up, sink, batch=100)
    driver = memory_job_driver()
    worker = job_worker(jobs=[sync], driver=driver, handle_signals=False, poll_interval_ms=20)
    with _bound(driver):
        await worker.start()
        try:
            await sync.enqueue({"key": "acct_1"})
            await _until(lambda: len(sink.saves) == 1)
            up.push(1)
            await _until(lambda: len(sink.saves) == 2)
            await worker.drain()
        finally:
            await worker.stop()
    assert sink.batches == [(0, 1), (2,)]
    tick = 0.25  # the worker's default poll interval: generous on a shared machine
    last_items = (up.yielded_at[1], up.yielded_at[2])
    for yielded, (_, _, saved) in zip(last_items, sink.saves, strict=True):
        waited = saved - yielded
        assert CONSUMER_LINGER_MS / 1000 <= waited < CONSUMER_LINGER_MS / 1000 + tick


async def test_a_drain_hands_the_run_back_uncounted_with_the_cursor_on_the_last_batch() -> None:
    up, sink = Upstream(0, follow=True), Sink()
    gate = asyncio.Event()
    in_handle = asyncio.Event()

    async def slow(batch: ConsumerBatch[int]) -> str:
        if batch.items[0] >= 3:  # the second batch: drain arrives while it is in hand
            in_handle.set()
            await gate.wait()
        return await sink.handle(batch)

    sync = _consumer(up, sink, handle=slow)
    driver = memory_job_driver()
    worker = job_worker(jobs=[sync], driver=driver, handle_signals=False, poll_interval_ms=20)
    with _bound(driver):
        await worker.start()
        try:
            queued = await sync.enqueue({"key": "acct_1"})
            up.push(3)
            await _until(lambda: sink.cursors.get("acct_1") == "3")
            up.push(5)  # 3, 4, 5 fill a batch (in hand); 6, 7 are read, not yet committed
            await in_handle.wait()
            draining = asyncio.ensure_future(worker.drain())
            await asyncio.sleep(0.05)
            gate.set()  # the batch in hand finishes within the drain budget: it commits
            await draining
        finally:
            await worker.stop()
    row = await driver.introspect.show(queued.id)
    assert row.state == "ready"
    assert row.attempts == 0  # the attempt is not counted
    assert sink.cursors["acct_1"] == "6"  # the last committed batch, never 6..7's
    assert sink.applied == [0, 1, 2, 3, 4, 5]


async def test_the_drained_key_resumes_from_its_cursor() -> None:
    up, sink = Upstream(0, follow=True), Sink()
    sync = _consumer(up, sink)
    driver = memory_job_driver()
    with _bound(driver):
        first = job_worker(jobs=[sync], driver=driver, handle_signals=False, poll_interval_ms=20)
        await first.start()
        await sync.enqueue({"key": "acct_1"})
        up.push(4)
        await _until(lambda: sink.cursors.get("acct_1") == "4")
        await first.drain()
        await first.stop()
        up.follow = False
        second = job_worker(jobs=[sync], driver=driver, handle_signals=False, poll_interval_ms=20)
        await second.start()
        try:
            rows = await driver.introspect.list(name="sync-orders")
            await _until(
                lambda: _state(driver, rows[0].id, "done"),
            )
        finally:
            await second.stop()
    assert up.opened == [None, "4"]
    assert sink.applied == [0, 1, 2, 3]


async def _state(driver: MemoryJobDriver, job_id: str, state: str) -> bool:
    return bool((await driver.introspect.show(job_id)).state == state)


async def test_handle_and_cursor_save_run_inside_one_transaction_block() -> None:
    events: list[str] = []
    up, sink = Upstream(4), Sink()

    @asynccontextmanager
    async def transaction() -> AsyncIterator[None]:
        events.append("begin")
        try:
            yield
        except BaseException:
            events.append("rollback")
            raise
        events.append("commit")

    async def handle(batch: ConsumerBatch[int]) -> str:
        events.append(f"handle {batch.items}")
        return await sink.handle(batch)

    cursor = sink.cursor()

    def save(key: str, next: str) -> Any:
        events.append(f"save {next}")
        return cursor.save(key, next)

    sync = _consumer(
        up,
        sink,
        handle=handle,
        cursor=ConsumerCursor(load=cursor.load, save=save),
        transaction=transaction,
        batch=2,
    )
    async with job_harness(jobs=[sync]) as harness:
        await harness(sync, {"key": "acct_1"})
    assert events == [
        "begin", "handle (0, 1)", "save 2", "commit",
        "begin", "handle (2, 3)", "save 4", "commit",
    ]  # fmt: skip


async def test_a_save_that_fails_rolls_the_transaction_back_and_retries_the_batch() -> None:
    events: list[str] = []
    up, sink = Upstream(2), Sink()
    fails = {"left": 1}

    @asynccontextmanager
    async def transaction() -> AsyncIterator[None]:
        try:
            yield
        except BaseException:
            events.append("rollback")
            raise
        events.append("commit")

    def save(key: str, next: str) -> None:
        if fails["left"]:
            fails["left"] -= 1
            raise OSError("the cursor table is locked")
        sink.cursors[key] = next

    sync = _consumer(
        up, sink, cursor=ConsumerCursor(load=sink.cursors.get, save=save),
        transaction=transaction, retry=Retry(attempts=2, delay=10),
    )  # fmt: skip
    async with job_harness(jobs=[sync]) as harness:
        trace = await harness(sync, {"key": "acct_1"})
    assert trace.state == "done"
    assert events == ["rollback", "commit"]
    assert sink.applied == [0, 1, 0, 1]  # at least once: the rolled-back batch comes again
    assert sink.cursors == {"acct_1": "2"}


async def test_lag_is_reported_as_progress_with_the_consumer_note() -> None:
    up, sink = Upstream(5), Sink()
    sync = _consumer(up, sink, lag=lambda source: 5 - int(source.cursor or 0))
    async with job_harness(jobs=[sync]) as harness:
        trace = await harness(sync, {"key": "acct_1"})
    assert trace.progress is not None
    assert (trace.progress["done"], trace.progress["total"]) == (5, 5)
    note = json.loads(trace.progress["note"])
    assert note["consumer"]["key"] == "acct_1"
    assert note["consumer"]["lag"] == 0
    assert note["consumer"]["last_batch_at"]


async def test_handle_enqueueing_the_consumer_itself_is_terminal() -> None:
    up, sink = Upstream(3), Sink()
    holder: dict[str, Consumer] = {}

    async def handle(batch: ConsumerBatch[int]) -> str:
        await holder["c"].enqueue({"key": "acct_1"})
        return "x"

    sync = holder["c"] = _consumer(up, sink, handle=handle)
    async with job_harness(jobs=[sync]) as harness:
        trace = await harness(sync, {"key": "acct_1"})
    assert trace.state == "dead"
    assert trace.attempts == 1
    assert trace.last_error is not None
    assert trace.last_error["code"] == "X_CONSUMER_SELF_ENQUEUE"
    assert sink.cursors == {}


async def test_open_enqueueing_the_consumer_itself_is_terminal() -> None:
    sink = Sink()
    holder: dict[str, Consumer] = {}

    async def open_(source: ConsumerSource) -> list[int]:
        await holder["c"].enqueue_many([{"key": "acct_2"}])
        return [1]

    sync = holder["c"] = _consumer(Upstream(), sink, open=open_)
    async with job_harness(jobs=[sync]) as harness:
        trace = await harness(sync, {"key": "acct_1"})
    assert trace.last_error is not None
    assert trace.last_error["code"] == "X_CONSUMER_SELF_ENQUEUE"


async def test_enqueueing_another_consumer_from_handle_is_allowed() -> None:
    up, sink = Upstream(1), Sink()
    other = _consumer(Upstream(), Sink(), name="other")

    async def handle(batch: ConsumerBatch[int]) -> str:
        await other.enqueue({"key": "k"})
        return await sink.handle(batch)

    sync = _consumer(up, sink, handle=handle)
    async with job_harness(jobs=[sync, other]) as harness:
        trace = await harness(sync, {"key": "acct_1"})
    assert trace.state == "done"


async def test_a_sync_open_and_sync_handle_work() -> None:
    got: list[int] = []

    def handle(batch: ConsumerBatch[int]) -> str:
        got.extend(batch.items)
        return str(batch.items[-1])

    sync = _consumer(Upstream(), Sink(), open=lambda source: range(5), handle=handle, batch=2)
    async with job_harness(jobs=[sync]) as harness:
        trace = await harness(sync, {"key": "acct_1"})
    assert trace.state == "done"
    assert got == [0, 1, 2, 3, 4]


_bad_cursor: Any = ConsumerCursor(load=lambda key: 5, save=lambda k, n: None)  # type: ignore[arg-type,return-value]


@pytest.mark.parametrize(
    ("kw", "what"),
    [
        ({"handle": lambda batch: 7}, "handle answered 7"),
        ({"open": lambda source: 42}, "open() answered a int"),
        ({"cursor": _bad_cursor}, "cursor.load"),
    ],
)
async def test_a_callback_answering_the_wrong_thing_fails_the_run_naming_it(
    kw: dict[str, Any], what: str
) -> None:
    sync = _consumer(Upstream(2), Sink(), retry=Retry(attempts=1), **kw)
    async with job_harness(jobs=[sync]) as harness:
        trace = await harness(sync, {"key": "acct_1"})
    assert trace.state == "dead"
    assert trace.last_error is not None
    assert trace.last_error["code"] == "X_INVARIANT"
    assert what in trace.last_error["message"]


async def test_keys_answering_junk_fails_the_arm() -> None:
    sync = _consumer(Upstream(), Sink(), keys=lambda: ["ok", ""])
    async with job_harness(jobs=[sync, sync.arm]) as harness:
        trace = await harness(sync.arm, {})
        assert await harness.rows(name="sync-orders") == []
    assert trace.last_error is not None
    assert trace.last_error["code"] == "X_INVARIANT"


# --- declaration refusals ----------------------------------------------------------------------


class _NoSave:
    def load(self, key: str) -> None:
        return None


@pytest.mark.parametrize(
    ("kw", "cause"),
    [
        ({"name": ""}, "name"),
        ({"name": None}, "name"),
        ({"cursor": _NoSave()}, "cursor has no callable save"),
        ({"cursor": object()}, "cursor has no callable load and save"),
        ({"timeout": "30s"}, "timeout="),
        ({"timeout": None}, "timeout="),
        ({"batch": 0}, "batch 0"),
        ({"batch": 2.5}, "batch 2.5"),
        ({"batch": True}, "batch True"),
        ({"rearm": "7m"}, "rearm '7m'"),
        ({"rearm": "90s"}, "rearm '90s'"),
        ({"rearm": "2h"}, "rearm '2h'"),
        ({"rearm": "soon"}, "rearm 'soon'"),
        ({"keys": ["a"]}, "keys is a list"),
        ({"open": None}, "open is a NoneType"),
        ({"handle": "x"}, "handle is a str"),
        ({"lag": 3}, "lag is a int"),
        ({"transaction": object()}, "transaction is a object"),
    ],
)
def test_an_invalid_declaration_is_refused_naming_the_cause(kw: dict[str, Any], cause: str) -> None:
    with pytest.raises(XError) as caught:
        _consumer(Upstream(), Sink(), **kw)
    assert caught.value.code == "X_CONSUMER_INVALID"
    assert cause in caught.value.message
    assert caught.value.fix


def test_every_cause_is_named_at_once() -> None:
    with pytest.raises(XError) as caught:
        _consumer(Upstream(), Sink(), batch=0, rearm="7m", timeout="1m")
    assert len(caught.value.meta["causes"]) == 3


def test_the_factory_names_are_reachable_lazily_from_ultimat3_jobs() -> None:
    import subprocess
    import sys

    code = (
        "from ultimat3.jobs import consumer, Consumer, ConsumerBatch, ConsumerCursor, "
        "ConsumerSource, CursorStore, CONSUMER_LINGER_MS; print(consumer.__module__, "
        "CONSUMER_LINGER_MS)"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.split() == ["ultimat3.jobs.factories.consumer", "50"]


def test_x_jobs_show_carries_the_consumer_note_in_the_runs_progress(
    capsys: pytest.CaptureFixture[str],
) -> None:
    from ultimat3.jobs.cli import main

    up, sink = Upstream(4), Sink()
    sync = _consumer(up, sink, lag=lambda source: 10 - int(source.cursor or 0))
    harness = job_harness(jobs=[sync])

    async def go() -> str:
        async with harness:
            return (await harness(sync, {"key": "acct_1"})).id

    job_id = asyncio.run(go())
    assert main(["jobs", "show", job_id, "--json"], driver=harness.driver) == 0
    shown = json.loads(capsys.readouterr().out)
    assert (shown["progress"]["done"], shown["progress"]["total"]) == (4, 10)
    note = json.loads(shown["progress"]["note"])["consumer"]
    assert (note["key"], note["lag"]) == ("acct_1", 6)
    # x jobs show lifts it to the top: consumer: {key, last_batch_at, lag}
    assert shown["consumer"] == note
    assert set(shown["consumer"]) == {"key", "last_batch_at", "lag"}
    assert main(["jobs", "show", job_id], driver=harness.driver) == 0
    assert "consumer: key acct_1" in capsys.readouterr().out


async def test_arm_and_each_batch_log_their_named_events() -> None:
    from ultimat3.core import capture_log_events

    up, sink = Upstream(4), Sink()
    sync = _consumer(up, sink, lag=lambda source: "many")
    with capture_log_events() as events:
        async with job_harness(jobs=[sync, sync.arm]) as harness:
            await harness(sync.arm, {})
    by_name = [(e["event"], e["level"]) for e in events if e["event"].startswith("jobs.consumer")]
    assert ("jobs.consumer.armed", "info") in by_name
    assert by_name.count(("jobs.consumer.batch", "debug")) == 2
    assert ("jobs.consumer.lag-invalid", "warning") in by_name
    [armed] = [e for e in events if e["event"] == "jobs.consumer.armed"]
    assert (armed["keys"], armed["started"]) == (1, 1)


def test_retry_and_queue_pass_to_the_job_and_the_arm_shares_the_queue() -> None:
    sync = _consumer(Upstream(), Sink(), retry=Retry(attempts=7), queue="feeds")
    assert (sync.queue, sync.arm.queue, sync.retry.attempts) == ("feeds", "feeds", 7)
    default = _consumer(Upstream(), Sink(), queue=None)
    assert (default.queue, default.arm.queue) == ("default", "default")
