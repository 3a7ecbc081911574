"""``x worker --app module:attribute``: run the app's jobs until SIGTERM or SIGINT.

The attribute is a list of jobs. The worker (``ultimat3.jobs.job_worker``) is imported when the
command runs, never at import time, and resolves the driver through the ``JOB_DRIVER`` port, so
the command hands the worker the driver it resolved and installs it on ``JOB_DRIVER`` for the
worker's life (an enqueue inside a body resolves it there). The command owns SIGTERM and SIGINT:
either starts the worker's drain (held runs hear ``X_DRAINING`` naming the signal) and the
command exits once the drain ends.
"""

from __future__ import annotations

import argparse
import importlib
import os
import signal
import sys
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, Final

from ultimat3.core import XError, swap_adapter
from ultimat3.jobs.adapter import JOB_DRIVER, to_json_dict
from ultimat3.jobs.cli._invocation import Commands, Invocation
from ultimat3.jobs.cli._logging import check_log_options, root_logging
from ultimat3.jobs.cli._output import Answer
from ultimat3.jobs.cli._relay import add_relay_arguments, open_relay
from ultimat3.jobs.cli._signals import STOP_SIGNALS, stop_signals

if TYPE_CHECKING:
    from ultimat3.jobs import JobWorker

_APP_FIX: Final = (
    "pass --app myapp.jobs:JOBS, where JOBS = [onboard_org, send_digest] (or one job: "
    "--app myapp.jobs:onboard_org)"
)


def register(root: Commands, common: argparse.ArgumentParser) -> None:
    summary = "run the app's jobs until SIGTERM or SIGINT, then drain"
    p = root.add_parser("worker", help=summary, description=summary, parents=[common])
    p.set_defaults(handler=cmd_worker)
    p.add_argument(
        "--app",
        required=True,
        metavar="MODULE:ATTRIBUTE",
        help="where the app's list of jobs (or one job) is, e.g. myapp.jobs:JOBS",
    )
    p.add_argument(
        "--queues",
        metavar="A,B",
        help="serve only these queues (default: $WORKER_QUEUES, else every queue the jobs declare)",
    )
    p.add_argument(
        "--max-in-flight",
        type=int,
        metavar="N",
        help="at most N runs at once in this process (default: no process cap)",
    )
    p.add_argument(
        "--log-level",
        default="info",
        metavar="LEVEL",
        help="the root logger's level: debug (a line per completed run too), info (default), "
        "warning, error",
    )
    p.add_argument(
        "--log-format",
        default="text",
        metavar="FORMAT",
        help="text (one line a record, default) or json (one object a line, the event's fields "
        "as keys)",
    )
    p.add_argument(
        "--relay",
        action="store_true",
        help="run the outbox relay loop in this process too (the --outbox-* and --relay-* "
        "flags; see x relay --help)",
    )
    add_relay_arguments(p)
    p.add_argument(
        "--metrics-port",
        type=int,
        metavar="PORT",
        help="serve the OpenTelemetry metrics in Prometheus format on http://HOST:PORT/metrics "
        '(needs pip install "ultimat3-jobs[prometheus]"; 0 picks a free port)',
    )
    p.add_argument(
        "--metrics-host",
        default="127.0.0.1",
        metavar="HOST",
        help="the address --metrics-port listens on (127.0.0.1; 0.0.0.0 for every interface)",
    )


def load_jobs(spec: str, *, command: str = "x worker") -> list[Any]:
    """The list of jobs at ``module:attribute`` (the attribute may be dotted)."""
    module_name, sep, attr = spec.partition(":")
    if not sep or not module_name or not attr:
        raise XError("X_CONFIG_INVALID", f"--app {spec!r} is not module:attribute", fix=_APP_FIX)
    cwd = os.getcwd()
    if cwd not in sys.path and "" not in sys.path:
        sys.path.insert(0, cwd)  # as `python -m` would: the app's own package is importable
    try:
        found: Any = importlib.import_module(module_name)
    except ModuleNotFoundError as exc:
        if exc.name is None or not (
            module_name == exc.name or module_name.startswith(exc.name + ".")
        ):
            raise  # the app's module imports something missing: its own traceback says what
        raise XError(
            "X_CONFIG_INVALID",
            f"--app {spec!r}: there is no module named {module_name!r} (from {cwd})",
            fix=f"run {command} from the app's root, or install the app into this environment",
        ) from exc
    for part in attr.split("."):
        if not hasattr(found, part):
            raise XError(
                "X_CONFIG_INVALID",
                f"--app {spec!r}: module {module_name!r} has no attribute {attr!r}",
                fix=_APP_FIX,
            )
        found = getattr(found, part)
    from ultimat3.jobs import Job  # the engine loads only when a worker runs

    if isinstance(found, Job):  # one job: --app myapp.jobs:send_welcome
        return [found]
    if not isinstance(found, list | tuple):
        raise XError(
            "X_CONFIG_INVALID",
            f"--app {spec!r} is a {type(found).__name__}, not a list of jobs",
            fix=_APP_FIX,
        )
    if not found:
        raise XError(
            "X_CONFIG_INVALID", f"--app {spec!r} is an empty list: no job to run", fix=_APP_FIX
        )
    return list(found)


