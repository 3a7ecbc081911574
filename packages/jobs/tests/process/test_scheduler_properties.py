"""The scheduler's safety under any interleaving (hypothesis, memory driver, FrozenClock): two
scheduler processes that die and restart, pauses and resumes, time jumps. Whatever happens, no
occurrence fires twice, none fires while its task is paused, each task's fires only move
forward, the recorded watermark is the last occurrence that queued jobs — and once a leader runs,
every occurrence fires on time."""

from __future__ import annotations

import uuid
from collections import Counter
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st
from pydantic import BaseModel

from ultimat3.core import FrozenClock
from ultimat3.jobs import CatchUp, Task, TaskScheduler, job, job_cursor, task, task_scheduler
from ultimat3.jobs._declare.cron import occurrences
from ultimat3.jobs.memory import MemoryJobDriver, memory_job_driver


class Fire(BaseModel):
    task: str
    at: int
    nonce: str


@job(input=Fire, idempotency_key=lambda i: f"{i.task}:{i.at}:{i.nonce}")
async def fired(input: Fire, step: Any, ctx: Any) -> None:
    return None


def _task(name: str, cron: str, catch_up: CatchUp) -> Task:
    # a fresh nonce per build: a second fire of one occurrence shows as a second row
    return task(
        name=name,
        cron=cron,
        catch_up=catch_up,
        enqueue=lambda at: (
            fired,
            {"task": name, "at": at.occurrence_ms, "nonce": uuid.uuid4().hex},
        ),
    )


def _occurrences(t: Task, after: int, until: int) -> list[int]:
    out: list[int] = []
    for instant in occurrences(t.cron, t.zone, after):
        if instant > until:
            return out
        out.append(instant)
    return out


async def _all_rows(driver: MemoryJobDriver) -> list[Any]:
    rows: list[Any] = []
    page = await driver.introspect.list(limit=200)
    while page:
        rows.extend(page)
        page = await driver.introspect.list(limit=200, after=job_cursor(page[-1]))
    return rows


class Recording:
    """The memory driver, with every successful fire recorded against the paused set."""

    def __init__(self, inner: MemoryJobDriver) -> None:
        self.inner = inner
        self.name = inner.name
        self.leases = inner.leases
        self.introspect = inner.introspect
        self.fires: list[tuple[str, int, bool]] = []

    async def now_ms(self) -> int:
        return await self.inner.now_ms()

    async def fire_task(self, task: str, occurrence_ms: int, requests: Any) -> bool:
        paused = task in await self.inner.introspect.paused_tasks()
        ok = await self.inner.fire_task(task, occurrence_ms, requests)
        if ok:
            self.fires.append((task, occurrence_ms, paused))
        return ok


ACTIONS = st.lists(
    st.one_of(
        st.tuples(st.just("run"), st.integers(min_value=1, max_value=400)),
        st.tuples(st.just("jump"), st.integers(min_value=60, max_value=7200)),
        st.tuples(st.sampled_from(["pause", "resume"]), st.sampled_from(["a", "b"])),
        st.tuples(st.just("kill"), st.integers(min_value=0, max_value=1)),
    ),
    max_size=25,
)


@settings(max_examples=40, deadline=None)
@given(
    ACTIONS,
    st.sampled_from(["none", "latest", "all"]),
    st.sampled_from(["* * * * *", "*/7 * * * *", "0 * * * *"]),
)
async def test_no_occurrence_fires_twice_or_while_paused_whatever_happens(
    actions: list[tuple[str, Any]], catch_up: CatchUp, cron: str
) -> None:
    clock = FrozenClock("2026-06-01T11:58:10Z")
    inner = memory_job_driver(clock=clock)
    driver = Recording(inner)
    tasks = [_task("a", cron, catch_up), _task("b", "*/2 * * * *", "all")]

    def spawn() -> TaskScheduler:
        return task_scheduler(purge=False, tasks=tasks, driver=driver, clock=clock)  # type: ignore[arg-type]

    schedulers = [spawn(), spawn()]
    for action, arg in actions:
        if action == "run":
            for _ in range(arg):
                clock.advance("1s")
                for s in schedulers:
                    await s.tick()
                assert sum(s.leading for s in schedulers) <= 1
        elif action == "jump":  # every process down for a while
            clock.advance(f"{arg}s")
        elif action == "pause":
            await inner.introspect.pause_task(arg)
        elif action == "resume":
            await inner.introspect.resume_task(arg)
        else:  # the process dies without a word and a fresh one starts in its place
            schedulers[arg] = spawn()
    # and then, resumed and left running: once a leader holds the lease (a dead one's lapses
    # within 30 s), every occurrence fires on time, whatever catch_up says
    for name in ("a", "b"):
        await inner.introspect.resume_task(name)
    for _ in range(31):
        clock.advance("1s")
        for s in schedulers:
            await s.tick()
    since = clock.now_ms()
    for _ in range(3600):  # an hour: at least one occurrence of every cron above
        clock.advance("1s")
        for s in schedulers:
            await s.tick()
    fires = {(n, o) for n, o, _ in driver.fires}
    for t in tasks:
        due = _occurrences(t, since, clock.now_ms() - 2_000)
        assert due
        assert all((t.name, o) in fires for o in due), (t.name, due)
    rows = await _all_rows(inner)
    per_occurrence = Counter((r.payload["task"], r.payload["at"]) for r in rows)
    assert all(n == 1 for n in per_occurrence.values()), per_occurrence.most_common(2)
    assert all(not paused for _, _, paused in driver.fires), "fired while paused"
    for name in ("a", "b"):
        mine = [occ for t, occ, _ in driver.fires if t == name]
        assert mine == sorted(set(mine)), "fires only move forward"
    watermarks = {f.task: f.occurrence_ms for f in await inner.introspect.task_fires()}
    for name in ("a", "b"):
        mine = [occ for t, occ, _ in driver.fires if t == name]
        assert watermarks.get(name) == (max(mine) if mine else None)
    assert sorted(per_occurrence) == sorted((t, occ) for t, occ, _ in driver.fires)
