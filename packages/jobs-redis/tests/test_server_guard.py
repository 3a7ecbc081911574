"""The server guard (#23): a Redis that lost its data under a running driver is detected
(``jobs.redis.reset`` at ERROR, counted), and a server that may evict keys is refused at a
worker's start unless ``allow_eviction=True``. Each on a redis-server of the test's own."""

from __future__ import annotations

import shutil
from typing import Any

import pytest
from redis import Redis as SyncRedis

from ultimat3.core import XError, capture_log_events, swap_adapter
from ultimat3.jobs import job, job_worker
from ultimat3.jobs.adapter import JOB_DRIVER
from ultimat3.jobs_redis import redis_job_driver


async def _register(driver: object) -> None:
    await driver.register_worker(  # type: ignore[attr-defined]
        "w-1", host="h", queues=["default"], slots=1, visibility_timeout_ms=5_000
    )


async def test_a_flushed_server_is_detected_logged_at_error_and_counted(
    redis_server: Any,
) -> None:
    driver = redis_job_driver(redis_server.url, prefix="guard")
    try:
        await _register(driver)
        assert driver.guard.marker is not None and driver.guard.resets == 0
        assert await driver.worker_heartbeat("w-1", in_flight=[])
        assert driver.guard.resets == 0  # nothing lost: no alarm
        with SyncRedis(port=redis_server.port) as raw:
            raw.flushall()
        with capture_log_events() as events:
            landed = await driver.worker_heartbeat("w-1", in_flight=[])
        assert not landed  # the registry entry went with the data
        assert driver.guard.resets == 1
        [reset] = [e for e in events if e["event"] == "jobs.redis.reset"]
        assert reset["level"] == "error"
        assert reset["prefix"] == "guard" and reset["resets"] == 1
        with capture_log_events() as again:
            await driver.worker_heartbeat("w-1", in_flight=[])
        assert not [e for e in again if e["event"] == "jobs.redis.reset"]  # one reset, one alarm
    finally:
        await driver.close()


async def test_a_restart_without_persistence_is_detected_at_the_next_registration(
    redis_server: Any,
) -> None:
    driver = redis_job_driver(redis_server.url, prefix="guard")
    try:
        await _register(driver)
        redis_server.kill()
        for leftover in redis_server.folder.iterdir():  # persistence lost with the process
            if leftover.is_dir():
                shutil.rmtree(leftover)
            elif leftover.name != "redis.log":
                leftover.unlink()
        redis_server.start()
        with capture_log_events() as events:
            await _register(driver)
        assert driver.guard.resets == 1
        assert [e["level"] for e in events if e["event"] == "jobs.redis.reset"] == ["error"]
    finally:
        await driver.close()


async def test_an_evicting_server_is_refused_at_a_workers_start(
    redis_server: Any,
) -> None:
    with SyncRedis(port=redis_server.port) as raw:
        raw.config_set("maxmemory-policy", "allkeys-lru")
    driver = redis_job_driver(redis_server.url, prefix="guard")
    try:
        with pytest.raises(XError) as caught:
            await _register(driver)
        assert caught.value.code == "X_CONFIG_INVALID"
        assert "'allkeys-lru'" in caught.value.message
        assert "noeviction" in (caught.value.fix or "")
        assert "allow_eviction=True" in (caught.value.fix or "")

        async def body(_i: object, _s: object, _c: object) -> None:
            return None

        j = job(name="guarded", input=dict, idempotency_key=lambda i: "k", run=body)
        with swap_adapter(JOB_DRIVER, driver):
            worker = job_worker(jobs=[j], handle_signals=False)
            with pytest.raises(XError) as at_start:
                await worker.start()
            assert at_start.value.code == "X_CONFIG_INVALID"
            await worker.stop()
    finally:
        await driver.close()
    allowed = redis_job_driver(redis_server.url, prefix="guard", allow_eviction=True)
    try:
        await _register(allowed)  # accepted: the operator chose the risk
        assert allowed.guard.allow_eviction
    finally:
        await allowed.close()


def test_allow_eviction_must_be_a_bool() -> None:
    with pytest.raises(XError) as caught:
        redis_job_driver("redis://127.0.0.1:6379/0", allow_eviction="yes")  # type: ignore[arg-type]
    assert caught.value.code == "X_CONFIG_INVALID"
