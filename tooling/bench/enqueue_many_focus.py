"""A focused run of ONE step of pg_bench.py: ``job.enqueue_many`` of 1,000 no-op jobs (the bench's
job and inputs), ``--calls`` times, on a schema of its own on the ``--dsn`` server (table emptied
between calls, outside the timing). Prints the median rows/s and the median client CPU per call.
With ``--single`` each call is 1,000 awaited ``job.enqueue`` instead (pg_bench's single step).

    uv run python tooling/bench/enqueue_many_focus.py --ours-ref 03c7b59 --calls 50   # before
    uv run python tooling/bench/enqueue_many_focus.py --ours-ref HEAD --calls 50      # after

Each ref is a snapshot of its committed sources (bench_db.snapshot_ours, as pg_bench.py takes
it), run in a child process. On a noisy box interleave the two refs several times and compare
the medians of the runs (``--rounds``: the refs alternate, the first ref of each round swaps).
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import subprocess
import sys
import time
import uuid
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
SNAPSHOTS = HERE.parents[1] / ".x" / "bench-snapshot"
BULK = 1000


async def _measure(dsn: str, calls: int, single: bool) -> tuple[float, float]:
    import psycopg
    from pydantic import BaseModel

    from ultimat3.core import swap_adapter
    from ultimat3.jobs import job
    from ultimat3.jobs.adapter import JOB_DRIVER
    from ultimat3.jobs.postgres import migrate, postgres_job_driver

    class Noop(BaseModel):
        n: int

    async def noop(input: Noop, step: Any, ctx: Any) -> None:
        return None

    declared = job(
        input=Noop, name="bench_noop", idempotency_key=lambda i: f"bench:{i.n}", run=noop
    )
    schema = f"x_focus_{uuid.uuid4().hex[:10]}"
    await migrate(dsn, schema=schema)
    driver = postgres_job_driver(dsn, schema=schema)
    walls: list[float] = []
    cpus: list[float] = []
    try:
        async with await psycopg.AsyncConnection.connect(dsn, autocommit=True) as admin:
            with swap_adapter(JOB_DRIVER, driver):
                for call in range(calls + 2):  # two warm-up calls: the pool, the statements
                    await admin.execute(f'TRUNCATE "{schema}".x_jobs CASCADE')
                    batch = [{"n": call * BULK + k} for k in range(BULK)]
                    c0, t0 = time.process_time(), time.perf_counter()
                    if single:
                        for one in batch:
                            await declared.enqueue(one)
                    else:
                        await declared.enqueue_many(batch)
                    wall, cpu = time.perf_counter() - t0, time.process_time() - c0
                    if call >= 2:
                        walls.append(wall)
                        cpus.append(cpu)
    finally:
        await driver.close()
        async with await psycopg.AsyncConnection.connect(dsn, autocommit=True) as admin:
            await admin.execute(f'DROP SCHEMA "{schema}" CASCADE')
    return statistics.median(walls), statistics.median(cpus)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--ours-ref", action="append", help="commit(s) to measure (default HEAD)")
    parser.add_argument("--calls", type=int, default=50)
    parser.add_argument("--single", action="store_true", help="1,000 job.enqueue a call")
    parser.add_argument("--rounds", type=int, default=1)
    parser.add_argument(
        "--dsn",
        default=os.environ.get("DATABASE_URL") or "postgresql://postgres@127.0.0.1:5432/test",
    )
    parser.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        wall, cpu = asyncio.run(_measure(args.dsn, args.calls, args.single))
        print(f"{BULK / wall:.0f} {wall * 1000:.2f} {cpu * 1000:.2f}")
        return
    sys.path.insert(0, str(HERE))
    from bench_db import snapshot_ours

    refs = args.ours_ref or ["HEAD"]
    snaps = {ref: snapshot_ours(SNAPSHOTS, ref) for ref in refs}
    rates: dict[str, list[float]] = {ref: [] for ref in refs}
    for round_no in range(args.rounds):
        order = refs if round_no % 2 == 0 else refs[::-1]
        for ref in order:
            paths, head = snaps[ref]
            env = dict(os.environ, PYTHONPATH=os.pathsep.join(str(p) for p in paths))
            out = subprocess.run(
                [
                    sys.executable,
                    __file__,
                    "--child",
                    "--calls",
                    str(args.calls),
                    "--dsn",
                    args.dsn,
                    *(["--single"] if args.single else []),
                ],
                env=env,
                capture_output=True,
                text=True,
                check=True,
            ).stdout.split()
            rate, wall, cpu = float(out[0]), out[1], out[2]
            rates[ref].append(rate)
            print(
                f"{ref} ({head}): {rate:,.0f} rows/s (median of {args.calls} calls: {wall} ms, "
                f"client cpu {cpu} ms)",
                flush=True,
            )
    for ref in refs:
        print(f"{ref}: median of {args.rounds} runs {statistics.median(rates[ref]):,.0f} rows/s")


if __name__ == "__main__":
    main()
