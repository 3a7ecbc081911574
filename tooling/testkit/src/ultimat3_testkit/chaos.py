"""The chaos soak (#23): worker processes on a private PostgreSQL cluster, SIGKILLed and
SIGSTOP/SIGCONTed at random, the server restarted once with ``-m immediate``; at the end the
invariants are checked in SQL.

    python -m ultimat3_testkit.chaos --jobs 100000 --minutes 20     # the long soak

``tests/chaos`` runs it bounded (about a minute). Every address is loopback (a Unix socket).

The invariants (each a count of violations; the soak passes when all are 0):

- I1 nothing lost: every enqueued job is ``done``.
- I2 no phantom: the table holds exactly the enqueued jobs.
- I3 ``step.transaction`` effects exactly once: one effect row per ``tx`` job.
- I5 completed steps never re-run: no effect of a step written after the step's completed
  record.
- I6 one owner per settle: every settle (a row leaving ``running``) was fenced on a claim that
  was handed out to the very worker that settled, and no claim settled twice (a trigger records
  every claim and every settle in the same transaction).
- I7 attempts bounded: no row's ``attempts`` is over its ``max_attempts``.
- I8 the keyed cap never exceeded, as the bodies recorded it (an interval open across the
  server's restart ends at the restart: its slot's lease cannot be renewed past it; an interval
  a SIGKILL cut short ends at the kill).

Reported, not a violation: ``step.run`` effects that ran twice (the at-least-once contract).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import random
import shutil
import signal
import sys
import tempfile
import time
import uuid
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path

import psycopg
from psycopg import sql

from ultimat3.core import new_id
from ultimat3.jobs.adapter import EnqueueRequest
from ultimat3.jobs.embedded import EmbeddedPostgres, embedded_postgres
from ultimat3.jobs.postgres import postgres_job_driver
from ultimat3_testkit.fault_app import CHAOS_CAP
from ultimat3_testkit.faults import TERMINAL, Db, WorkerProcess, make_schema, worker_args

SCHEMA = "chaos"
GROUPS = 4
CAP_DDL = """
CREATE TABLE {cap} (
    id         bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    job_id     uuid NOT NULL,
    grp        text NOT NULL,
    pid        integer NOT NULL,
    entered_at timestamptz NOT NULL,
    left_at    timestamptz
);
CREATE TABLE {kills} (pid integer PRIMARY KEY, at timestamptz NOT NULL);
"""
OWNERS_DDL = """
CREATE TABLE {claims} (job_id uuid NOT NULL, claim uuid NOT NULL, worker_id text NOT NULL);
CREATE TABLE {settles} (
    job_id uuid NOT NULL, claim uuid, worker_id text, state text NOT NULL
);
CREATE FUNCTION {fn}() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF NEW.claim IS NOT NULL AND NEW.claim IS DISTINCT FROM OLD.claim THEN
        INSERT INTO {claims} VALUES (NEW.id, NEW.claim, NEW.worker_id);
    END IF;
    IF OLD.state = 'running' AND NEW.state <> 'running' THEN
        INSERT INTO {settles} VALUES (OLD.id, OLD.claim, OLD.worker_id, NEW.state);
    END IF;
    RETURN NEW;
END $$;
CREATE TRIGGER chaos_owners AFTER UPDATE ON {x_jobs}
    FOR EACH ROW EXECUTE FUNCTION {fn}();
"""
"""I6's record: every claim handed out (its token and worker) and every settle (the claim and
worker it was fenced on), written by a trigger in the settling statement's own transaction."""


@dataclass
class Report:
    jobs: int
    seconds: float = 0.0
    kills: int = 0
    stops: int = 0
    restarts: int = 0
    violations: dict[str, int] = field(default_factory=dict)
    run_duplicates: int = 0
    """``step.run`` effects that ran more than once (allowed: at-least-once)."""
    tx_jobs: int = 0
    run_jobs: int = 0
    max_cap_seen: int = 0
    claims: int = 0
    """Claims handed out (I6's record)."""
    settles: int = 0
    """Settles that landed, each on one claim (I6's record)."""
    settled_in_chaos: int = 0
    """Jobs ended when the chaos stopped (the rest ended in the calm tail)."""
    tail_seconds: float = 0.0
    """From the chaos's end to the last job ended."""

    @property
    def ok(self) -> bool:
        return all(v == 0 for v in self.violations.values())


