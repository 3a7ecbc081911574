"""A worker tells you what went wrong: one log line per failed attempt (with the retry's delay),
per dead letter (with the traceback) and per lease loss, a DEBUG line per completed run; the
traceback is kept in ``last_error`` (bounded, newest frames kept); ``job_duration_seconds`` and
``jobs_total`` carry job, queue and outcome — memory, then Postgres (``engine``)."""

from __future__ import annotations

import logging
import traceback
from typing import Any

import pytest
from pydantic import BaseModel

from ultimat3.core import capture_log_events
from ultimat3.jobs import Retry, job
from ultimat3.jobs._run.run_log import MAX_TRACEBACK_BYTES, bounded_traceback
from ultimat3_testkit.engine_drivers import Engine


class N(BaseModel):
    n: int


def _charge_card(n: int) -> None:
    raise RuntimeError(f"card {n} declined")


async def _always_fails(input: N, step: Any, ctx: Any) -> None:
    _charge_card(input.n)


async def _fine(input: N, step: Any, ctx: Any) -> int:
    return input.n


async def test_a_retry_and_a_dead_letter_each_log_a_line_and_keep_the_traceback(
    engine: Engine,
) -> None:
    failing = job(
        input=N, idempotency_key=lambda i: f"f:{i.n}", name="log.fails", queue="lq",
        retry=Retry(attempts=2, backoff="fixed", delay="40ms", jitter="none"), run=_always_fails,
    )  # fmt: skip
    queued = await failing.enqueue({"n": 4})
    with capture_log_events() as events:
        await engine.harness([failing]).drain()
    retried = [e for e in events if e["event"] == "jobs.attempt.failed"]
    dead = [e for e in events if e["event"] == "jobs.run.dead-lettered"]
    assert len(retried) == 1 and len(dead) == 1
    want = {"job": "log.fails", "job_id": queued.id, "queue": "lq", "code": None}
    assert {k: retried[0][k] for k in want} == want
    assert retried[0]["level"] == "warning"
    assert retried[0]["attempt"] == 1 and retried[0]["max_attempts"] == 2
    assert retried[0]["retry_in_ms"] == 40
    assert "card 4 declined" in retried[0]["error"]
    assert {k: dead[0][k] for k in want} == want
    assert dead[0]["level"] == "error" and dead[0]["attempt"] == 2
    assert "_charge_card" in dead[0]["traceback"] and "RuntimeError" in dead[0]["traceback"]
    row = await engine.driver.introspect.show(queued.id)
    assert row.state == "dead"
    assert row.last_error is not None
    assert "_charge_card" in row.last_error["traceback"]
    assert row.last_error["traceback"].rstrip().endswith("RuntimeError: card 4 declined")


async def test_a_completed_run_logs_at_debug_with_its_duration(engine: Engine) -> None:
    fine = job(input=N, idempotency_key=lambda i: f"ok:{i.n}", name="log.ok", run=_fine)
    queued = await fine.enqueue({"n": 1})
    with capture_log_events() as events:
        await engine.harness([fine]).drain()
    [done] = [e for e in events if e["event"] == "jobs.run.completed"]
    assert done["level"] == "debug" and done["job_id"] == queued.id and done["attempt"] == 1
    assert isinstance(done["duration_ms"], int) and done["duration_ms"] >= 0
    assert not [e for e in events if e["event"] == "jobs.attempt.failed"]


async def test_the_dead_letter_line_reaches_the_ultimat3_logger_with_its_traceback(
    engine: Engine, caplog: pytest.LogCaptureFixture
) -> None:
    once = job(
        input=N, idempotency_key=lambda i: f"o:{i.n}", name="log.once",
        retry=Retry(attempts=1), run=_always_fails,
    )  # fmt: skip
    await once.enqueue({"n": 9})
    with caplog.at_level(logging.INFO, logger="ultimat3"):
        await engine.harness([once]).drain()
    [record] = [r for r in caplog.records if getattr(r, "event", "") == "jobs.run.dead-lettered"]
    assert record.levelno == logging.ERROR
    assert "_charge_card" in record.x_fields["traceback"]  # type: ignore[attr-defined]


def _deep(n: int) -> None:
    if n == 0:
        raise ValueError("the innermost frame")
    _deep(n - 1)


def _chained(links: int) -> None:
    """An exception chain ``links`` long (Python prints it whole: it collapses no repeats)."""
    try:
        if links == 0:
            raise KeyError("the oldest cause " + "x" * 100)
        _chained(links - 1)
    except Exception as exc:
        raise ValueError("the innermost frame" if links == 60 else f"link {links}") from exc


def test_a_long_traceback_is_bounded_keeping_the_newest_frames() -> None:
    with pytest.raises(ValueError) as caught:
        _chained(60)
    whole = "".join(traceback.format_exception(caught.value))
    assert len(whole) > MAX_TRACEBACK_BYTES
    text = bounded_traceback(caught.value)
    assert text is not None
    assert len(text.encode("utf-8")) <= MAX_TRACEBACK_BYTES
    assert text.startswith("... (older frames cut")
    assert text.rstrip().endswith("ValueError: the innermost frame")
    assert "the oldest cause" not in text  # the oldest part went


def test_a_short_traceback_is_kept_whole_and_an_unraised_error_has_none() -> None:
    try:
        _deep(2)
    except ValueError as exc:
        text = bounded_traceback(exc)
    assert text is not None and text.startswith("Traceback (most recent call last)")
    assert bounded_traceback(ValueError("never raised")) is None
