"""The script runner. Over the driver's own lean connection (a URL): every call goes at once,
concurrent calls pipeline on the one connection and are written together, each its own atomic
script with its own answer or refusal. Over a ``redis.asyncio.Redis`` passed in: a lone call goes
at once, calls made while one is on its way share the next round trip. Either way a caller
cancelled mid-batch takes nobody else down, and a server that forgot the scripts gets them again."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any

import pytest
from redis.asyncio import Redis

from ultimat3.core import XError
from ultimat3.jobs.adapter import EnqueueRequest
from ultimat3.jobs_redis import RedisJobDriver, redis_job_driver

Req = Callable[..., EnqueueRequest]


async def _thirty_settles_and_a_load(driver: RedisJobDriver, req: Req) -> tuple[Any, Any]:
    """30 claimed jobs, the first with a recorded step; answers (jobs, the calls to gather)."""
    await driver.enqueue_many([req() for _ in range(30)])
    jobs = await driver.claim(
        queues=["default"], limit=30, worker_id="w", visibility_timeout_ms=60_000
    )
    # a step recorded, so its load goes to Redis (a step-less job's load answers without one)
    assert await driver.steps.record(jobs[0].id, "a", state="completed", worker_id="w",
                                     claim=jobs[0].claim)  # fmt: skip
    assert list(await driver.steps.load(jobs[0].id)) == ["a"]  # the server knows every script
    return jobs, lambda: asyncio.gather(
        *(driver.ack(j.id, worker_id="w", claim=j.claim) for j in jobs[:20]),
        *(driver.ack(j.id, worker_id="w", claim="stale") for j in jobs[20:]),
        driver.steps.load(jobs[0].id),
    )


async def _check(driver: RedisJobDriver, answers: list[Any]) -> None:
    assert answers[:20] == [True] * 20
    assert answers[20:30] == [False] * 10
    assert list(answers[30]) == ["a"]
    assert (await driver.stats())[0].done == 20


async def test_lean_calls_made_together_are_written_together_each_answered_on_its_own(
    driver: RedisJobDriver, req: Req
) -> None:
    _, together = await _thirty_settles_and_a_load(driver, req)
    fast = driver._r._fast
    assert fast is not None and fast._link is not None
    transport: Any = fast._link._transport
    writes: list[int] = []
    original = transport.write

    def counting(data: bytes) -> None:
        writes.append(data.count(b"EVALSHA"))
        original(data)

    transport.write = counting
    await _check(driver, await together())
    # the first went alone at once, the other 30 in one write at the loop's next turn
    assert writes[:2] == [1, 30]


async def test_client_calls_made_together_share_one_round_trip_each_answered_on_its_own(
    client_driver: RedisJobDriver, req: Req, monkeypatch: pytest.MonkeyPatch
) -> None:
    driver = client_driver
    _, together = await _thirty_settles_and_a_load(driver, req)
    sent: list[int] = []
    runner = driver._r
    original = runner._pipeline

    async def counting(batch: list[Any]) -> list[Any]:
        sent.append(len(batch))
        return await original(batch)

    monkeypatch.setattr(runner, "_pipeline", counting)
    await _check(driver, await together())
    assert sent[:2] == [1, 30]  # the first went at once, the rest gathered behind it


async def test_one_refused_call_in_a_batch_leaves_the_others_answered(
    either: RedisJobDriver, req: Req
) -> None:
    driver = either
    queued = await driver.enqueue(req())
    # bound first: mypy cannot type an unpacking straight from this gather overload
    replies = await asyncio.gather(
        driver.introspect.show(queued.id),
        driver._r.run("enqueue_many", "not-a-count", op="a broken call"),
        return_exceptions=True,
    )
    good, bad = replies
    assert not isinstance(good, BaseException) and good.id == queued.id
    assert isinstance(bad, XError) and bad.code == "X_INVARIANT"
    assert "a broken call" in bad.message and bad.__cause__ is not None


@pytest.mark.parametrize("how", ["url", "client"])
async def test_a_server_that_forgot_the_scripts_gets_them_again(
    redis_server: Any, req: Req, how: str
) -> None:
    """SCRIPT FLUSH (what a restart does to the script cache) on a server of the test's own."""
    passed = Redis.from_url(redis_server.url) if how == "client" else None
    driver = redis_job_driver(passed or redis_server.url)
    try:
        await driver.enqueue(req())
        await driver.client.script_flush()
        alone = await driver.enqueue(req())
        await driver.client.script_flush()
        together = await asyncio.gather(*(driver.enqueue(req()) for _ in range(5)), driver.stats())
        stats = together[-1]
        assert isinstance(stats, list)  # the stats() reply (a list of object, to mypy)
        assert not alone.deduped
        assert stats[0].ready == 7
    finally:
        await driver.close()
        if passed is not None:
            await passed.aclose()


async def test_a_cancelled_caller_takes_no_other_call_down(
    either: RedisJobDriver, req: Req
) -> None:
    driver = either
    results = await driver.enqueue_many([req() for _ in range(10)])
    shows = [asyncio.ensure_future(driver.introspect.show(r.id)) for r in results]
    await asyncio.sleep(0)  # the first is on its way, the other nine gathered behind it
    shows[4].cancel()
    answers = await asyncio.gather(*shows, return_exceptions=True)
    assert isinstance(answers[4], asyncio.CancelledError)
    kept = answers[:4] + answers[5:]
    assert [row.id for row in kept] == [r.id for r in results[:4] + results[5:]]  # type: ignore[union-attr]


async def test_an_argument_that_cannot_be_sent_is_refused_naming_the_operation(
    driver: RedisJobDriver,
) -> None:
    with pytest.raises(XError) as caught:
        await driver._r.run("now", None, op="read the clock")  # type: ignore[arg-type]
    assert caught.value.code == "X_INVARIANT"
    assert "'read the clock'" in caught.value.message and caught.value.fix
