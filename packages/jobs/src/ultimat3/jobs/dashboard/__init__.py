"""The jobs dashboard: queues, the job list, one job's step timeline, the dead letter and the
tasks, in the browser. A plain ASGI app (no framework, no script, no CDN) that reads and acts only
through the driver's ``introspect``, so it works on every driver that has one (memory,
Postgres, Redis)::

    from ultimat3.jobs.dashboard import jobs_dashboard

    app.mount("/admin/jobs", jobs_dashboard(allow_actions=True))   # behind the app's auth

Read-only by default; ``allow_actions=True`` adds retry / cancel / promote / pause / resume as
POST forms with a CSRF token. See docs/dashboard.md.
"""

from ._app import JobsDashboard
from ._factory import jobs_dashboard

__all__ = ["JobsDashboard", "jobs_dashboard"]
