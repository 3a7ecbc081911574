"""What the fault tests share: worker processes, bounded waits, and the "nothing lost" checks
over a schema of the test's own.

"Nothing lost": every committed enqueue ends ``done``, ``dead`` or ``cancelled`` (``failed``
for a job without a dead letter), none stays ``running``, and a step that was recorded completed
never ran again — no execution of its function (``fault_effects``, written by the function
itself) STARTED after the statement that recorded it completed.
"""

from __future__ import annotations

import asyncio
import contextlib
import inspect
import json
import os
import signal
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final

import psycopg
from psycopg import sql
from psycopg.conninfo import make_conninfo

from ultimat3.core import new_id
from ultimat3.jobs.adapter import EnqueueRequest
from ultimat3.jobs.postgres import migrate

HERE: Final = Path(__file__).resolve().parent
DEFAULT_DATABASE_URL: Final = "postgresql://postgres@127.0.0.1:5432/test"
TERMINAL: Final = ("done", "dead", "cancelled", "failed")


def database_url() -> str:
    return os.environ.get("DATABASE_URL") or DEFAULT_DATABASE_URL


def app_name(label: str) -> str:
    """A unique ``application_name``: the only backends a test may terminate carry one."""
    return f"x-faults-{label}-{uuid.uuid4().hex[:10]}"


def with_app_name(url: str, name: str) -> str:
    return make_conninfo(url, application_name=name)


async def until(
    check: Callable[[], Any], *, timeout_s: float, what: str, every_s: float = 0.02
) -> Any:
    """Poll ``check`` (plain or async) until it answers something truthy; answers it. Fails the
    test naming ``what`` after ``timeout_s``."""
    deadline = time.monotonic() + timeout_s
    while True:
        got = check()
        if inspect.isawaitable(got):
            got = await got
        if got:
            return got
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout_s}s waiting for {what}")
        await asyncio.sleep(every_s)


# --- schemas --------------------------------------------------------------------------------------

EFFECTS_DDL: Final = """
CREATE TABLE {effects} (
    id       bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    job_id   uuid NOT NULL,
    step     text NOT NULL,
    attempt  integer NOT NULL,
    pid      integer NOT NULL,
    note     text NOT NULL,
    at       timestamptz NOT NULL DEFAULT clock_timestamp()
);
CREATE TABLE {gates} (job_id uuid PRIMARY KEY);
"""


async def make_schema(url: str, schema: str) -> None:
    """Migrate ``schema`` and add the tables the step functions write."""
    await migrate(url, schema=schema)
    async with await psycopg.AsyncConnection.connect(url, autocommit=True) as conn:
        await conn.execute(
            sql.SQL(EFFECTS_DDL).format(
                effects=sql.Identifier(schema, "fault_effects"),
                gates=sql.Identifier(schema, "fault_gates"),
            )
        )


async def drop_schema(url: str, schema: str) -> None:
    async with await psycopg.AsyncConnection.connect(url, autocommit=True) as conn:
        await conn.execute(
            sql.SQL("DROP SCHEMA IF EXISTS {} CASCADE").format(sql.Identifier(schema))
        )


@dataclass(frozen=True, slots=True)
class Effect:
    job_id: str
    step: str
    attempt: int
    pid: int
    note: str
    at_ms: float


