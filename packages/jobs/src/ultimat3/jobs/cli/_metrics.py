"""``x worker --metrics-port PORT``: the worker's OpenTelemetry metrics in Prometheus's text
format on ``http://HOST:PORT/metrics``.

The pieces are the ``prometheus`` extra of ultimat3-jobs (the OpenTelemetry SDK, its Prometheus
exporter and ``prometheus_client``); installed alone, ultimat3-jobs needs ``opentelemetry-api``
only, and this module imports the extra when the flag is given, never before. The port is bound
before the meter provider is installed, so a port in use is refused with nothing changed.
"""

from __future__ import annotations

import importlib
from dataclasses import dataclass
from typing import Any, Final

from ultimat3.core import XError

EXTRA_FIX: Final = 'pip install "ultimat3-jobs[prometheus]"'
_EXTRA_MODULES: Final = (
    "prometheus_client",
    "opentelemetry.sdk.metrics",
    "opentelemetry.exporter.prometheus",
)


@dataclass(frozen=True, slots=True)
class MetricsEndpoint:
    """The running endpoint: ``url`` is where Prometheus scrapes; ``close()`` stops it."""

    host: str
    port: int
    server: Any
    own_provider: bool
    """Whether this endpoint installed the meter provider (False: the app had set one)."""

    @property
    def url(self) -> str:
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"http://{host}:{self.port}/metrics"

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


def check_port(port: int) -> None:
    if not 0 <= port <= 65535:
        raise XError(
            "X_CONFIG_INVALID",
            f"--metrics-port {port} is not a TCP port (0 to 65535)",
            fix="--metrics-port 9464 (0 lets the system pick a free one)",
            meta={"port": port},
        )


def require_extra() -> None:
    """``X_CONFIG_INVALID`` naming the missing module and the pip line, before any work."""
    for name in _EXTRA_MODULES:
        try:
            importlib.import_module(name)
        except ImportError as exc:
            raise XError(
                "X_CONFIG_INVALID",
                f"x worker --metrics-port needs the prometheus extra of ultimat3-jobs: "
                f"{name} is not installed ({exc})",
                fix=EXTRA_FIX,
                meta={"missing": name},
            ) from exc


def serve_metrics(host: str, port: int) -> MetricsEndpoint:
    """Bind ``host:port``, then install an SDK meter provider with a Prometheus reader (unless the
    app installed one already: its readers are kept, and ``/metrics`` serves what
    ``prometheus_client``'s default registry holds). Refuses a missing extra or a busy port."""
    check_port(port)
    require_extra()
    from opentelemetry import metrics
    from opentelemetry.exporter.prometheus import PrometheusMetricReader
    from opentelemetry.sdk.metrics import MeterProvider
    from prometheus_client import REGISTRY, start_http_server

    try:
        server, _thread = start_http_server(port, addr=host, registry=REGISTRY)
    except OSError as exc:
        raise XError(
            "X_CONFIG_INVALID",
            f"x worker --metrics-port {port}: cannot listen on {host}:{port} "
            f"({exc.strerror or exc}): another process holds the port, or the address is not "
            "this machine's",
            fix=f"pick a free port (--metrics-port {port + 1 if 0 < port < 65535 else 9464}), "
            "or stop what listens there",
            meta={"host": host, "port": port},
        ) from exc
    current = metrics.get_meter_provider()
    own = not isinstance(current, MeterProvider)
    if own:
        metrics.set_meter_provider(MeterProvider(metric_readers=[PrometheusMetricReader()]))
    bound = int(server.server_address[1])
    return MetricsEndpoint(host=host, port=bound, server=server, own_provider=own)
