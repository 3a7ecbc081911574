"""What every system under test implements (``System``), and the hook its no-op body calls.

Each system can install its schema into an empty database, enqueue one no-op job or a batch,
run a worker whose body only calls ``on_body(n)``, and say how many of its jobs are not yet
settled (``remaining_sql``). Every worker setting is the system's own default or the value its
docs show; ``settings`` says which, and docs/performance.md repeats it.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Protocol

OnBody = Callable[[int], None]


def _ignore(n: int) -> None:
    return None


_hook: OnBody = _ignore


def set_on_body(hook: OnBody) -> None:
    """What every system's no-op body calls with its job's number, first thing."""
    global _hook
    _hook = hook


def on_body(n: int) -> None:
    _hook(n)


class Worker(Protocol):
    async def stop(self) -> None: ...


class System(Protocol):
    @property
    def name(self) -> str: ...

    @property
    def settings(self) -> str:
        """The worker settings used, in words (docs/performance.md repeats them)."""
        ...

    @property
    def remaining_sql(self) -> str:
        """Jobs of this system not yet settled (done / completed / succeeded)."""
        ...

    @property
    def driver_lib(self) -> str:
        """The database client library: ``psycopg`` or ``asyncpg``."""
        ...

    async def install(self, dsn: str) -> None: ...

    async def open(self, dsn: str) -> None:
        """Open the enqueueing client."""
        ...

    async def close(self) -> None: ...

    async def enqueue_one(self, n: int) -> None: ...

    async def enqueue_bulk(self, ns: list[int]) -> None:
        """ONE call of the system's bulk enqueue for every number in ``ns``."""
        ...

    async def start_worker(self, dsn: str) -> Worker: ...