class Db:
    """Reads (and a few writes) over one schema, each on a short connection of its own."""

    def __init__(self, url: str, schema: str) -> None:
        self.url = url
        self.schema = schema

    def t(self, table: str) -> sql.Identifier:
        return sql.Identifier(self.schema, table)

    async def rows(self, query: str, params: Sequence[Any] = ()) -> list[Any]:
        """``query`` with ``{x_jobs}`` and the other tables filled in as quoted identifiers."""
        async with await psycopg.AsyncConnection.connect(
            self.url, autocommit=True, connect_timeout=5
        ) as conn:
            cur = await conn.execute(sql.SQL(query).format(**self._tables()), params)
            return await cur.fetchall() if cur.description else []

    async def value(self, query: str, params: Sequence[Any] = ()) -> Any:
        rows = await self.rows(query, params)
        return rows[0][0] if rows else None

    def _tables(self) -> dict[str, sql.Composable]:
        names = ("x_jobs", "x_job_steps", "x_job_counters", "x_workers", "fault_effects")
        return {n: self.t(n) for n in (*names, "fault_gates", "fault_orders")}

    async def effects(self, job_id: str | None = None) -> list[Effect]:
        rows = await self.rows(
            "SELECT job_id::text, step, attempt, pid, note,"
            " extract(epoch FROM at) * 1000 FROM {fault_effects}"
            " WHERE %s::uuid IS NULL OR job_id = %s::uuid ORDER BY id",
            (job_id, job_id),
        )
        return [Effect(r[0], r[1], r[2], r[3], r[4], float(r[5])) for r in rows]

    async def starts(self, job_id: str, step: str) -> int:
        return sum(1 for e in await self.effects(job_id) if e.step == step and e.note == "start")

    async def states(self, ids: Sequence[str]) -> dict[str, str]:
        rows = await self.rows(
            "SELECT id::text, state FROM {x_jobs} WHERE id = ANY(%s::uuid[])", (list(ids),)
        )
        return {r[0]: r[1] for r in rows}

    async def job(self, job_id: str) -> dict[str, Any]:
        rows = await self.rows(
            "SELECT state, attempts, worker_id, claim::text, lease_expires_at, last_error,"
            " result, run_at, created_at, updated_at, finished_at, crashes"
            " FROM {x_jobs} WHERE id = %s",
            (job_id,),
        )
        assert rows, f"job {job_id} is not in the table"
        keys = [
            *("state", "attempts", "worker_id", "claim", "lease_expires_at", "last_error"),
            *("result", "run_at", "created_at", "updated_at", "finished_at", "crashes"),
        ]
        return dict(zip(keys, rows[0], strict=True))

    async def steps(self, job_id: str) -> dict[str, dict[str, Any]]:
        rows = await self.rows(
            "SELECT name, state, executions, output, updated_at FROM {x_job_steps}"
            " WHERE job_id = %s",
            (job_id,),
        )
        return {
            r[0]: {"state": r[1], "executions": r[2], "output": r[3], "updated_at": r[4]}
            for r in rows
        }

    async def gate(self, job_id: str) -> None:
        await self.rows("INSERT INTO {fault_gates} (job_id) VALUES (%s)", (job_id,))

    async def all_settled(self, ids: Sequence[str]) -> bool:
        states = await self.states(ids)
        return len(states) == len(set(ids)) and all(s in TERMINAL for s in states.values())

    async def assert_nothing_lost(self, ids: Sequence[str], *, done: bool = True) -> None:
        """Every id is stored and ended (``done`` when asked), none is running, and no step
        recorded completed ran again after it was recorded."""
        states = await self.states(ids)
        missing = set(ids) - set(states)
        assert not missing, f"{len(missing)} committed enqueues are not in the table"
        stuck = {i: s for i, s in states.items() if s not in TERMINAL}
        assert not stuck, f"{len(stuck)} jobs did not end: {sorted(stuck.values())[:5]}"
        if done:
            bad = {i: s for i, s in states.items() if s != "done"}
            assert not bad, f"{len(bad)} jobs ended but not done: {sorted(bad.values())[:5]}"
        assert await self.value("SELECT count(*) FROM {x_jobs} WHERE state = 'running'") == 0
        assert await self.replays() == [], "a completed step ran again"
        assert (
            await self.value(
                "SELECT count(*) FROM {x_job_steps} WHERE state = 'completed' AND output IS NULL"
            )
            == 0
        ), "a step was recorded completed without its output"

    async def replays(self) -> list[tuple[str, str, int]]:
        """``(job_id, step, attempt)`` of every step execution that STARTED after the step was
        recorded completed (both stamps are the database's clock)."""
        rows = await self.rows(
            "SELECT e.job_id::text, e.step, e.attempt FROM {fault_effects} e"
            " JOIN {x_job_steps} s ON s.job_id = e.job_id AND s.name = e.step"
            " WHERE e.note = 'start' AND s.state = 'completed' AND e.at > s.updated_at"
        )
        return [(r[0], r[1], r[2]) for r in rows]


def work_request(
    key: str, *, hang: str | None = None, gate: str | None = None, pause_ms: int = 0
) -> EnqueueRequest:
    """A ``faults.steps`` job as the driver queues it (what ``STEPS_JOB.enqueue`` would send)."""
    payload: dict[str, Any] = {"key": key, "hang": hang, "gate": gate, "pause_ms": pause_ms}
    return EnqueueRequest(
        id=new_id(),
        run_id=new_id(),
        name="faults.steps",
        queue="faults",
        payload=payload,
        idempotency_key=key,
        max_attempts=20,
    )


# --- worker processes -----------------------------------------------------------------------------


