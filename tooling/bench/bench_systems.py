"""The registry of systems under test, by the name ``--only`` takes."""

from __future__ import annotations

from collections.abc import Callable

from bench_base import System, set_on_body
from bench_ours import Ultimat3, Ultimat3Floor
from bench_peers import ObanPy, PGQueuer, Procrastinate

SYSTEMS: dict[str, Callable[[], System]] = {
    "ultimat3": Ultimat3,
    "ultimat3-floor": Ultimat3Floor,
    "pgqueuer": PGQueuer,
    "oban": ObanPy,
    "procrastinate": Procrastinate,
}

__all__ = ["SYSTEMS", "System", "Ultimat3", "set_on_body"]
