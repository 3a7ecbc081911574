"""``stop_signals()``: SIGTERM and SIGINT as an event, for the commands that own the process
(``x worker``, ``x relay``, ``x scheduler``)."""

from __future__ import annotations

import asyncio
import contextlib
import signal
from collections.abc import Callable, Iterator
from typing import Final

STOP_SIGNALS: Final = (signal.SIGTERM, signal.SIGINT)


@contextlib.contextmanager
def stop_signals(
    signals: tuple[signal.Signals, ...] = STOP_SIGNALS,
    *,
    on_again: Callable[[str], None] | None = None,
) -> Iterator[tuple[asyncio.Event, list[str]]]:
    """While the block runs, ``signals`` set the yielded event and append their names to the
    yielded list (a repeat calls ``on_again`` with its name); the handlers are removed after.
    Where the loop cannot take handlers (not the main thread, Windows), none is installed."""
    loop = asyncio.get_running_loop()
    stop = asyncio.Event()
    received: list[str] = []

    def on_signal(sig: signal.Signals) -> None:
        if received and on_again is not None:
            on_again(sig.name)
        received.append(sig.name)
        stop.set()

    installed: list[signal.Signals] = []
    for sig in signals:
        try:
            loop.add_signal_handler(sig, on_signal, sig)
        except (NotImplementedError, RuntimeError, ValueError):  # not the main thread / Windows
            continue
        installed.append(sig)
    try:
        yield stop, received
    finally:
        for sig in installed:
            loop.remove_signal_handler(sig)
