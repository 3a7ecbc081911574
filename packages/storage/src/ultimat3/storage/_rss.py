"""Resident memory sampling for the conformance suite's streaming tests (Linux ``/proc``; the
peak ``ru_maxrss`` elsewhere, which can only over-report growth)."""

from __future__ import annotations

import os
import resource
import threading
from types import TracebackType

_PAGE = os.sysconf("SC_PAGE_SIZE") if hasattr(os, "sysconf") else 4096


def current_rss() -> int:
    """This process's resident set size in bytes, now."""
    try:
        with open("/proc/self/statm", "rb") as f:
            return int(f.read().split()[1]) * _PAGE
    except OSError:  # pragma: no cover - not Linux
        return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024


class RssPeak:
    """``with RssPeak() as peak: ...`` then ``peak.growth``: the highest RSS seen while the block
    ran (sampled every ``every`` seconds in a thread) minus the RSS when it started."""

    def __init__(self, every: float = 0.005) -> None:
        self.every = every
        self.start = 0
        self.peak = 0
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    @property
    def growth(self) -> int:
        return max(0, self.peak - self.start)

    def _sample(self) -> None:
        while not self._stop.wait(self.every):
            self.peak = max(self.peak, current_rss())

    def __enter__(self) -> RssPeak:
        self.start = self.peak = current_rss()
        self._thread = threading.Thread(target=self._sample, name="rss-peak", daemon=True)
        self._thread.start()
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join()
        self.peak = max(self.peak, current_rss())
