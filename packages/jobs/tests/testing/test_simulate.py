"""simulate_jobs: seeded interleavings of several workers on one memory driver — a lost update
found and reproduced from its seed, the same race closed by a keyed concurrency cap, the same
seed giving the same trace, crashes and stalls under faults=True, and the refusals."""

from __future__ import annotations

from typing import Any

import pytest
from pydantic import BaseModel

from ultimat3.core import XError
from ultimat3.jobs import Concurrency, Job, Retry, job
from ultimat3.jobs.testing import SimState, simulate_jobs
from ultimat3.jobs.testing import _simulate as simulate_module


class Deposit(BaseModel):
    account: str
    amount: int
    n: int


def bank(capped: bool, *, atomic: bool = False) -> tuple[Job[Any, Any], dict[str, int]]:
    """A deposit that reads the balance in one step and writes it in the next: two of them
    interleaved lose an update, unless one account runs one deposit at a time. ``atomic``: the
    read and the write in ONE step."""
    balances: dict[str, int] = {}

    async def deposit(input: Deposit, step: Any, ctx: Any) -> None:
        if atomic:

            def apply(signal: Any) -> None:
                balances[input.account] = balances.get(input.account, 0) + input.amount

            await step.run("apply", apply)
            return
        seen = await step.run("read", lambda s: balances.get(input.account, 0))
        assert isinstance(seen, int)

        def write(signal: Any) -> None:
            balances[input.account] = seen + input.amount

        await step.run("write", write)

    declared: Job[Any, Any] = job(
        input=Deposit,
        idempotency_key=lambda d: f"deposit:{d.n}",
        name="deposit",
        concurrency=Concurrency(key=lambda d: d.account, limit=1) if capped else None,
        retry=Retry(attempts=10, delay=0),
        run=deposit,
    )
    return declared, balances


def deposits(j: Job[Any, Any]) -> list[tuple[Job[Any, Any], Any]]:
    return [(j, {"account": "acme", "amount": 10 * (n + 1), "n": n}) for n in range(3)]


def books_balance(balances: dict[str, int]) -> Any:
    def invariant(state: SimState) -> bool:
        if not state.final:
            return True
        return balances.get("acme") == 60

    return invariant


async def test_a_lost_update_is_found_and_its_seed_reproduces_it() -> None:
    failures: list[XError] = []
    for seed in range(30):
        j, balances = bank(capped=False)
        try:
            await simulate_jobs(
                jobs=[j], inputs=deposits(j), invariant=books_balance(balances), seed=seed
            )
        except XError as exc:
            failures.append(exc)
    assert failures, "30 seeds never interleaved two read/write pairs"
    first = failures[0]
    assert first.code == "X_INVARIANT"
    seed = first.meta["seed"]
    assert f"seed={seed}" in first.message  # the failing seed is printed
    assert f"seed={seed}" in (first.fix or "")

    j, balances = bank(capped=False)
    with pytest.raises(XError) as again:
        await simulate_jobs(
            jobs=[j], inputs=deposits(j), invariant=books_balance(balances), seed=seed
        )
    assert again.value.meta["trace"] == first.meta["trace"]  # reproduced, move for move


async def test_a_keyed_cap_closes_the_race_for_every_seed() -> None:
    for seed in range(30):
        j, balances = bank(capped=True)

        def invariant(state: SimState, balances: dict[str, int] = balances) -> bool:
            inside = [r for r in state.running if r.in_body and r.job == "deposit"]
            assert len(inside) <= 1, f"two deposits in their bodies at once: {inside}"
            return not state.final or balances.get("acme") == 60

        report = await simulate_jobs(jobs=[j], inputs=deposits(j), invariant=invariant, seed=seed)
        assert report.settled
        assert [r.state for r in report.rows] == ["done"] * 3


async def test_the_same_seed_gives_the_same_trace_and_another_seed_another() -> None:
    traces = []
    for seed in (7, 7, 8):
        j, _ = bank(capped=True)
        report = await simulate_jobs(jobs=[j], enqueue=deposits(j), seed=seed)
        traces.append(report.trace)
        assert report.settled and report.moves == len(report.trace)
    assert traces[0] == traces[1]
    assert traces[0] != traces[2]
    assert any(line.startswith("enqueue deposit#") for line in traces[0])
    assert any(" -> at write" in line for line in traces[0])


async def test_under_crashes_and_stalls_every_step_function_returns_once_per_run() -> None:
    settled = 0
    for seed in range(15):
        j, balances = bank(capped=True, atomic=True)

        def once_each(state: SimState) -> bool:
            twice = {k: n for k, n in state.calls.items() if n > 1}
            assert not twice, f"a step function ran twice: {twice}"
            return True

        report = await simulate_jobs(
            jobs=[j],
            inputs=deposits(j),
            invariant=once_each,
            seed=seed,
            faults=True,
            fault_rate=0.2,
        )
        assert report.settled
        assert all(r.state == "done" for r in report.rows)
        assert balances["acme"] == 60
        settled += any(line.startswith(("crash", "stall")) for line in report.trace)
    assert settled >= 5  # the faults really happened


async def test_an_invariant_that_raises_is_reported_with_the_seed() -> None:
    j, _ = bank(capped=True)

    def never(state: SimState) -> bool:
        raise AssertionError("no moves allowed")

    with pytest.raises(XError) as exc:
        await simulate_jobs(jobs=[j], inputs=deposits(j), invariant=never, seed=3)
    assert exc.value.code == "X_INVARIANT"
    assert "seed=3" in exc.value.message and "no moves allowed" in exc.value.message
    assert exc.value.meta["move"] == 1


async def test_a_body_waiting_outside_the_simulation_is_named(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    import asyncio

    monkeypatch.setattr(simulate_module, "PARK_TIMEOUT_S", 0.05)
    forever = asyncio.Event()

    @job(input=Deposit, idempotency_key=lambda d: str(d.n), name="stuck")
    async def stuck(input: Deposit, step: Any, ctx: Any) -> None:
        await forever.wait()

    with pytest.raises(XError) as exc:
        await simulate_jobs(jobs=[stuck], inputs=[(stuck, {"account": "a", "amount": 1, "n": 1})])
    assert exc.value.code == "X_INVARIANT"
    assert "stuck#0" in exc.value.message and exc.value.fix


async def test_nonsense_sizes_are_refused() -> None:
    j, _ = bank(capped=True)
    with pytest.raises(XError) as exc:
        await simulate_jobs(jobs=[j], workers=0)
    assert exc.value.code == "X_INVARIANT" and "workers" in exc.value.message


async def test_a_read_and_its_write_in_two_steps_lose_an_update_across_a_crash() -> None:
    """Even under a cap of one: the crashed run keeps its stored read, its slot lapses, another
    deposit gets in first, and the replay writes the stale balance. Read-modify-write belongs in
    ONE step (or in one statement)."""
    lost = []
    for seed in range(40):
        j, balances = bank(capped=True)
        report = await simulate_jobs(
            jobs=[j], inputs=deposits(j), seed=seed, faults=True, fault_rate=0.2
        )
        if report.settled and balances["acme"] != 60:
            lost.append(seed)
    assert lost
