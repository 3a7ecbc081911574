"""A real worker process on Postgres, SIGKILLed at random page boundaries (and mid-page) and
restarted: the rows upserted equal a clean run's, and each page's checkpoint only moves forward.
"""

from __future__ import annotations

import asyncio
import csv
import io
import os
import random
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psycopg
import pytest
from psycopg import sql

WORKER = Path(__file__).with_name("_import_worker.py")
ROWS = 1500


def _csv() -> bytes:
    out = io.StringIO(newline="")
    writer = csv.writer(out, lineterminator="\r\n")
    writer.writerow(["note", "id", "total"])
    for i in range(ROWS):
        note = "" if i % 5 == 0 else f'row {i}, "quoted"\nsecond line é€' if i % 7 == 0 else f"n{i}"
        writer.writerow([note, i, i * 3])
    return out.getvalue().encode()


@pytest.fixture
def procs() -> Iterator[list[subprocess.Popen[str]]]:
    """Worker processes of this test; every one still alive at the end is SIGKILLed by pid."""
    started: list[subprocess.Popen[str]] = []
    try:
        yield started
    finally:
        for proc in started:
            if proc.poll() is None:
                os.kill(proc.pid, signal.SIGKILL)
            proc.wait()
            if proc.stdout is not None:
                proc.stdout.close()


async def _tables(url: str, schema: str) -> None:
    async with await psycopg.AsyncConnection.connect(url, autocommit=True) as conn:
        for table in ("orders_killed", "orders_clean"):
            await conn.execute(
                sql.SQL(
                    "CREATE TABLE {} (id int PRIMARY KEY, total int NOT NULL, note text)"
                ).format(sql.Identifier(schema, table))
            )


async def _rows(url: str, schema: str, table: str) -> list[tuple[Any, ...]]:
    async with await psycopg.AsyncConnection.connect(url, autocommit=True) as conn:
        cur = await conn.execute(
            sql.SQL("SELECT id, total, note FROM {} ORDER BY id").format(
                sql.Identifier(schema, table)
            )
        )
        return await cur.fetchall()


async def _pages(url: str, schema: str, job_id: str) -> dict[str, int]:
    """The completed page steps of the job and the byte offset each checkpointed."""
    async with await psycopg.AsyncConnection.connect(url, autocommit=True) as conn:
        cur = await conn.execute(
            sql.SQL("SELECT name, output FROM {} WHERE job_id = %s AND state = 'completed'").format(
                sql.Identifier(schema, "x_job_steps")
            ),
            (job_id,),
        )
        return {name: int(output["offset"]) for name, output in await cur.fetchall()}


async def _state(url: str, schema: str, job_id: str) -> tuple[str, Any]:
    async with await psycopg.AsyncConnection.connect(url, autocommit=True) as conn:
        cur = await conn.execute(
            sql.SQL("SELECT state, result FROM {} WHERE id = %s").format(
                sql.Identifier(schema, "x_jobs")
            ),
            (job_id,),
        )
        row = await cur.fetchone()
        assert row is not None
        return row[0], row[1]


def _start(
    procs: list[subprocess.Popen[str]], url: str, schema: str, root: Path, table: str, *extra: str
) -> subprocess.Popen[str]:
    proc = subprocess.Popen(
        [
            sys.executable,
            str(WORKER),
            "--dsn",
            url,
            "--schema",
            schema,
            "--root",
            str(root),
            "--table",
            table,
            *extra,
        ],
        stdout=subprocess.PIPE,
        text=True,
    )
    procs.append(proc)
    return proc


async def _exit(proc: subprocess.Popen[str], timeout_s: float = 60) -> int:
    deadline = time.monotonic() + timeout_s
    while proc.poll() is None:
        assert time.monotonic() < deadline, "the worker was not killed in time"
        await asyncio.sleep(0.05)
    return proc.returncode


async def _until_done(url: str, schema: str, job_id: str, timeout_s: float = 60) -> Any:
    deadline = time.monotonic() + timeout_s
    while True:
        state, result = await _state(url, schema, job_id)
        if state in ("done", "failed", "dead"):
            assert state == "done", (state, result)
            return result
        assert time.monotonic() < deadline, f"the import did not finish (state {state})"
        await asyncio.sleep(0.1)


async def _run_clean(procs: list[subprocess.Popen[str]], url: str, schema: str, root: Path) -> Any:
    proc = _start(procs, url, schema, root, "orders_clean", "--enqueue", "orders.csv")
    assert proc.stdout is not None
    job_id = proc.stdout.readline().strip()
    result = await _until_done(url, schema, job_id)
    proc.send_signal(signal.SIGTERM)
    assert await _exit(proc) == 0
    return result, await _pages(url, schema, job_id)


async def test_sigkill_at_random_page_boundaries_loses_nothing_and_checkpoints_only_move_on(
    database_url: str, pg_schema: str, tmp_path: Path, procs: list[subprocess.Popen[str]]
) -> None:
    (tmp_path / "orders.csv").write_bytes(_csv())
    await _tables(database_url, pg_schema)
    clean_result, clean_pages = await _run_clean(procs, database_url, pg_schema, tmp_path)
    pages = len(clean_pages)
    assert pages > 20

    seed = int.from_bytes(os.urandom(4), "big")
    rng = random.Random(seed)
    points = sorted(rng.sample(range(1, pages - 1), 4))
    kills = [(p, rng.choice([0, 0, 1, 2])) for p in points]
    context = f"seed {seed}, kills {kills}"

    seen: dict[str, int] = {}
    job_id = ""
    for n, (page, batch) in enumerate(kills):
        extra = ["--kill-at", f"{page}:{batch}"]
        if n == 0:
            extra += ["--enqueue", "orders.csv"]
        proc = _start(procs, database_url, pg_schema, tmp_path, "orders_killed", *extra)
        if n == 0:
            assert proc.stdout is not None
            job_id = proc.stdout.readline().strip()
        assert await _exit(proc) == -signal.SIGKILL, context
        now = await _pages(database_url, pg_schema, job_id)
        # killed in page `page`: pages 0 .. page-1 checkpointed, and nothing further
        assert sorted(now) == [f"page:{i:05d}" for i in range(page)], context
        assert {k: now[k] for k in seen} == seen, f"a checkpoint moved: {context}"
        offsets = [now[k] for k in sorted(now)]
        assert offsets == sorted(offsets) and len(set(offsets)) == len(offsets), context
        seen = now

    last = _start(procs, database_url, pg_schema, tmp_path, "orders_killed")
    result = await _until_done(database_url, pg_schema, job_id)
    last.send_signal(signal.SIGTERM)
    assert await _exit(last) == 0
    final = await _pages(database_url, pg_schema, job_id)
    assert {k: final[k] for k in seen} == seen, context
    assert final == clean_pages, context  # the same pages, checkpointed at the same offsets
    assert result == clean_result, context
    killed = await _rows(database_url, pg_schema, "orders_killed")
    assert killed == await _rows(database_url, pg_schema, "orders_clean"), context
    assert len(killed) == ROWS
