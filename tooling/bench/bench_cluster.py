"""A private Postgres cluster for one benchmark run: ``initdb`` into a temp folder under ``.x/``,
started on a spare port with ``shared_preload_libraries=pg_stat_statements`` (so the server
counts every system's statements), the machine's shared server untouched. Its settings that bear
on the figures (fsync, synchronous_commit, shared_buffers, WAL sizes, autovacuum, ...) are copied
from the shared server named by ``--dsn``, so the two stay comparable. Stopped and deleted at
the end of the run (also on an error or ^C)."""

from __future__ import annotations

import atexit
import contextlib
import os
import pwd
import shutil
import socket
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import psycopg

BIN = Path(os.environ.get("BENCH_PG_BIN", "/usr/lib/postgresql/15/bin"))
ROOT = Path(__file__).resolve().parents[2] / ".x" / "bench-pg"
MIRRORED = (
    "fsync",
    "synchronous_commit",
    "full_page_writes",
    "wal_level",
    "shared_buffers",
    "work_mem",
    "max_wal_size",
    "min_wal_size",
    "checkpoint_timeout",
    "autovacuum",
    "jit",
)
"""The shared server's settings the private cluster takes over (the rest are initdb's)."""


def _spare_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _as_postgres() -> list[str]:
    """initdb and postgres refuse to run as root: run them as the ``postgres`` user then."""
    if os.geteuid() != 0:
        return []
    pwd.getpwnam("postgres")
    return ["runuser", "-u", "postgres", "--"]


def mirrored_settings(shared_dsn: str) -> dict[str, str]:
    """``MIRRORED`` as the shared server has them (``current_setting``: with units)."""
    with psycopg.connect(shared_dsn, autocommit=True) as conn:
        return {
            name: str(conn.execute("SELECT current_setting(%s)", (name,)).fetchone()[0])  # type: ignore[index]
            for name in MIRRORED
        }


@contextlib.contextmanager
def private_cluster(shared_dsn: str) -> Iterator[tuple[str, dict[str, str]]]:
    """Start the cluster; yields ``(admin DSN, the settings passed)``; stops and deletes it."""
    for tool in ("initdb", "pg_ctl"):
        if not (BIN / tool).exists():
            raise SystemExit(f"bench: {BIN / tool} is missing; set BENCH_PG_BIN to a bin/ folder")
    settings = mirrored_settings(shared_dsn)
    base = ROOT / str(os.getpid())
    shutil.rmtree(base, ignore_errors=True)
    base.mkdir(parents=True)
    data = base / "data"
    runner = _as_postgres()
    if runner:
        shutil.chown(base, "postgres", "postgres")
    port = _spare_port()
    options = {
        "port": str(port),
        "listen_addresses": "127.0.0.1",
        "unix_socket_directories": str(base),
        "shared_preload_libraries": "pg_stat_statements",
        "pg_stat_statements.track": "top",
        "max_connections": "200",
        **settings,
    }
    ctl = [*runner, str(BIN / "pg_ctl"), "-D", str(data)]
    started = False

    def stop() -> None:
        nonlocal started
        if started:
            subprocess.run([*ctl, "-m", "fast", "-w", "stop"], capture_output=True, timeout=60)
            started = False
        shutil.rmtree(base, ignore_errors=True)

    atexit.register(stop)
    try:
        subprocess.run(
            [
                *runner,
                str(BIN / "initdb"),
                "-D",
                str(data),
                "-U",
                "postgres",
                "--auth=trust",
                "-E",
                "UTF8",
                "--locale=C.UTF-8",
                "--no-sync",
            ],
            check=True,
            capture_output=True,
            timeout=120,
        )
        flags = " ".join(f"-c {k}={v}" for k, v in options.items())
        subprocess.run(
            [*ctl, "-l", str(base / "server.log"), "-w", "-t", "60", "-o", flags, "start"],
            check=True,
            capture_output=True,
            timeout=90,
        )
        started = True
        dsn = f"postgresql://postgres@127.0.0.1:{port}/postgres"
        deadline = time.monotonic() + 30
        while True:
            try:
                with psycopg.connect(dsn, autocommit=True) as conn:
                    conn.execute("CREATE EXTENSION IF NOT EXISTS pg_stat_statements")
                    # every bench_* database is created from template1: the view is there too
                with psycopg.connect(
                    f"postgresql://postgres@127.0.0.1:{port}/template1", autocommit=True
                ) as conn:
                    conn.execute("CREATE EXTENSION IF NOT EXISTS pg_stat_statements")
                break
            except psycopg.OperationalError:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.2)
        yield dsn, options
    finally:
        stop()
        atexit.unregister(stop)
