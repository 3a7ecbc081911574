"""``x dashboard``: the jobs dashboard served standalone, for an operator without an app of
their own. Read-only unless ``--allow-actions``; it listens on loopback unless ``--host`` says
otherwise (put it behind your own auth before you do). Needs ``ultimat3-jobs[dashboard]``
(uvicorn). Stops on SIGTERM or Ctrl-C."""

from __future__ import annotations

import argparse
import asyncio
import contextlib
from collections.abc import Iterator
from typing import Any

from ultimat3.core import XError
from ultimat3.jobs import Task

from ._invocation import Commands, Invocation
from ._output import Answer
from ._signals import stop_signals
from ._worker import load_jobs

DEFAULT_HOST = "127.0.0.1"
DEFAULT_PORT = 8000
EXTRA_FIX = 'pip install "ultimat3-jobs[dashboard]"'


def register(root: Commands, common: argparse.ArgumentParser) -> None:
    summary = "serve the jobs dashboard in the browser (read-only unless --allow-actions)"
    p = root.add_parser("dashboard", help=summary, description=summary, parents=[common])
    p.set_defaults(handler=cmd_dashboard)
    p.add_argument(
        "--app",
        metavar="MODULE:ATTRIBUTE",
        help="the app's list of jobs and tasks, e.g. myapp.jobs:JOBS (its tasks' cron and next "
        "fire show on the tasks page; without it: what the store knows)",
    )
    p.add_argument("--host", default=DEFAULT_HOST, help=f"where to listen (default {DEFAULT_HOST})")
    p.add_argument(
        "--port", type=int, default=DEFAULT_PORT, help=f"the port (default {DEFAULT_PORT}; 0: any)"
    )
    p.add_argument("--title", default="Jobs", help="the dashboard's title (default Jobs)")
    p.add_argument(
        "--allow-actions",
        action="store_true",
        help="offer retry / cancel / promote / pause / resume (POST forms with a CSRF token)",
    )


def _uvicorn() -> Any:
    try:
        import uvicorn
    except ImportError as exc:
        raise XError(
            "X_CONFIG_INVALID",
            "x dashboard needs uvicorn, which the [dashboard] extra installs",
            fix=EXTRA_FIX,
            meta={"extra": "dashboard"},
        ) from exc
    return uvicorn


def _tasks(spec: str | None) -> list[Task]:
    return [] if spec is None else [t for t in load_jobs(spec) if isinstance(t, Task)]


async def _serve(server: Any) -> bool:
    """Serve until told to stop; ``False`` when uvicorn could not start (it exits the process
    with ``SystemExit`` then, which a task must not let through the loop)."""
    try:
        await server.serve()
    except SystemExit:
        return False
    return True


async def cmd_dashboard(inv: Invocation) -> Answer:
    from ultimat3.jobs.dashboard import jobs_dashboard

    a = inv.args
    if not 0 <= a.port <= 65535:
        raise XError(
            "X_CONFIG_INVALID",
            f"--port {a.port} is not a TCP port",
            fix=f"--port {DEFAULT_PORT} (0..65535; 0 picks a free one)",
        )
    uvicorn = _uvicorn()
    tasks = _tasks(a.app)
    driver = await inv.driver()
    app = jobs_dashboard(driver=driver, title=a.title, allow_actions=a.allow_actions, tasks=tasks)

    ready = asyncio.Event()

    class Server(uvicorn.Server):  # type: ignore[misc, name-defined]
        @contextlib.contextmanager
        def capture_signals(self) -> Iterator[None]:  # the command's own handlers stop it
            yield

        async def startup(self, sockets: Any = None) -> None:
            await super().startup(sockets=sockets)
            if self.started:
                ready.set()

    config = uvicorn.Config(app, host=a.host, port=a.port, log_level="warning", lifespan="off")
    server = Server(config)
    with stop_signals() as (stop, received):
        serving = asyncio.ensure_future(_serve(server))
        listening = asyncio.ensure_future(ready.wait())
        await asyncio.wait([serving, listening], return_when=asyncio.FIRST_COMPLETED)
        if not ready.is_set():
            listening.cancel()
            await serving
            raise XError(
                "X_CONFIG_INVALID",
                f"x dashboard could not listen on {a.host}:{a.port}",
                fix="pick a free port with --port (or --port 0)",
                meta={"host": a.host, "port": a.port},
            )
        port = server.servers[0].sockets[0].getsockname()[1]
        url = f"http://{a.host}:{port}/"
        mode = "actions on" if a.allow_actions else "read-only"
        inv.progress(
            f"x dashboard: {url} over the {driver.name} driver ({mode}); Ctrl-C or SIGTERM stops it"
        )
        waiter = asyncio.ensure_future(stop.wait())
        await asyncio.wait([serving, waiter], return_when=asyncio.FIRST_COMPLETED)
        server.should_exit = True
        waiter.cancel()
        await serving
    why = received[0] if received else "the server stopped"
    return Answer(
        {"url": url, "allow_actions": a.allow_actions, "stopped_by": why},
        f"x dashboard: {why}: stopped",
    )
