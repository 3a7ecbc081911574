"""The named log events: every one the spec names is a structured record at the spec's level
(one registry, ``EVENT_LEVELS``, that no call site contradicts), and the ones the rest of the
suite does not drive are driven here against a real run (memory, then Postgres)."""

from __future__ import annotations

import ast
import asyncio
from pathlib import Path
from typing import Any, Final

from ultimat3.core import EVENT_LEVELS, capture_log_events, new_id
from ultimat3.jobs.adapter import EnqueueRequest
from ultimat3_testkit.engine_drivers import Engine

PACKAGES: Final = Path(__file__).resolve().parents[2]

SPEC_EVENTS: Final = {
    # the spec states these levels
    "jobs.heartbeat.failed": "warning",
    "jobs.lease.lost": "error",
    "jobs.timeout.abandoned": "warning",
    # named without a level; chosen (docs/observability.md): a job buried or a claim unowned
    # is worth a look, a lost notification path costs latency, a poison outbox row or a
    # failing hook loses work until someone acts
    "jobs.claim.exhausted": "warning",
    "jobs.settle.unowned": "warning",
    "jobs.wake.live": "info",
    "jobs.wake.unverified": "warning",
    "jobs.outbox.publish-failed": "error",
    "jobs.on-settled.failed": "error",
}


def test_every_event_the_spec_names_has_the_specs_level() -> None:
    assert {name: EVENT_LEVELS.get(name) for name in SPEC_EVENTS} == SPEC_EVENTS


def _log_event_calls() -> list[tuple[str, int, str, object]]:
    """``(file, line, event, explicit level)`` of every ``log_event("<literal>", ...)`` in the
    packages' sources (the level is the literal written, ``None`` when there is none)."""
    found: list[tuple[str, int, str, object]] = []
    for path in sorted(PACKAGES.glob("*/src/**/*.py")):
        tree = ast.parse(path.read_text(encoding="utf-8"))
        for node in ast.walk(tree):
            if not (isinstance(node, ast.Call) and getattr(node.func, "id", None) == "log_event"):
                continue
            if not node.args or not isinstance(node.args[0], ast.Constant):
                continue
            level = next(
                (
                    k.value.value
                    for k in node.keywords
                    if k.arg == "level" and isinstance(k.value, ast.Constant)
                ),
                None,
            )
            found.append((path.name, node.lineno, str(node.args[0].value), level))
    return found


def test_no_call_site_logs_a_registered_event_at_another_level() -> None:
    calls = _log_event_calls()
    emitted = {event for _, _, event, _ in calls}
    assert set(SPEC_EVENTS) <= emitted, f"never logged: {set(SPEC_EVENTS) - emitted}"
    contradicting = [
        (where, line, event, level)
        for where, line, event, level in calls
        if event in EVENT_LEVELS and level is not None and level != EVENT_LEVELS[event]
    ]
    assert contradicting == []


async def test_a_claim_that_buries_a_row_logs_claim_exhausted_at_warning(engine: Engine) -> None:
    driver = engine.driver
    request = EnqueueRequest(
        id=new_id(),
        run_id=new_id(),
        name="logs.once",
        queue="logs-q",
        payload={"n": 1},
        idempotency_key=new_id(),
        max_attempts=1,
    )
    await driver.enqueue(request)
    [held] = await driver.claim(
        queues=["logs-q"], limit=1, worker_id="gone", visibility_timeout_ms=200
    )
    if engine.clock is not None:
        engine.clock.advance(300)
    else:
        await asyncio.sleep(0.35)
    with capture_log_events() as events:
        assert (
            await driver.claim(
                queues=["logs-q"], limit=1, worker_id="next", visibility_timeout_ms=30_000
            )
            == []
        )
    [event] = [e for e in events if e["event"] == "jobs.claim.exhausted"]
    want: dict[str, Any] = {
        "level": "warning",
        "job_id": held.id,
        "job": "logs.once",
        "queue": "logs-q",
        "state": "dead",
        "worker_id": "gone",
    }
    assert {k: event[k] for k in want} == want
