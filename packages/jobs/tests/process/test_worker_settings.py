"""``WorkerSettings``: the worker's knobs as one value, and ``job_worker``'s keywords beside it."""

from __future__ import annotations

from typing import Any

import pytest
from pydantic import BaseModel

from ultimat3.core import XError
from ultimat3.jobs import JobContext, Step, WorkerSettings, job, job_worker


class Ping(BaseModel):
    n: int


async def _body(i: Ping, step: Step, ctx: JobContext) -> None:
    return None


PING = job(input=Ping, idempotency_key=lambda i: f"ping:{i.n}", name="settings_ping", run=_body)


def _knobs(worker: Any) -> tuple[float, float, int, int, int | None]:
    s = worker._settings
    return (
        worker._poll_s,
        worker._idle_max_s,
        worker._claim_batch,
        s.visibility_timeout_ms,
        s.heartbeat_interval_ms,
    )


def test_the_defaults_are_the_workers_documented_ones() -> None:
    d = WorkerSettings()
    assert (d.poll_interval_ms, d.idle_poll_max_ms, d.visibility_timeout_ms) == (250, 2000, 30_000)
    assert d.heartbeat_interval_ms is None
    assert _knobs(job_worker(jobs=[PING])) == _knobs(job_worker(jobs=[PING], settings=d))


def test_a_settings_value_tunes_the_worker_as_the_keywords_do() -> None:
    tuned = WorkerSettings(
        poll_interval_ms=100, idle_poll_max_ms=800, claim_batch=3, visibility_timeout_ms=9_000
    )
    by_value = job_worker(jobs=[PING], settings=tuned)
    by_keywords = job_worker(
        jobs=[PING],
        poll_interval_ms=100,
        idle_poll_max_ms=800,
        claim_batch=3,
        visibility_timeout_ms=9_000,
    )
    assert _knobs(by_value) == _knobs(by_keywords) == (0.1, 0.8, 3, 9_000, None)


def test_a_keyword_beside_settings_fills_what_settings_left_at_its_default() -> None:
    w = job_worker(jobs=[PING], settings=WorkerSettings(claim_batch=4), poll_interval_ms=50)
    assert _knobs(w)[:3] == (0.05, 2.0, 4)
    same = job_worker(jobs=[PING], settings=WorkerSettings(claim_batch=4), claim_batch=4)
    assert _knobs(same)[2] == 4


def test_a_knob_given_two_ways_with_two_values_is_refused_naming_it() -> None:
    with pytest.raises(XError) as exc:
        job_worker(jobs=[PING], settings=WorkerSettings(claim_batch=4), claim_batch=5)
    assert exc.value.code == "X_CONFIG_INVALID"
    assert "claim_batch" in exc.value.message
    assert exc.value.fix is not None and "WorkerSettings" in exc.value.fix


def test_bad_settings_are_refused_like_bad_keywords() -> None:
    with pytest.raises(XError) as exc:
        job_worker(jobs=[PING], settings=WorkerSettings(poll_interval_ms=0))
    assert exc.value.code == "X_CONFIG_INVALID"
    assert "poll_interval_ms" in exc.value.message
    with pytest.raises(XError) as exc:
        job_worker(jobs=[PING], settings=WorkerSettings(heartbeat_interval_ms=30_000))
    assert "heartbeat_interval_ms" in exc.value.message
    with pytest.raises(XError) as exc:
        job_worker(jobs=[PING], settings={"poll_interval_ms": 100})  # type: ignore[arg-type]
    assert exc.value.code == "X_CONFIG_INVALID"
    assert "WorkerSettings" in exc.value.message


def test_settings_are_a_frozen_value() -> None:
    s = WorkerSettings(claim_batch=2)
    with pytest.raises(AttributeError):
        s.claim_batch = 3  # type: ignore[misc]
    assert s == WorkerSettings(claim_batch=2)
