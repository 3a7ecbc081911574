"""``RedisJobDriver.import_jobs`` (the target of ``x jobs drain``): rows go in with their state,
attempts, times and steps in one script run; an id already present or a key a live job holds adds
nothing; rows a drain may not move are refused before anything is written."""

from __future__ import annotations

from typing import Any

import pytest

from ultimat3.core import XError, new_id
from ultimat3.jobs.adapter import MovedJob
from ultimat3.jobs_redis import RedisJobDriver


def moved(n: int, **over: Any) -> MovedJob:
    job: dict[str, Any] = {
        "id": new_id(),
        "run_id": new_id(),
        "name": "imp",
        "queue": "q",
        "state": "ready",
        "payload": f'{{"n":{n}}}',
        "idempotency_key": f"k{n}",
        "tenant_id": None,
        "concurrency_key": None,
        "attempts": 0,
        "max_attempts": 3,
        "run_at": 1_700_000_000_000,
        "created_at": 1_700_000_000_000 + n,
        "last_error": None,
        "progress": None,
        "trace_context": None,
        "steps": [],
    }
    job.update(over)
    return job  # type: ignore[return-value]


async def test_rows_go_in_with_their_steps_and_dedupe_on_id_and_live_key(
    driver: RedisJobDriver,
) -> None:
    steps = [
        ["a", "completed", 1, '"out"', None, 1_700_000_000_500],
        ["b", "failed", 1, None, '{"code":"X_BOOM"}', 1_700_000_000_600],
    ]
    retried = moved(1, attempts=1, last_error='{"code":"X_BOOM"}', steps=steps)
    later = moved(2, state="delayed", run_at=4_000_000_000_000)
    answers = await driver.import_jobs([retried, later])
    assert [(a.outcome, a.holder) for a in answers] == [
        ("moved", retried["id"]),
        ("moved", later["id"]),
    ]
    row = await driver.introspect.show(retried["id"])
    assert (row.state, row.attempts, row.payload, row.last_error) == (
        "ready",
        1,
        {"n": 1},
        {"code": "X_BOOM"},
    )
    assert list(row.steps) == ["a", "b"]
    assert (row.steps["a"].output, row.steps["b"].error) == ("out", {"code": "X_BOOM"})
    assert (await driver.introspect.show(later["id"])).state == "delayed"
    # The same batch again: present. Another row with a live key: deduped onto the holder.
    again = await driver.import_jobs([retried, moved(1)])
    assert [(a.outcome, a.holder) for a in again] == [
        ("present", retried["id"]),
        ("deduped", retried["id"]),
    ]
    stats = await driver.stats()
    assert (stats[0].ready, stats[0].delayed) == (1, 1)
    claimed = await driver.claim(queues=["q"], limit=5, worker_id="w", visibility_timeout_ms=1000)
    assert [c.id for c in claimed] == [retried["id"]] and claimed[0].attempt == 2


@pytest.mark.parametrize(
    ("over", "said"),
    [
        ({"state": "running"}, "'running' row cannot be moved"),
        ({"state": "suspended"}, "'suspended' row cannot be moved"),
        ({"id": ""}, "id is empty"),
        ({"attempts": "1"}, "attempts '1' is not a whole number"),
    ],
)
async def test_rows_a_drain_may_not_move_are_refused_before_any_write(
    driver: RedisJobDriver, over: dict[str, Any], said: str
) -> None:
    with pytest.raises(XError) as caught:
        await driver.import_jobs([moved(1), moved(2, **over)])
    assert caught.value.code == "X_INVARIANT" and said in caught.value.message
    assert caught.value.fix
    assert await driver.stats() == []


async def test_more_than_a_batch_is_refused(driver: RedisJobDriver) -> None:
    with pytest.raises(XError) as caught:
        await driver.import_jobs([moved(n) for n in range(1001)])
    assert caught.value.code == "X_JOB_ENQUEUE_BATCH_TOO_LARGE" and "1001" in caught.value.message
    assert await driver.stats() == []