def parse_queues(text: str | None) -> list[str] | None:
    if text is None:
        return None
    queues = [q.strip() for q in text.split(",")]
    if not all(queues):
        raise XError(
            "X_INVARIANT",
            f"--queues {text!r} names an empty queue",
            fix="--queues default,emails (comma-separated, no empty names)",
        )
    return queues


async def serve(
    worker: JobWorker,
    *,
    progress: Callable[[str], None],
    signals: tuple[signal.Signals, ...] = STOP_SIGNALS,
) -> str:
    """Start ``worker``, wait for one of ``signals``, drain it (held runs hear ``X_DRAINING``
    naming the signal); answers the signal's name. A refusal at start raises at once."""

    def again(name: str) -> None:
        progress(f"x worker: {name} again: already draining, waiting for held runs")

    with stop_signals(signals, on_again=again) as (stop, received):
        await worker.start()
        if not received:
            progress(f"x worker: {worker.id} running; SIGTERM or Ctrl-C drains and stops it")
        await stop.wait()
        progress(f"x worker: {received[0]} received: draining")
        await worker.drain(signal_name=received[0])
        return received[0]


async def cmd_worker(inv: Invocation) -> Answer:
    a = inv.args
    jobs = load_jobs(a.app)
    queues = parse_queues(a.queues if a.queues is not None else inv.env.get("WORKER_QUEUES"))
    check_log_options(a.log_level, a.log_format)  # refused before anything starts
    endpoint = None
    if a.metrics_port is not None:
        from ultimat3.jobs.cli._metrics import serve_metrics

        endpoint = serve_metrics(a.metrics_host, a.metrics_port)
        inv.progress(f"x worker: metrics on {endpoint.url}")
        if not endpoint.own_provider:
            inv.progress(
                "x worker: the app installed its own OpenTelemetry MeterProvider: /metrics "
                "serves prometheus_client's default registry (the jobs metrics are there only "
                "when that provider has a PrometheusMetricReader)"
            )
    try:
        with root_logging(a.log_level, a.log_format):
            return await _run_worker(inv, jobs, queues)
    finally:
        if endpoint is not None:
            endpoint.close()


async def _run_worker(inv: Invocation, jobs: list[Any], queues: list[str] | None) -> Answer:
    from ultimat3.jobs import job_worker  # the engine loads only when a worker runs

    a = inv.args
    driver = await inv.driver()
    with swap_adapter(JOB_DRIVER, driver):  # what an enqueue inside a body resolves
        worker = job_worker(
            jobs=jobs,
            queues=queues,
            max_in_flight=a.max_in_flight,
            driver=driver,
            handle_signals=False,  # this command owns SIGTERM and SIGINT
        )
        inv.progress(
            f"x worker: {len(jobs)} job(s) from {a.app} on the {driver.name} driver, "
            f"queues {', '.join(worker.queues)}"
        )
        relay = None
        if a.relay:
            relay = await open_relay(inv, driver)
            inv.progress(f"x worker: relaying the outbox of {relay.where}")
        try:
            received = await serve(worker, progress=inv.progress)
        finally:
            if relay is not None:
                await relay.close()
    stats = worker.stats()
    data: dict[str, Any] = {"app": a.app, "signal": received, "stats": to_json_dict(stats)}
    if relay is not None:
        data["relay"] = to_json_dict(relay.loop.stats())
    return Answer(
        data,
        f"x worker: stopped after {received}: {stats.completed} completed, {stats.retried} "
        f"retried, {stats.dead_lettered} dead-lettered, {stats.released} handed back",
    )
