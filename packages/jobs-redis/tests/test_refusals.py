"""Every refusal of the Redis driver that the conformance suite does not already exercise: an
``XError`` with the spec's code, naming the offending thing, and nothing written."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from datetime import datetime
from typing import Any

import pytest

from ultimat3.core import XError
from ultimat3.jobs_redis import RedisJobDriver

D = RedisJobDriver
REFUSALS: dict[str, tuple[Callable[[D], Awaitable[Any]], str, str]] = {
    "step state": (
        lambda d: d.steps.record("j1", "s", state="done", worker_id="w", claim="c"),  # type: ignore[arg-type]
        "X_INVARIANT",
        "'done' is not a step state",
    ),
    "step name": (
        lambda d: d.steps.record("j1", "", state="started", worker_id="w", claim="c"),
        "X_INVARIANT",
        "step name is empty",
    ),
    "heartbeat timeout": (
        lambda d: d.heartbeat("j1", worker_id="w", claim="c", visibility_timeout_ms=-5),
        "X_INVARIANT",
        "visibility_timeout_ms -5",
    ),
    "worker id": (
        lambda d: d.register_worker("", host="h", queues=[], slots=None, visibility_timeout_ms=1),
        "X_INVARIANT",
        "register_worker: the id is empty",
    ),
    "worker timeout": (
        lambda d: d.register_worker("w", host="h", queues=[], slots=None, visibility_timeout_ms=0),
        "X_INVARIANT",
        "visibility_timeout_ms 0",
    ),
    "task name": (lambda d: d.fire_task("", 1, []), "X_INVARIANT", "task name is empty"),
    "task occurrence": (
        lambda d: d.fire_task("nightly", "soon", []),  # type: ignore[arg-type]
        "X_INVARIANT",
        "'soon'",
    ),
    "purge dead threshold": (
        lambda d: d.purge(dead_older_than_ms=1.5),  # type: ignore[arg-type]
        "X_INVARIANT",
        "dead_older_than_ms 1.5",
    ),
    "lease key": (
        lambda d: d.leases.acquire("", limit=1, holder="h", ttl_ms=10),
        "X_INVARIANT",
        "key and holder must be non-empty",
    ),
    "lease limit": (
        lambda d: d.leases.acquire("k", limit=0, holder="h", ttl_ms=10),
        "X_INVARIANT",
        "limit 0",
    ),
    "lease ttl": (
        lambda d: d.leases.renew("k", 0, holder="h", ttl_ms=0),
        "X_INVARIANT",
        "ttl_ms 0",
    ),
    "lease slot": (
        lambda d: d.leases.release("k", -1, holder="h"),
        "X_INVARIANT",
        "slot -1",
    ),
    "backfill name": (
        lambda d: d.backfills.begin("", job_id=None, cursor=None),
        "X_INVARIANT",
        "the name is empty",
    ),
    "backfill rows": (
        lambda d: d.backfills.advance("b1", rows=-1, cursor=None),
        "X_INVARIANT",
        "rows -1",
    ),
    "backfill unknown": (
        lambda d: d.backfills.advance("b-unknown", rows=1, cursor=None),
        "X_INVARIANT",
        "b-unknown was never begun",
    ),
    "backfill finish state": (
        lambda d: d.backfills.finish("b1", state="running"),
        "X_INVARIANT",
        "'running'",
    ),
    "backfill page": (lambda d: d.backfills.list(limit=201), "X_JOB_PAGE_INVALID", "201"),
    "list naive time": (
        lambda d: d.introspect.list(created_from=datetime(2026, 1, 1)),
        "X_INVARIANT",
        "created_from",
    ),
    "list state": (
        lambda d: d.introspect.list(state="lost"),  # type: ignore[arg-type]
        "X_INVARIANT",
        "'lost' is not a job state",
    ),
    "remove running": (
        lambda d: d.introspect.remove_many(state="running"),
        "X_JOB_NOT_REMOVABLE",
        "'running'",
    ),
    "requeue live": (
        lambda d: d.introspect.requeue_many(state="ready"),
        "X_JOB_NOT_REQUEUEABLE",
        "'ready'",
    ),
    "promote state": (
        lambda d: d.introspect.promote_many(state="done"),
        "X_INVARIANT",
        "'done'",
    ),
    "pause name": (lambda d: d.introspect.pause_queue(""), "X_INVARIANT", "queue name"),
    "pause task name": (lambda d: d.introspect.pause_task(""), "X_INVARIANT", "task name"),
    "counters since": (
        lambda d: d.introspect.counters(since_ms="1h"),  # type: ignore[arg-type]
        "X_INVARIANT",
        "since_ms '1h'",
    ),
    "show unknown": (
        lambda d: d.introspect.show("0190b5a2-0000-7000-8000-00000000dead"),
        "X_JOB_NOT_FOUND",
        "'0190b5a2-0000-7000-8000-00000000dead'",
    ),
    "cancel unknown": (
        lambda d: d.introspect.cancel("0190b5a2-0000-7000-8000-00000000dead"),
        "X_JOB_NOT_FOUND",
        "0190b5a2-0000-7000-8000-00000000dead",
    ),
    "resolve unknown": (
        lambda d: d.introspect.resolve_step(
            "0190b5a2-0000-7000-8000-00000000dead", "s", ran=True, output=object()
        ),
        "X_JOB_NOT_FOUND",
        "0190b5a2-0000-7000-8000-00000000dead",
    ),
}


@pytest.mark.parametrize("case", sorted(REFUSALS))
async def test_a_refusal_names_the_offending_thing_and_writes_nothing(
    driver: RedisJobDriver, case: str
) -> None:
    if case == "backfill finish state":
        await driver.backfills.begin("pass", job_id=None, cursor=None)
    call, code, needle = REFUSALS[case]
    # SCAN may answer a key more than once: compare the sets of keys
    before = {k async for k in driver.client.scan_iter(match="{" + driver.prefix + "}:*")}
    with pytest.raises(XError) as caught:
        await call(driver)
    assert caught.value.code == code, caught.value
    assert needle in caught.value.message, caught.value.message
    after = {k async for k in driver.client.scan_iter(match="{" + driver.prefix + "}:*")}
    assert after == before
