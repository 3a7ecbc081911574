import asyncio
import logging

import pytest

from ultimat3.core import EVENT_LEVELS, XError, capture_log_events, log_event, meter, tracer


def test_known_events_take_their_level() -> None:
    with capture_log_events() as events:
        log_event("jobs.lease.lost", job_id="j1", queue="default")
        log_event("jobs.wake.live")
        log_event("app.something", n=1)
        log_event("jobs.lease.lost", level="critical")
    assert events == [
        {"event": "jobs.lease.lost", "level": "error", "job_id": "j1", "queue": "default"},
        {"event": "jobs.wake.live", "level": "info"},
        {"event": "app.something", "level": "info", "n": 1},
        {"event": "jobs.lease.lost", "level": "critical"},
    ]
    assert EVENT_LEVELS["jobs.heartbeat.failed"] == "warning"


def test_the_log_record_is_readable_and_structured(caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.INFO, logger="ultimat3"):
        log_event("jobs.heartbeat.failed", job_id="j1", attempt=2)
    (record,) = caplog.records
    assert record.levelno == logging.WARNING
    assert record.getMessage() == "jobs.heartbeat.failed job_id=j1 attempt=2"
    assert record.event == "jobs.heartbeat.failed"  # type: ignore[attr-defined]
    assert record.x_fields == {"job_id": "j1", "attempt": 2}  # type: ignore[attr-defined]


async def test_capture_sees_events_from_other_tasks() -> None:
    async def worker(i: int) -> None:
        await asyncio.sleep(0)
        log_event("jobs.claim.exhausted", i=i)

    with capture_log_events() as events:
        await asyncio.gather(*(worker(i) for i in range(3)))
    assert sorted(e["i"] for e in events) == [0, 1, 2]


def test_nested_captures_both_receive_and_stop_after_exit() -> None:
    with capture_log_events() as outer:
        with capture_log_events() as inner:
            log_event("a")
        log_event("b")
    log_event("c")
    assert [e["event"] for e in outer] == ["a", "b"]
    assert [e["event"] for e in inner] == ["a"]


def test_unknown_level_is_refused_naming_it() -> None:
    with pytest.raises(XError) as info:
        log_event("x", level="loud")
    assert info.value.code == "X_INVARIANT"
    assert "'loud'" in info.value.message


def test_tracer_and_meter_are_usable_without_an_sdk() -> None:
    with tracer().start_as_current_span("job"):
        meter().create_counter("jobs_total").add(1, {"queue": "default"})
