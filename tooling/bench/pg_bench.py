"""Side-by-side benchmark of ultimat3's Postgres job driver against PGQueuer, Oban for Python
and Procrastinate, on ONE Postgres, in one run (issue 5, "Benchmarks").

    bash tooling/bench/setup_peers.sh                      # once: .x/bench-venv
    .x/bench-venv/bin/python tooling/bench/pg_bench.py [--only ultimat3,pgqueuer] [--jobs 10000]

Every system gets a fresh database (``bench_<system>``, dropped and re-created for every
measurement) on a PRIVATE cluster the run starts (``--cluster private``, the default:
bench_cluster.py — initdb under .x/bench-pg/, a spare port, pg_stat_statements preloaded, the
shared server's fsync / WAL / buffer settings copied from ``--dsn``; deleted at the end), or on
the server named by ``--dsn`` itself (``--cluster shared``; default ``$DATABASE_URL`` or
postgresql://postgres@127.0.0.1:5432/test). Measured, 3 times each (the table shows medians):

(a) 1,000 single enqueues, rows/s; a bulk enqueue of 1,000, rows/s. Every system's enqueue
    database is open at once and the systems take turns (bench_measure.measure_enqueue_interleaved:
    5 rounds, ABC CBA ..., a system's figure the median of its rounds), so all of them meet the
    same machine state.
(b) drain of ``--jobs`` pre-enqueued no-op jobs by ONE worker process (a child process), from
    the worker's start to the moment the database holds every job settled.
(c) pickup latency of an idle worker (a child process): 200 enqueues 300 ms apart from this
    process; latency = the body's start minus the enqueue's return (its commit), both on
    CLOCK_MONOTONIC; p50 and p99.
(d) ours only: outbox relay rows/s over 10,000 staged rows.
(e) server work per no-op job during (b): commits from ``pg_stat_database.xact_commit``
    deltas, statements from ``pg_stat_statements`` when the server preloads it, else counted
    in the worker process at psycopg's cursor (``n/a`` for PGQueuer on asyncpg).

Every loop is bounded in count and time; a system that fails is reported, not retried.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import sys
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from bench_cluster import private_cluster
from bench_db import (
    admin_exec,
    db_name,
    drop_db,
    fresh_db,
    git_state,
    pgss_available,
    snapshot_ours,
)
from bench_measure import (
    child_drain,
    child_latency,
    measure_drain,
    measure_enqueue_interleaved,
    measure_latency,
    measure_relay,
)
from bench_ours import OVERRIDES_ENV
from bench_systems import SYSTEMS, System

DEFAULT_DSN = "postgresql://postgres@127.0.0.1:5432/test"
SNAPSHOTS = Path(__file__).resolve().parents[2] / ".x" / "bench-snapshot"


@dataclass(frozen=True)
class Metric:
    key: str
    label: str
    higher_is_better: bool
    target: str
    fmt: str = "{:,.0f}"


METRICS: tuple[Metric, ...] = (
    Metric("single", "single enqueue, rows/s", True, ">= best peer"),
    Metric("bulk", "bulk enqueue (1,000 a call; median of 5), rows/s", True, ">= best peer"),
    Metric("drain", "drain no-op jobs, 1 process, jobs/s", True, ">= best peer (aim 1.5x)"),
    Metric("p50", "idle pickup p50, ms", False, "<= 3 ms", "{:.1f}"),
    Metric("p99", "idle pickup p99, ms", False, "<= 5 ms", "{:.1f}"),
    Metric("relay", "outbox relay 10,000 rows, rows/s", True, ">= 10,000"),
    Metric("commits", "commits per no-op job (drain)", False, "<= 0.2", "{:.3f}"),
    Metric("statements", "statements per no-op job (drain)", False, "<= 0.3", "{:.3f}"),
    Metric("cpu", "worker process CPU per job, ms (drain)", False, "-", "{:.3f}"),
)


@dataclass
class Results:
    samples: dict[tuple[str, str], list[float]] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)
    loads: list[float] = field(default_factory=list)
    max_load: float | None = None
    load_wait_s: float = 0.0

    def add(self, system: str, key: str, value: float | None) -> None:
        if value is not None:
            self.samples.setdefault((system, key), []).append(value)

    def median(self, system: str, key: str) -> float | None:
        got = self.samples.get((system, key))
        return statistics.median(got) if got else None


async def wait_quiet(max_load: float | None, budget_s: float) -> None:
    """Wait (at most ``budget_s``) until the 1-min load average is below ``max_load``: the
    machine may be shared, and a busy neighbour is noise in every figure."""
    if max_load is None:
        return
    for _ in range(max(0, int(budget_s // 2))):
        if os.getloadavg()[0] < max_load:
            return
        await asyncio.sleep(2)


async def guarded(
    results: Results, label: str, fn: Callable[[], Awaitable[dict[str, Any]]]
) -> dict[str, Any]:
    await wait_quiet(results.max_load, results.load_wait_s)
    t0 = time.perf_counter()
    load = os.getloadavg()[0]
    results.loads.append(load)
    try:
        out = await fn()
    except Exception as exc:
        note = f"{label}: FAILED {type(exc).__name__}: {str(exc)[:400]}"
        print(f"  {note}", flush=True)
        results.notes.append(note)
        return {}
    shown = ", ".join(
        f"{k}={v:,.3f}" if isinstance(v, float) else f"{k}={v}" for k, v in out.items()
    )
    took = time.perf_counter() - t0
    print(f"  {label}: {shown} ({took:.1f} s, load {load:.2f})", flush=True)
    return out


def render_table(results: Results, systems: list[str]) -> str:
    peers = [s for s in systems if not s.startswith("ultimat3")]
    header = ["metric", *systems, "ours / best peer", "target"]
    rows: list[list[str]] = []
    for m in METRICS:
        row = [m.label]
        for s in systems:
            v = results.median(s, m.key)
            row.append("n/a" if v is None else m.fmt.format(v))
        ours = results.median("ultimat3", m.key)
        peer_values = [v for p in peers if (v := results.median(p, m.key)) is not None]
        if ours is None or not peer_values:
            row.append("-")
        else:
            best = max(peer_values) if m.higher_is_better else min(peer_values)
            ratio = ours / best if best else float("inf")
            better = ratio >= 1 if m.higher_is_better else ratio <= 1
            row.append(f"{ratio:.2f}x {'ok' if better else 'behind'}")
        row.append(m.target)
        rows.append(row)
    widths = [max(len(r[i]) for r in [header, *rows]) for i in range(len(header))]
    line = "| " + " | ".join(h.ljust(w) for h, w in zip(header, widths, strict=True)) + " |"
    sep = "|" + "|".join("-" * (w + 2) for w in widths) + "|"
    body = [
        "| " + " | ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)) + " |" for r in rows
    ]
    return "\n".join([line, sep, *body])


async def other_benchmarks(admin: str) -> bool:
    """Whether another run of this benchmark has sessions on the server now."""
    rows = await admin_exec(
        admin,
        "SELECT count(*) FROM pg_stat_activity WHERE datname LIKE 'bench\\_%%' "
        "AND datname NOT LIKE %s",
        (f"%\\_{os.getpid()}",),
    )
    return bool(rows) and int(rows[0][0]) > 0


async def parent_main(args: argparse.Namespace) -> int:
    systems = [s.strip() for s in args.only.split(",") if s.strip()]
    unknown = [s for s in systems if s not in SYSTEMS]
    if unknown:
        print(f"unknown system(s): {', '.join(unknown)}; known: {', '.join(SYSTEMS)}")
        return 2
    admin = args.dsn
    started = time.perf_counter()
    results = Results(max_load=args.max_load, load_wait_s=args.load_wait)
    busy_at_start = await other_benchmarks(admin)
    probe = await fresh_db(admin, db_name("probe"))
    use_pgss = await pgss_available(probe)
    await drop_db(admin, db_name("probe"))
    info = await admin_exec(
        admin, "SELECT version(), current_setting('fsync'), current_setting('synchronous_commit')"
    )
    print(f"server: {info[0][0]}; fsync={info[0][1]}; synchronous_commit={info[0][2]}")
    print(f"cpus: {os.cpu_count()}; python: {sys.version.split()[0]}; event loop: asyncio")
    if args.cluster_options:
        shown = " ".join(f"{k}={v}" for k, v in args.cluster_options.items())
        print(f"private cluster (initdb, {admin}): {shown}")
    trees = [git_state()]
    if args.live:
        print(f"ultimat3 under test: the live work tree, {trees[0]} (--live)")
    else:
        print(f"ultimat3 under test: {args.pinned} (--live to follow the work tree)")
    if use_pgss:
        print("statements: pg_stat_statements")
    else:
        results.notes.append(
            "pg_stat_statements is not loadable on this server (shared_preload_libraries is "
            "empty): statements per job are counted in the worker process at the client "
            "library (psycopg cursor execute, asyncpg execute/fetch*; top-level statements, "
            "as pg_stat_statements would count them); commits are "
            "pg_stat_database.xact_commit deltas of the system's own database"
        )
        print(f"note: {results.notes[-1]}")
    for s in systems:
        print(f"settings {s}: {SYSTEMS[s]().settings}")
    for rep in range(1, args.repeat + 1):
        tree = git_state()
        if tree != trees[-1]:
            trees.append(tree)
        where = f" (work tree {tree})" if args.live else ""
        print(f"--- run {rep} of {args.repeat}{where}", flush=True)
        enqueuing = [name for name in systems if name != "ultimat3-floor"]

        async def enqueue(names: list[str] = enqueuing) -> dict[str, Any]:
            dsns = {name: await fresh_db(admin, db_name(name)) for name in names}
            return await measure_enqueue_interleaved({n: SYSTEMS[n]() for n in names}, dsns)

        figures = await guarded(results, "enqueue (all systems in turns)", enqueue)
        for name, values in figures.items():
            for key, value in values.items():
                results.add(name, key, value)
        for name in systems:
            system = SYSTEMS[name]()
            db = db_name(name)

            async def drain(system: System = system, db: str = db) -> dict[str, Any]:
                dsn = await fresh_db(admin, db)
                return await measure_drain(system, admin, db, dsn, args.jobs, use_pgss)

            async def latency(system: System = system, db: str = db) -> dict[str, Any]:
                return await measure_latency(system, await fresh_db(admin, db))

            steps: tuple[tuple[str, Callable[[], Awaitable[dict[str, Any]]]], ...] = (
                ("drain", drain),
                ("latency", latency),
            )
            if name == "ultimat3-floor":  # the same enqueue as ours; no wake of its own
                steps = (("drain", drain),)
            for label, fn in steps:
                for key, value in (await guarded(results, f"{name} {label}", fn)).items():
                    results.add(name, key, value)
        if "ultimat3" in systems:

            async def relay() -> dict[str, Any]:
                rate, how = await measure_relay(await fresh_db(admin, db_name("ultimat3")))
                what = f"relay measured as: {how}"
                if what not in results.notes:
                    results.notes.append(what)
                return {"relay": rate}

            for key, value in (await guarded(results, "ultimat3 relay", relay)).items():
                results.add("ultimat3", key, value)
    for name in systems:
        await drop_db(admin, db_name(name))
    if busy_at_start or await other_benchmarks(admin):
        results.notes.append(
            "another benchmark was running on this server during this run: the two disturbed "
            "each other's figures"
        )
    if git_state() != trees[-1]:
        trees.append(git_state())
    if args.live and len(trees) > 1:
        results.notes.append(
            "ours CHANGED during this run (the editable install follows the work tree): "
            + " -> ".join(trees)
            + "; its medians mix versions, run again for one version's figures"
        )
    print()
    print(
        f"medians of {args.repeat} runs; --jobs {args.jobs}; "
        f"total {time.perf_counter() - started:.0f} s"
    )
    if results.loads:
        print(
            f"1-min load average at the start of each measurement: min "
            f"{min(results.loads):.2f}, median {statistics.median(results.loads):.2f}, max "
            f"{max(results.loads):.2f} (on {os.cpu_count()} cpus; other work on the machine "
            "shows up as noise)"
        )
    print(render_table(results, systems))
    for note in results.notes:
        print(f"- {note}")
    return 0


async def child_main(args: argparse.Namespace) -> None:
    system = SYSTEMS[args.child]()
    if args.mode == "drain":
        await child_drain(system, args.dsn, args.count, args.timeout)
    else:
        await child_latency(system, args.dsn, args.count, args.timeout)


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--only", default=",".join(SYSTEMS), help="systems, comma-separated")
    p.add_argument("--jobs", type=int, default=10_000, help="jobs to drain (default 10000)")
    p.add_argument("--repeat", type=int, default=3, help="runs per measurement (median shown)")
    p.add_argument(
        "--dsn",
        default=os.environ.get("DATABASE_URL", DEFAULT_DSN),
        help="a database on the server to use for CREATE/DROP DATABASE bench_*",
    )
    p.add_argument(
        "--cluster",
        choices=("private", "shared"),
        default="private",
        help="private (default): start a throwaway cluster with pg_stat_statements preloaded "
        "and the --dsn server's settings; shared: run on the --dsn server itself",
    )
    p.add_argument(
        "--live",
        action="store_true",
        help="measure ours as the work tree has it now, edits included (default: a snapshot "
        "of HEAD's packages/core and packages/jobs, so a run measures one version)",
    )
    p.add_argument(
        "--ours-ref",
        default="HEAD",
        metavar="REV",
        help="the commit of ours to snapshot (default HEAD)",
    )
    p.add_argument(
        "--max-load",
        type=float,
        default=None,
        help="before each measurement, wait until the 1-min load average is below this",
    )
    p.add_argument(
        "--load-wait",
        type=float,
        default=45.0,
        help="the longest wait for --max-load, seconds per measurement (default 45)",
    )
    p.add_argument(
        "--ours-worker",
        metavar="JSON",
        help="what-if: job_worker keywords for ours, e.g. '{\"claim_batch\": 50}' (the table "
        "then is not the defaults' and says so)",
    )
    p.add_argument("--child", help=argparse.SUPPRESS)
    p.add_argument("--mode", choices=("drain", "latency"), help=argparse.SUPPRESS)
    p.add_argument("--count", type=int, default=0, help=argparse.SUPPRESS)
    p.add_argument("--timeout", type=float, default=60.0, help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    if args.jobs < 1 or args.repeat < 1:
        p.error("--jobs and --repeat must be >= 1")
    return args


def main() -> int:
    args = parse_args()
    if args.child:  # the parent set PYTHONPATH to the version under test
        asyncio.run(child_main(args))
        return 0
    if args.ours_worker:
        try:
            if not isinstance(json.loads(args.ours_worker), dict):
                raise ValueError("not an object")
        except ValueError as exc:
            print(f"--ours-worker {args.ours_worker!r} is not a JSON object: {exc}")
            return 2
        os.environ[OVERRIDES_ENV] = args.ours_worker
    if not args.live:
        paths, head = snapshot_ours(SNAPSHOTS, args.ours_ref)
        sys.path[0:0] = [str(p) for p in paths]
        inherited = os.environ.get("PYTHONPATH")
        os.environ["PYTHONPATH"] = os.pathsep.join(
            [str(p) for p in paths] + ([inherited] if inherited else [])
        )
        import ultimat3.jobs

        where = Path(ultimat3.jobs.__file__).resolve()
        if not where.is_relative_to(SNAPSHOTS.resolve()):
            print(f"the snapshot did not take: ultimat3.jobs loads from {where}")
            return 2
        args.pinned = f"{args.ours_ref} = {head}, exported to {paths[-1].parents[2]}"
    args.cluster_options = None
    if args.cluster == "shared":
        return asyncio.run(parent_main(args))
    with private_cluster(args.dsn) as (dsn, options):
        args.dsn, args.cluster_options = dsn, options
        return asyncio.run(parent_main(args))


if __name__ == "__main__":
    raise SystemExit(main())
