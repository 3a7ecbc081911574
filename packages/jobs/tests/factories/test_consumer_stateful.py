"""A hypothesis state machine over the memory driver: any sequence of items pushed upstream,
failing batches, drains and re-arms leaves the items applied a superset of every committed
cursor's prefix, and every saved cursor a prefix boundary that never moves back."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Coroutine
from typing import Any, TypeVar

from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, rule

from ultimat3.core import swap_adapter
from ultimat3.jobs import Retry, job_worker
from ultimat3.jobs.adapter import JOB_DRIVER, JobState
from ultimat3.jobs.factories.consumer import (
    ConsumerBatch,
    ConsumerCursor,
    ConsumerSource,
    consumer,
)
from ultimat3.jobs.memory import memory_job_driver

R = TypeVar("R")
ATTEMPTS = 3
LIVE: tuple[JobState, ...] = ("ready", "delayed", "running")


class ConsumerMachine(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        self.loop = asyncio.new_event_loop()
        self.driver = memory_job_driver()
        self.upstream: list[int] = []
        self.applied: list[int] = []
        self.saved: list[int] = []
        self.cursors: dict[str, str] = {}
        self.fail_left = 0
        self.follow = False
        self.never = asyncio.Event()
        self.consumer = consumer(
            name="sm",
            tenant="none",
            keys=lambda: ["k"],
            open=self._open,
            handle=self._handle,
            cursor=ConsumerCursor(load=self.cursors.get, save=self._save),
            batch=3,
            retry=Retry(attempts=ATTEMPTS, delay=1, jitter="none"),
        )

    # --- the app's side ------------------------------------------------------------------------

    async def _open(self, source: ConsumerSource) -> AsyncIterator[int]:
        at = int(source.cursor or 0)
        while at < len(self.upstream):
            yield self.upstream[at]
            at += 1
            await asyncio.sleep(0)
        if self.follow:
            await self.never.wait()  # a live stream with nothing new: the linger commits

    async def _handle(self, batch: ConsumerBatch[int]) -> str:
        if self.fail_left:
            self.fail_left -= 1
            self.applied.extend(batch.items[: len(batch.items) // 2])  # a partial effect
            raise RuntimeError("the batch failed halfway")
        self.applied.extend(batch.items)
        return str(batch.items[-1] + 1)

    def _save(self, key: str, next: str) -> None:
        self.cursors[key] = next
        self.saved.append(int(next))

    # --- driving -------------------------------------------------------------------------------

    def _run(self, coro: Coroutine[Any, Any, R]) -> R:
        return self.loop.run_until_complete(asyncio.wait_for(coro, 30))

    async def _live(self) -> bool:
        for state in LIVE:
            if await self.driver.introspect.list(name="sm", state=state):
                return True
            if await self.driver.introspect.list(name="sm.arm", state=state):
                return True
        return False

    async def _with_worker(self, until_drained: bool, target: int) -> None:
        with swap_adapter(JOB_DRIVER, self.driver):
            worker = job_worker(
                jobs=[self.consumer, self.consumer.arm],
                driver=self.driver,
                handle_signals=False,
                poll_interval_ms=5,
                idle_poll_max_ms=20,
            )
            await worker.start()
            try:
                await self.consumer.arm.enqueue({})
                deadline = time.monotonic() + 10
                while time.monotonic() < deadline:
                    await asyncio.sleep(0.005)
                    committed = int(self.cursors.get("k", "0"))
                    if until_drained and committed >= target:
                        break
                    if not await self._live():
                        break
                else:
                    raise AssertionError("the consumer never settled")
                if until_drained:
                    await worker.drain()
            finally:
                await worker.stop()

    @rule(count=st.integers(1, 7))
    def push(self, count: int) -> None:
        start = len(self.upstream)
        self.upstream.extend(range(start, start + count))

    @rule(count=st.integers(1, ATTEMPTS + 1))
    def fail_next_batches(self, count: int) -> None:
        self.fail_left = count

    @rule()
    def arm_and_run_to_the_end(self) -> None:
        self.follow = False
        self._run(self._with_worker(until_drained=False, target=0))
        latest = self._run(self.driver.introspect.list(name="sm", limit=1))
        if latest and latest[0].state == "done" and self.upstream:
            # a run that ended (not dead: its attempts may have gone in earlier drains' failures)
            # read the stream to its end and committed every item
            assert self.cursors.get("k") == str(len(self.upstream))
            assert set(self.applied) == set(self.upstream)

    @rule(share=st.floats(0, 1))
    def arm_then_drain(self, share: float) -> None:
        self.follow = True
        committed = int(self.cursors.get("k", "0"))
        target = committed + int((len(self.upstream) - committed) * share)
        self._run(self._with_worker(until_drained=True, target=target))

    # --- what always holds -----------------------------------------------------------------------

    @invariant()
    def applied_covers_every_committed_prefix(self) -> None:
        applied = set(self.applied)
        for cursor in self.saved:
            assert set(range(cursor)) <= applied

    @invariant()
    def the_saved_cursor_is_a_prefix_boundary_that_never_moves_back(self) -> None:
        assert self.saved == sorted(self.saved)
        for cursor in self.saved:
            assert 0 < cursor <= len(self.upstream)
        assert set(self.applied) <= set(self.upstream)

    def teardown(self) -> None:
        self.never.set()
        self.loop.run_until_complete(asyncio.sleep(0))
        self.loop.close()


ConsumerMachine.TestCase.settings = settings(max_examples=40, stateful_step_count=10, deadline=None)
TestConsumerMachine = ConsumerMachine.TestCase
