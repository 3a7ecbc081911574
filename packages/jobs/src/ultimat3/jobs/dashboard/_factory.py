"""``jobs_dashboard()``: the argument checks, then the ASGI app."""

from __future__ import annotations

from collections.abc import Sequence

from ultimat3.core import XError
from ultimat3.jobs import Task
from ultimat3.jobs.adapter import JobDriver

from ._app import JobsDashboard


def jobs_dashboard(
    *,
    driver: JobDriver | None = None,
    title: str = "Jobs",
    allow_actions: bool = False,
    tasks: Sequence[Task] = (),
) -> JobsDashboard:
    """The dashboard over ``driver`` (default: the installed driver, resolved per request).
    ``tasks`` (the app's task declarations) lets the tasks page show each one's cron and next
    fire; without them it lists what the store knows."""
    if not isinstance(title, str) or not title.strip():
        raise XError(
            "X_CONFIG_INVALID",
            f"jobs_dashboard(title=...) must be a non-empty string, not {title!r}",
            fix="jobs_dashboard(title='Jobs')",
        )
    if not isinstance(allow_actions, bool):
        raise XError(
            "X_CONFIG_INVALID",
            f"jobs_dashboard(allow_actions=...) must be True or False, not {allow_actions!r}",
            fix="jobs_dashboard(allow_actions=True) behind the app's auth, or leave it read-only",
        )
    given: object = tasks
    if isinstance(given, str | bytes) or any(not isinstance(t, Task) for t in tasks):
        raise XError(
            "X_CONFIG_INVALID",
            f"jobs_dashboard(tasks=...) takes the app's task(...) declarations, not {tasks!r}",
            fix="jobs_dashboard(tasks=[nightly_report, ...])",
        )
    if driver is not None and not hasattr(driver, "stats"):
        raise XError(
            "X_CONFIG_INVALID",
            f"jobs_dashboard(driver=...) needs a job driver, not {driver!r}",
            fix="jobs_dashboard(driver=postgres_job_driver(DATABASE_URL)) or leave it to the "
            "installed driver",
        )
    return JobsDashboard(driver=driver, title=title, allow_actions=allow_actions, tasks=tasks)
