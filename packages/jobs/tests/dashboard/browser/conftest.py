"""The browser tests' machinery: a real headless Chromium (Debian's ``chromium`` driven by
Playwright, no browser download) for the session, and the dashboard served by uvicorn on
loopback from a thread of its own, over a real driver that thread's event loop owns."""

from __future__ import annotations

import asyncio
import os
import shutil
import threading
import time
from collections.abc import Callable, Coroutine, Iterator
from pathlib import Path
from typing import Any, TypeVar

import pytest
import uvicorn
from playwright.sync_api import Browser, Page, sync_playwright

from ultimat3.jobs.adapter import JobDriver

T = TypeVar("T")
DOCS_IMAGES = Path(__file__).resolve().parents[5] / "docs" / "images"
SCREENSHOTS_ENV = "X_DASHBOARD_SCREENSHOTS"
"""Set (to anything) to write the pages' screenshots to docs/images/ (the docs show them)."""


class LiveDashboard:
    """uvicorn on 127.0.0.1 (a free port) serving ``app_of(driver)``; ``call(coro)`` runs a
    coroutine on the server's loop (the driver's pool lives there) and answers its result."""

    def __init__(
        self,
        open_driver: Callable[[], Coroutine[Any, Any, JobDriver]],
        app_of: Callable[[JobDriver], Any],
    ) -> None:
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self.loop.run_forever, daemon=True)
        self.thread.start()
        self.driver: JobDriver = self.call(open_driver())
        config = uvicorn.Config(
            app_of(self.driver), host="127.0.0.1", port=0, log_level="warning", lifespan="on"
        )
        self.server = uvicorn.Server(config)
        self.serving = asyncio.run_coroutine_threadsafe(self.server.serve(), self.loop)
        deadline = time.monotonic() + 20
        while not self.server.started:
            if self.serving.done() or time.monotonic() > deadline:
                raise RuntimeError(f"uvicorn did not start: {self.serving}")
            time.sleep(0.02)
        port = self.server.servers[0].sockets[0].getsockname()[1]
        self.url = f"http://127.0.0.1:{port}"

    def call(self, coro: Coroutine[Any, Any, T], timeout: float = 60) -> T:
        return asyncio.run_coroutine_threadsafe(coro, self.loop).result(timeout)

    def wait_for(
        self, probe: Callable[[], Coroutine[Any, Any, bool]], what: str, timeout: float = 30
    ) -> None:
        deadline = time.monotonic() + timeout
        while not self.call(probe()):
            if time.monotonic() > deadline:
                raise AssertionError(f"timed out waiting for {what}")
            time.sleep(0.05)

    def stop(self, close: Callable[[JobDriver], Coroutine[Any, Any, None]]) -> None:
        self.server.should_exit = True
        try:
            self.serving.result(20)
        finally:
            try:
                self.call(close(self.driver))
            finally:
                self.call(self.loop.shutdown_asyncgens())
                self.loop.call_soon_threadsafe(self.loop.stop)
                self.thread.join(10)
                self.loop.close()


@pytest.fixture(scope="module")
def browser() -> Iterator[Browser]:
    """Headless Chromium, launched once for the browser module (``--no-sandbox``: the tests run
    as root). Module-scoped, not session-scoped: Playwright's sync API keeps its event loop
    running in this thread while it is open, and every async test after it would then fail
    ("Cannot run the event loop while another loop is running")."""
    executable = shutil.which("chromium") or shutil.which("chromium-browser")
    assert executable, "no chromium on PATH: apt-get install -y chromium (.ci/run does)"
    with sync_playwright() as p:
        b = p.chromium.launch(executable_path=executable, args=["--no-sandbox"], headless=True)
        try:
            yield b
        finally:
            b.close()


@pytest.fixture
def page(browser: Browser) -> Iterator[Page]:
    """A fresh browser context (its own cookies), JavaScript on, failing on any page error."""
    context = browser.new_context(viewport={"width": 1280, "height": 860})
    context.set_default_timeout(10_000)
    p = context.new_page()
    errors: list[str] = []
    p.on("pageerror", lambda exc: errors.append(str(exc)))
    p.on("dialog", lambda d: errors.append(f"dialog: {d.message}"))
    try:
        yield p
    finally:
        context.close()
    assert errors == [], errors


@pytest.fixture(scope="session")
def shots(tmp_path_factory: pytest.TempPathFactory) -> Callable[[Page, str], Path]:
    """``shots(page, "overview")``: a full-page PNG, kept in docs/images/ when
    ``X_DASHBOARD_SCREENSHOTS`` is set (else in a temporary folder)."""
    folder = DOCS_IMAGES if os.environ.get(SCREENSHOTS_ENV) else tmp_path_factory.mktemp("shots")

    def take(p: Page, name: str) -> Path:
        folder.mkdir(parents=True, exist_ok=True)
        path = folder / f"dashboard-{name}.png"
        p.screenshot(path=str(path), full_page=True)
        assert path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
        return path

    return take