class WorkerProcess:
    """One ``python -m ultimat3_testkit.fault_app`` process and its JSON-lines log."""

    def __init__(self, args: Sequence[str], *, env: dict[str, str] | None = None) -> None:
        self.dir = Path(tempfile.mkdtemp(prefix="x-faults-worker-"))
        self.events_path = self.dir / "events.jsonl"
        self.events_path.touch()
        full_env = {**os.environ, **(env or {})}
        self._out = open(self.dir / "output.txt", "wb")  # noqa: SIM115
        self.proc = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "ultimat3_testkit.fault_app",
                "--events",
                str(self.events_path),
                *args,
            ],
            env=full_env,
            cwd=self.dir,
            stdout=self._out,
            stderr=subprocess.STDOUT,
        )
        self.pid = self.proc.pid

    def events(self, name: str | None = None) -> list[dict[str, Any]]:
        out: list[dict[str, Any]] = []
        for line in self.events_path.read_text(encoding="utf-8").splitlines():
            if not line.strip():
                continue
            try:
                event = json.loads(line)
            except json.JSONDecodeError:
                continue  # a line still being written
            if name is None or event["event"] == name:
                out.append(event)
        return out

    def output(self) -> str:
        return (self.dir / "output.txt").read_text(encoding="utf-8", errors="replace")

    def alive(self) -> bool:
        return self.proc.poll() is None

    async def wait_event(self, name: str, *, timeout_s: float = 15.0, count: int = 1) -> Any:
        def seen() -> list[dict[str, Any]] | None:
            if not self.alive() and len(self.events(name)) < count:
                raise AssertionError(
                    f"worker {self.pid} exited ({self.proc.returncode}) before logging {name}:"
                    f"\n{self.output()[-3000:]}"
                )
            got = self.events(name)
            return got if len(got) >= count else None

        got = await until(seen, timeout_s=timeout_s, what=f"{name} x{count} from {self.pid}")
        return got[count - 1]

    def signal(self, sig: signal.Signals) -> None:
        if self.alive():
            os.kill(self.pid, sig)

    async def stop(self, *, timeout_s: float = 15.0) -> int:
        """SIGTERM (a drain), then wait for the exit; answers the exit code. A worker that does
        not exit is asked for its tasks' stacks (SIGUSR1), shown in the failure."""
        self.signal(signal.SIGCONT)
        self.signal(signal.SIGTERM)
        try:
            await until(lambda: not self.alive(), timeout_s=timeout_s, what=f"{self.pid} to exit")
        except AssertionError:
            self.signal(signal.SIGUSR1)
            await asyncio.sleep(1)
            tail = [json.dumps(e, default=str)[:300] for e in self.events()[-30:]]
            raise AssertionError(
                f"worker {self.pid} did not exit within {timeout_s}s of SIGTERM; its last "
                "events:\n" + "\n".join(tail) + "\n" + self.output()[-12_000:]
            ) from None
        return self.proc.returncode

    def kill(self) -> None:
        if self.alive():
            os.kill(self.pid, signal.SIGKILL)
        with contextlib.suppress(subprocess.TimeoutExpired):
            self.proc.wait(timeout=10)
        self._out.close()


WorkerFactory = Callable[..., WorkerProcess]


def worker_args(
    dsn: str,
    schema: str,
    *,
    visibility_ms: int = 1000,
    max_in_flight: int | None = 4,
    pool_size: int = 6,
    poll_ms: int = 50,
    idle_max_ms: int = 500,
    queues: str = "faults",
    wake: bool = False,
    wake_dsn: str | None = None,
    probe_every_s: float = 30.0,
    probe_timeout_s: float = 2.0,
    worker_id: str | None = None,
    extra: Sequence[str] = (),
) -> list[str]:
    args = [
        "--dsn",
        dsn,
        "--schema",
        schema,
        "--visibility-ms",
        str(visibility_ms),
        "--pool-size",
        str(pool_size),
        "--poll-ms",
        str(poll_ms),
        "--idle-max-ms",
        str(idle_max_ms),
        "--queues",
        queues,
        "--probe-every-s",
        str(probe_every_s),
        "--probe-timeout-s",
        str(probe_timeout_s),
    ]
    if max_in_flight is not None:
        args += ["--max-in-flight", str(max_in_flight)]
    if wake:
        args.append("--wake")
    if wake_dsn is not None:
        args += ["--wake-dsn", wake_dsn]
    if worker_id is not None:
        args += ["--worker-id", worker_id]
    return [*args, *extra]


async def terminate_backends(url: str, application_name: str) -> list[int]:
    """``pg_terminate_backend`` for the backends carrying ``application_name`` (ours only)."""
    async with await psycopg.AsyncConnection.connect(url, autocommit=True) as conn:
        cur = await conn.execute(
            "SELECT pid, pg_terminate_backend(pid) FROM pg_stat_activity"
            " WHERE application_name = %s AND pid <> pg_backend_pid()",
            (application_name,),
        )
        return [r[0] for r in await cur.fetchall() if r[1]]


async def backend_pids(
    url: str, application_name: str, *, waiting: bool = False, query_like: str = "%"
) -> list[int]:
    """The backends carrying ``application_name`` (only those waiting on a lock, only those
    whose current statement is ``LIKE query_like``, when asked)."""
    async with await psycopg.AsyncConnection.connect(url, autocommit=True) as conn:
        cur = await conn.execute(
            "SELECT pid FROM pg_stat_activity WHERE application_name = %s"
            " AND (NOT %s OR wait_event_type = 'Lock') AND query LIKE %s ORDER BY pid",
            (application_name, waiting, query_like),
        )
        return [r[0] for r in await cur.fetchall()]


async def terminate(url: str, pid: int, application_name: str) -> bool:
    """``pg_terminate_backend(pid)`` — refused unless that backend carries our name."""
    async with await psycopg.AsyncConnection.connect(url, autocommit=True) as conn:
        cur = await conn.execute(
            "SELECT pg_terminate_backend(pid) FROM pg_stat_activity"
            " WHERE pid = %s AND application_name = %s",
            (pid, application_name),
        )
        row = await cur.fetchone()
        return bool(row and row[0])
