"""The ``job_harness`` pytest fixture, registered through the ``pytest11`` entry point of
ultimat3-jobs (installed with ``pip install "ultimat3-jobs[testing]"``, which brings pytest; the
async tests themselves run on pytest-asyncio, ``asyncio_mode = "auto"``).

    async def test_welcome(job_harness):
        h = job_harness(jobs=[send_welcome])
        await send_welcome.enqueue({"user_id": "u1"})   # the harness's driver is ambient
        trace = await h.drain()
        assert trace.state == "done"

The fixture is a factory: ``job_harness(jobs=[...], **JobHarness options)`` answers a
``JobHarness`` whose frozen clock, memory driver and event bus are ambient for the rest of the
test (so the app's own ``job.enqueue`` and ``transaction()`` calls reach it), and unbound after.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator, Sequence
from typing import Any, Protocol

import pytest

from ultimat3.jobs._declare.job import Job
from ultimat3.jobs.testing._harness import JobHarness


class HarnessFactory(Protocol):
    """What the ``job_harness`` fixture is: ``job_harness(jobs=[...], clock=..., seed=...)``."""

    def __call__(self, *, jobs: Sequence[Job[Any, Any]], **options: Any) -> JobHarness: ...


@pytest.fixture
def job_harness() -> Iterator[HarnessFactory]:
    """A factory of bound ``JobHarness`` values (see the module's docstring)."""
    stacks: list[contextlib.ExitStack] = []

    def make(*, jobs: Sequence[Job[Any, Any]], **options: Any) -> JobHarness:
        harness = JobHarness(jobs=jobs, **options)
        stack = contextlib.ExitStack()
        stack.enter_context(harness.bound())
        stacks.append(stack)
        return harness

    yield make
    for stack in reversed(stacks):
        # a binding made inside an async test lives in that test's task context, which is gone:
        # resetting it there raises ValueError, and there is nothing left to reset
        with contextlib.suppress(ValueError):
            stack.close()