def _requests(n: int, rng: random.Random) -> tuple[list[EnqueueRequest], dict[str, str]]:
    out: list[EnqueueRequest] = []
    modes: dict[str, str] = {}
    for i in range(n):
        mode = rng.choice(("tx", "tx", "run", "sleep", "capped"))
        key = f"chaos-{i}"
        req = EnqueueRequest(
            id=new_id(),
            run_id=new_id(),
            name="chaos.capped" if mode == "capped" else "chaos.mixed",
            queue="faults",
            payload={"key": key, "mode": mode, "group": f"g{i % GROUPS}"},
            idempotency_key=key,
            max_attempts=25,
            concurrency_key=f"g{i % GROUPS}" if mode == "capped" else None,
        )
        out.append(req)
        modes[req.id] = mode
    return out, modes


def _restart_immediately(pg: EmbeddedPostgres) -> None:
    import os

    from ultimat3.jobs.embedded._server import load_package

    user = "embedded_postgres" if os.geteuid() == 0 else None
    load_package().pg_ctl(
        ["-w", "-t", "60", "-m", "immediate", "-l", str(pg.log_path), "restart"],
        pgdata=pg.data_dir,
        user=user,
        timeout=90,
    )


async def _record_kill(url: str, pid: int) -> None:
    for _ in range(100):
        try:
            async with await psycopg.AsyncConnection.connect(
                url, autocommit=True, connect_timeout=2
            ) as conn:
                await conn.execute(
                    sql.SQL(
                        "INSERT INTO {} (pid, at) VALUES (%s, clock_timestamp()) "
                        "ON CONFLICT DO NOTHING"
                    ).format(sql.Identifier(SCHEMA, "chaos_kills")),
                    (pid,),
                )
            return
        except psycopg.Error:
            await asyncio.sleep(0.1)  # the server is restarting


async def _check(
    db: Db, ids: list[str], modes: dict[str, str], report: Report, died_at: object = None
) -> None:
    tx = [i for i, m in modes.items() if m == "tx"]
    run = [i for i, m in modes.items() if m == "run"]
    report.tx_jobs, report.run_jobs = len(tx), len(run)
    v = report.violations
    v["I1 lost"] = int(
        await db.value(
            "SELECT %s - count(*) FROM {x_jobs} WHERE id = ANY(%s::uuid[]) AND state = 'done'",
            (len(ids), ids),
        )
    )
    v["I2 phantom"] = int(
        await db.value("SELECT count(*) FROM {x_jobs} WHERE NOT id = ANY(%s::uuid[])", (ids,))
    )
    v["I3 tx effect not exactly once"] = int(  # one grouping pass (100,000 jobs: no per-job scan)
        await db.value(
            "SELECT count(*) FROM unnest(%s::uuid[]) AS j(id) LEFT JOIN (SELECT job_id, count(*) "
            "AS n FROM {fault_effects} WHERE step = 'tx' GROUP BY job_id) e ON e.job_id = j.id "
            "WHERE coalesce(e.n, 0) <> 1",
            (tx,),
        )
    )
    v["I5 completed step re-ran"] = int(
        await db.value(
            "SELECT count(*) FROM {fault_effects} e JOIN {x_job_steps} s "
            "ON s.job_id = e.job_id AND s.name = e.step "
            "WHERE s.state = 'completed' AND e.step <> 'tx' AND e.at > s.updated_at"
        )
    )
    v["I6 settle not by its one owner"] = int(
        await db.value(
            "SELECT (SELECT count(*) FROM (SELECT claim FROM chaos.chaos_settles "
            "GROUP BY job_id, claim HAVING count(*) > 1) twice) "
            "+ (SELECT count(*) FROM chaos.chaos_settles s LEFT JOIN (SELECT DISTINCT job_id, "
            "claim, worker_id FROM chaos.chaos_claims) c ON c.job_id = s.job_id "
            "AND c.claim = s.claim AND c.worker_id = s.worker_id WHERE c.job_id IS NULL)"
        )
    )
    report.settles = int(await db.value("SELECT count(*) FROM chaos.chaos_settles"))
    report.claims = int(await db.value("SELECT count(*) FROM chaos.chaos_claims"))
    v["I7 attempts over max"] = int(
        await db.value("SELECT count(*) FROM {x_jobs} WHERE attempts > max_attempts")
    )
    peak = await db.value(  # a sweep per group: +1 at an entry, -1 at an exit (exits first)
        "WITH cut AS (SELECT c.grp, c.entered_at AS s, coalesce(c.left_at, k.at, 'infinity') AS e "
        "FROM chaos.chaos_cap c LEFT JOIN chaos.chaos_kills k ON k.pid = c.pid), "
        "spans AS (SELECT grp, s, CASE WHEN s < %s::timestamptz AND e > %s::timestamptz "
        "THEN %s::timestamptz ELSE e END AS e FROM cut), "
        "ok AS (SELECT * FROM spans WHERE e > s), "
        "ev AS (SELECT grp, s AS t, 1 AS d FROM ok UNION ALL "
        "SELECT grp, e, -1 FROM ok WHERE e < 'infinity') "
        "SELECT coalesce(max(n), 0) FROM (SELECT sum(d) OVER (PARTITION BY grp ORDER BY t, d "
        "ROWS UNBOUNDED PRECEDING) AS n FROM ev) t",
        (died_at, died_at, died_at),
    )
    report.max_cap_seen = int(peak)
    v["I8 cap exceeded"] = max(0, report.max_cap_seen - CHAOS_CAP)
    report.run_duplicates = int(
        await db.value(
            "SELECT count(*) FROM (SELECT job_id FROM {fault_effects} WHERE step = 'run' "
            "GROUP BY job_id HAVING count(*) > 1) d"
        )
    )


