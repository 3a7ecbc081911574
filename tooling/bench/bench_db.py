"""The databases of the benchmark: one fresh database per system and measurement, and the
server's own counters (``pg_stat_database``, ``pg_stat_statements`` when it is preloaded)."""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import io
import os
import shutil
import subprocess
import tarfile
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit, urlunsplit

import psycopg
from psycopg.conninfo import make_conninfo


def dsn_for(base: str, dbname: str) -> str:
    """``base`` pointed at ``dbname``, kept a URL when it is one (asyncpg reads only URLs)."""
    if base.startswith(("postgresql://", "postgres://")):
        return urlunsplit(urlsplit(base)._replace(path=f"/{dbname}"))
    return make_conninfo(base, dbname=dbname)


async def admin_exec(admin_dsn: str, sql: str, params: Sequence[Any] = ()) -> list[Any]:
    async with await psycopg.AsyncConnection.connect(admin_dsn, autocommit=True) as conn:
        cur = await conn.execute(sql.encode() if not params else sql, params or None)
        return await cur.fetchall() if cur.description else []


async def fresh_db(admin_dsn: str, name: str) -> str:
    await admin_exec(admin_dsn, f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
    await admin_exec(admin_dsn, f'CREATE DATABASE "{name}"')
    return dsn_for(admin_dsn, name)


def db_name(system: str) -> str:
    """``bench_<system>_<pid>``: two runs at once (another engineer's, say) never share or drop
    each other's databases (their figures still disturb each other: one machine)."""
    return f"bench_{system.replace('-', '_')}_{os.getpid()}"


async def drop_db(admin_dsn: str, name: str) -> None:
    await admin_exec(admin_dsn, f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


async def xact_commits(admin_dsn: str, name: str) -> int:
    """``xact_commit`` of database ``name`` once its backends have gone (a backend flushes its
    counts when it exits) and the figure has stopped moving (bounded: 3 s)."""
    deadline = time.monotonic() + 3.0
    last: int | None = None
    while True:
        rows = await admin_exec(
            admin_dsn,
            "SELECT (SELECT count(*) FROM pg_stat_activity WHERE datname = %s), "
            "(SELECT xact_commit FROM pg_stat_database WHERE datname = %s)",
            (name, name),
        )
        backends, commits = int(rows[0][0]), int(rows[0][1] or 0)
        if (backends == 0 and commits == last) or time.monotonic() > deadline:
            return commits
        last = commits if backends == 0 else None
        await asyncio.sleep(0.15)


async def pgss_available(dsn: str) -> bool:
    """Whether pg_stat_statements can be created AND read (it needs shared_preload_libraries)."""
    try:
        async with await psycopg.AsyncConnection.connect(dsn, autocommit=True) as conn:
            await conn.execute("CREATE EXTENSION IF NOT EXISTS pg_stat_statements")
            await conn.execute("SELECT 1 FROM pg_stat_statements LIMIT 1")
    except psycopg.Error:
        return False
    return True


async def pgss_calls(dsn: str, name: str, *, reset: bool) -> int:
    async with await psycopg.AsyncConnection.connect(dsn, autocommit=True) as conn:
        if reset:
            await conn.execute("SELECT pg_stat_statements_reset()")
            return 0
        cur = await conn.execute(
            "SELECT coalesce(sum(s.calls), 0) FROM pg_stat_statements s "
            "JOIN pg_database d ON d.oid = s.dbid WHERE d.datname = %s "
            "AND s.query NOT LIKE '%%bench-poll%%' AND s.query NOT LIKE '%%pg_stat_statements%%'",
            (name,),
        )
        row = await cur.fetchone()
        return int(row[0]) if row else 0


SOURCES = ("packages/core/src", "packages/jobs/src")
"""What the editable install of ours runs: a change there mid-run changes what is measured."""


def _git(root: Path, *args: str) -> str:
    return subprocess.run(
        ["git", "-C", str(root), *args], capture_output=True, text=True, check=True, timeout=10
    ).stdout


def git_state() -> str:
    """The commit the editable ultimat3 install runs, plus a digest of any uncommitted change
    to its sources (tracked diffs and untracked files), so a change mid-run shows."""
    root = Path(__file__).resolve().parents[2]
    try:
        head = _git(root, "rev-parse", "--short", "HEAD").strip()
        digest = hashlib.sha256(_git(root, "diff", "HEAD", "--", *SOURCES).encode())
        untracked = _git(root, "ls-files", "--others", "--exclude-standard", "--", *SOURCES)
        for name in sorted(untracked.split()):
            digest.update(name.encode())
            with contextlib.suppress(OSError):
                digest.update((root / name).read_bytes())
    except (OSError, subprocess.SubprocessError):
        return "unknown (no git)"
    if digest.hexdigest() == hashlib.sha256(b"").hexdigest():
        return head
    return f"{head} + uncommitted changes (digest {digest.hexdigest()[:8]})"


def snapshot_ours(dest_root: Path, ref: str = "HEAD") -> tuple[list[Path], str]:
    """Export the COMMITTED sources of ours at ``ref`` (``git archive``) into
    ``dest_root/<commit>`` and answer the folders to put first on the import path, and the
    commit. Others commit to this work tree while a run goes on; a snapshot keeps one run on
    one version."""
    root = Path(__file__).resolve().parents[2]
    head = _git(root, "rev-parse", "--verify", f"{ref}^{{commit}}").strip()
    dest = dest_root / head[:12]
    if not (dest / ".complete").exists():
        tmp = dest_root / f"{head[:12]}.tmp"
        shutil.rmtree(tmp, ignore_errors=True)
        tmp.mkdir(parents=True)
        archive = subprocess.run(
            ["git", "-C", str(root), "archive", "--format=tar", head, "--", *SOURCES],
            capture_output=True,
            check=True,
            timeout=60,
        ).stdout
        with tarfile.open(fileobj=io.BytesIO(archive)) as tar:
            tar.extractall(tmp, filter="data")
        (tmp / ".complete").touch()
        shutil.rmtree(dest, ignore_errors=True)
        tmp.rename(dest)
    return [dest / src for src in SOURCES], head[:7]
