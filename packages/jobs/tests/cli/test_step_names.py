"""The static reading of step names behind ``x verify``: which literal names are duplicates, and
which shapes (branches, early returns, loops, comprehensions, nested functions) are read how."""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel

from ultimat3.jobs import job
from ultimat3.jobs.cli._step_names import duplicate_steps


class In(BaseModel):
    n: int


def _job(body: Any) -> Any:
    return job(name=body.__name__, input=In, idempotency_key=lambda i: str(i.n), run=body)


def _dupes(body: Any) -> list[str]:
    return sorted(e.meta["step"] for e in duplicate_steps(_job(body)))


async def _nothing(signal: Any) -> None:
    return None


async def straight(i: In, step: Any, ctx: Any) -> None:
    await step.run("a", _nothing)
    await step.run("b", _nothing)
    await step.transaction("a", _nothing)


async def branches(i: In, step: Any, ctx: Any) -> None:
    if i.n:
        await step.run("a", _nothing)
    elif i.n > 3:
        await step.run("a", _nothing, once=True)
    else:
        await step.run("a", _nothing)
    try:
        await step.run("t", _nothing)
    except ValueError:
        await step.run("t", _nothing)
    match i.n:
        case 1:
            await step.run("m", _nothing)
        case _:
            await step.run("m", _nothing)


async def early_return(i: In, flow: Any, ctx: Any) -> None:  # the step parameter's own name
    if i.n:
        await flow.run("a", _nothing)
        return
    await flow.run("a", _nothing)
    await flow.run("z", _nothing)
    await flow.run("z", _nothing)


async def loops(i: In, step: Any, ctx: Any) -> None:
    for _ in range(2):
        await step.run("each", _nothing)
    while i.n < 0:
        await step.wait_for_event("wait", "topic")
    _ = [await step.run("comp", _nothing) for _ in range(2)]
    for n in range(2):
        await step.run(f"ok:{n}", _nothing)


async def nested(i: In, step: Any, ctx: Any) -> None:
    async def helper() -> None:
        await step.run("h", _nothing)
        await step.run("h", _nothing)

    await helper()


def sync_body(i: In, step: Any, ctx: Any) -> None:
    step.run("s", _nothing)
    step.run("s", _nothing)


def test_two_literal_names_in_one_path_are_duplicates() -> None:
    assert _dupes(straight) == ["a"]
    [err] = duplicate_steps(_job(straight))
    assert err.code == "X_STEP_DUPLICATE"
    assert "job 'straight': step 'a' is named twice (lines" in err.message
    assert err.fix and err.meta["file"].endswith("test_step_names.py")


def test_names_in_exclusive_branches_or_after_an_early_return_are_not() -> None:
    assert _dupes(branches) == []
    assert _dupes(early_return) == ["z"]


def test_a_literal_name_in_a_loop_or_a_comprehension_is_a_duplicate_of_itself() -> None:
    assert _dupes(loops) == ["comp", "each", "wait"]


def test_nested_functions_are_left_to_the_run_and_sync_bodies_are_read() -> None:
    assert _dupes(nested) == []
    assert _dupes(sync_body) == ["s"]


def test_a_lambda_body_or_one_without_source_is_skipped() -> None:
    lam = job(name="lam", input=In, idempotency_key=lambda i: "k",
              run=lambda i, step, ctx: step.run("a", _nothing))  # fmt: skip
    assert duplicate_steps(lam) == []
    made = eval("lambda i, step, ctx: None")  # no source file to read
    assert duplicate_steps(job(name="ev", input=In, idempotency_key=lambda i: "k", run=made)) == []