async def _diagnose(db: Db, alive: list[WorkerProcess]) -> str:
    """Why the jobs did not settle: the stuck rows, the database's sessions, and where every
    worker's tasks wait (SIGUSR1 makes a fault_app worker print its tasks' stacks)."""
    for proc in alive:
        proc.signal(signal.SIGUSR1)
    await asyncio.sleep(2)
    states = await db.rows(
        "SELECT name, state, count(*), max(attempts), max(crashes), "
        "min(run_at) - now(), max(lease_expires_at) - now() FROM {x_jobs} "
        "WHERE state <> 'done' GROUP BY 1, 2"
    )
    stuck = await db.rows(
        "SELECT id, name, state, attempts, crashes, crash_streak, worker_id, run_at - now(), "
        "lease_expires_at - now(), concurrency_key, wait_event FROM {x_jobs} "
        "WHERE state <> 'done' ORDER BY run_at LIMIT 12"
    )
    sessions = await db.rows(
        "SELECT pid, application_name, state, wait_event_type, wait_event, "
        "now() - state_change, left(query, 100) FROM pg_stat_activity "
        "WHERE datname = current_database() AND pid <> pg_backend_pid()"
    )
    workers = await db.rows("SELECT id, last_heartbeat_at - now(), in_flight FROM {x_workers}")
    leases = await db.rows(
        "SELECT lease_key, slot, holder, expires_at - now() FROM chaos.x_job_leases"
    )
    tails = "\n".join(
        f"--- worker {p.pid} (alive {p.alive()})\n{p.output()[-6000:]}" for p in alive
    )
    return (
        f"not settled: {states}\nstuck rows: {stuck}\nsessions: {sessions}\n"
        f"workers: {workers}\nleases: {leases}\nworker output:\n{tails}"
    )


