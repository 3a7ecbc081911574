"""``await job.result(job_id, timeout='30s')``: the stored result of a run once it settles.

The wait registers on the driver's settle push (``SettleWatch``: Postgres LISTEN, memory
futures) BEFORE it reads the row, so a settle in between is never missed; each push re-reads the
row once. A driver without the push (Redis) is re-read with a backoff (10 ms doubling to 500 ms).
Either way the row is also re-read every ``BACKSTOP_S`` (a cancel or a lost notification).

``done``: the stored result (its JSON form, as ``x jobs show`` has it). ``dead``, ``failed``,
``cancelled``: raises the run's last error as an ``XError`` (its code, message and fix; code
``X_JOB_MAX_ATTEMPTS`` / ``X_ABORTED`` when the stored error has none), with ``meta`` naming the
job and state. Past the timeout: ``X_JOB_RESULT_TIMEOUT``.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, Final

from ultimat3.core import Duration, XError, adapter, parse_duration
from ultimat3.jobs.adapter import JOB_DRIVER, driver_introspect, driver_settle_watch

if TYPE_CHECKING:
    from ultimat3.jobs._declare.job import Job
    from ultimat3.jobs.adapter import JobDetail

BACKSTOP_S: Final = 2.0
POLL_FIRST_S: Final = 0.01
POLL_MAX_S: Final = 0.5
_FAILED: Final = ("dead", "failed", "cancelled")


def _settled_error(row: JobDetail) -> XError:
    stored: Mapping[str, Any] = row.last_error if isinstance(row.last_error, Mapping) else {}
    code = stored.get("code")
    if not isinstance(code, str) or not code.startswith("X_"):
        code = "X_ABORTED" if row.state == "cancelled" else "X_JOB_MAX_ATTEMPTS"
    message = stored.get("message") or f"the run ended {row.state}"
    meta = dict(stored.get("meta") or {})
    meta.update({"job_id": row.id, "job": row.name, "state": row.state})
    return XError(
        code,
        f"job {row.name!r} ({row.id}) ended {row.state}: {message}",
        fix=stored.get("fix") or f"x jobs show {row.id}; x jobs retry {row.id} to run it again",
        meta=meta,
    )


def _answer(job: Job[Any, Any], row: JobDetail) -> tuple[bool, Any]:
    if row.name != job.name:
        raise XError(
            "X_JOB_NOT_FOUND",
            f"{job.name}.result: job {row.id} is a run of {row.name!r}, not of {job.name!r}",
            fix=f"await {row.name}.result({row.id!r})",
            meta={"job_id": row.id, "job": row.name},
        )
    if row.state == "done":
        return True, row.result
    if row.state in _FAILED:
        raise _settled_error(row)
    return False, None


async def job_result(job: Job[Any, Any], job_id: str, *, timeout: Duration = "30s") -> Any:  # noqa: ASYNC109
    timeout_ms = parse_duration(timeout, name="timeout")
    driver = adapter(JOB_DRIVER)
    intro = driver_introspect(driver)
    if intro is None:
        raise XError(
            "X_CONFIG_INVALID",
            f"{job.name}.result: the driver {driver.name!r} has no introspection to read runs",
            fix="use a driver with introspect (memory, Postgres, Redis)",
        )
    watch = driver_settle_watch(driver)
    deadline = time.monotonic() + timeout_ms / 1000
    pause = POLL_FIRST_S
    row: JobDetail | None = None
    while True:
        future = await watch.watch_settled(job_id) if watch is not None else None
        try:
            row = await intro.show(job_id)
            ended, value = _answer(job, row)
            if ended:
                return value
            left = deadline - time.monotonic()
            if left <= 0:
                break
            if future is not None:
                with contextlib.suppress(asyncio.TimeoutError):
                    await asyncio.wait_for(asyncio.shield(future), timeout=min(left, BACKSTOP_S))
            else:
                await asyncio.sleep(min(left, pause))
                pause = min(pause * 2, POLL_MAX_S)
        finally:
            if future is not None and watch is not None:
                watch.unwatch_settled(job_id, future)
    state = row.state if row is not None else "unknown"
    raise XError(
        "X_JOB_RESULT_TIMEOUT",
        f"{job.name}.result: job {job_id} is still {state} after {timeout_ms} ms",
        fix=f"await {job.name}.result({job_id!r}, timeout='2m'), or x jobs show {job_id}",
        meta={"job_id": job_id, "state": state, "timeout_ms": timeout_ms},
    )