async def soak(*, jobs: int, seconds: float, workers: int = 3, seed: int = 23) -> Report:
    """One soak on a fresh private cluster (deleted afterwards); answers the report."""
    rng = random.Random(seed)
    base = Path(tempfile.mkdtemp(prefix="x-chaos-pg-"))
    pg = embedded_postgres(base / "pg")
    procs: list[WorkerProcess] = []
    report = Report(jobs=jobs)
    started = time.monotonic()
    try:
        pg.start()
        url = pg.url
        await make_schema(url, SCHEMA)
        async with await psycopg.AsyncConnection.connect(url, autocommit=True) as conn:
            await conn.execute(
                sql.SQL(CAP_DDL).format(
                    cap=sql.Identifier(SCHEMA, "chaos_cap"),
                    kills=sql.Identifier(SCHEMA, "chaos_kills"),
                )
            )
            await conn.execute(
                sql.SQL(OWNERS_DDL).format(
                    claims=sql.Identifier(SCHEMA, "chaos_claims"),
                    settles=sql.Identifier(SCHEMA, "chaos_settles"),
                    fn=sql.Identifier(SCHEMA, "chaos_owners"),
                    x_jobs=sql.Identifier(SCHEMA, "x_jobs"),
                )
            )
        requests, modes = _requests(jobs, rng)
        driver = postgres_job_driver(url, schema=SCHEMA, max_size=2)
        try:
            for i in range(0, len(requests), 1000):
                await driver.enqueue_many(requests[i : i + 1000])
        finally:
            await driver.close()
        ids = [r.id for r in requests]
        db = Db(url, SCHEMA)

        def start() -> WorkerProcess:
            proc = WorkerProcess(
                worker_args(url, SCHEMA, visibility_ms=2000, max_in_flight=8, pool_size=12)
            )
            procs.append(proc)
            return proc

        alive = [start() for _ in range(workers)]
        for proc in alive:
            await proc.wait_event("faults.ready", timeout_s=60)
        chaos_started = time.monotonic()  # the chaos runs `seconds` from the workers' start
        restart_at = chaos_started + min(seconds / 2, 8.0)
        restarted = False
        # the server's clock just before its restart: a capped body open across the death
        # counts only until it (no renewal reaches a dead server, so the slot's 2 s lease may
        # lapse during the outage and the restarted server rightly hands the slot on; the
        # Redis soak counts the same way)
        died_at: object = None

        async def unsettled() -> int | None:
            try:
                ended = await db.value(
                    "SELECT count(*) FROM {x_jobs} WHERE id = ANY(%s::uuid[]) AND state = "
                    "ANY(%s::text[])",
                    (ids, list(TERMINAL)),
                )
            except psycopg.Error:
                return None  # the server is restarting
            return len(ids) - int(ended)

        async def settled() -> bool:
            return await unsettled() == 0

        while time.monotonic() - chaos_started < seconds:
            if restarted and report.kills >= 3 and await settled():
                break
            await asyncio.sleep(rng.uniform(1.0, 2.0))
            if not restarted and time.monotonic() >= restart_at:
                died_at = await db.value("SELECT clock_timestamp()")  # the server's clock
                await asyncio.to_thread(_restart_immediately, pg)
                restarted = True
                report.restarts += 1
                continue
            victim = rng.choice(alive)
            if rng.random() < 0.6:
                victim.signal(signal.SIGKILL)
                await asyncio.to_thread(victim.proc.wait, 10)
                await _record_kill(url, victim.pid)
                report.kills += 1
                alive[alive.index(victim)] = start()
            else:
                victim.signal(signal.SIGSTOP)
                await asyncio.sleep(rng.uniform(0.2, 0.6))  # under the lease's renew margin
                victim.signal(signal.SIGCONT)
                report.stops += 1
        left = await unsettled()
        report.settled_in_chaos = len(ids) - (len(ids) if left is None else left)
        tail_started = time.monotonic()
        if not await _tail(unsettled, stall_s=max(120.0, min(seconds, 300.0))):
            raise AssertionError(await _diagnose(db, alive))
        report.tail_seconds = round(time.monotonic() - tail_started, 1)
        for proc in alive:
            await proc.stop(timeout_s=30)
        await _check(db, ids, modes, report, died_at)
    finally:
        for proc in procs:
            proc.kill()
            shutil.rmtree(proc.dir, ignore_errors=True)
        pg.stop()
        shutil.rmtree(base, ignore_errors=True)
    report.seconds = round(time.monotonic() - started, 1)
    return report


async def _tail(unsettled: Callable[[], Awaitable[int | None]], *, stall_s: float) -> bool:
    """Wait, the chaos over, until every job ended: answers ``False`` when ``stall_s`` pass with
    no job ending (a stall), however long the backlog takes to drain while it moves."""
    best: int | None = None
    moved = time.monotonic()
    while True:
        left = await unsettled()
        if left == 0:
            return True
        if left is not None and (best is None or left < best):
            best, moved = left, time.monotonic()
        if time.monotonic() - moved > stall_s:
            return False
        await asyncio.sleep(0.5)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m ultimat3_testkit.chaos")
    parser.add_argument("--jobs", type=int, default=2000)
    parser.add_argument("--minutes", type=float, default=1.0)
    parser.add_argument("--workers", type=int, default=3)
    parser.add_argument("--seed", type=int, default=int(uuid.uuid4().int % 10_000))
    args = parser.parse_args(argv)
    report = asyncio.run(
        soak(jobs=args.jobs, seconds=args.minutes * 60, workers=args.workers, seed=args.seed)
    )
    print(json.dumps({**report.__dict__, "ok": report.ok, "seed": args.seed}, indent=2))
    return 0 if report.ok else 1


if __name__ == "__main__":
    sys.exit(main())
