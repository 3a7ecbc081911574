"""Paired comparison of ONE enqueue step of pg_bench.py, ours against a peer: two processes take
turns (ABBA...) running blocks of the step on one Postgres, each in a database of its own, so
both meet the same machine state; each block also reports its process's CPU time per row. On a
shared VM whose speed moves from one minute to the next, pg_bench's single figures (ours, then
each peer, seconds apart) can swing more than the gap they measure; the ratio of adjacent blocks
here is what to read.

    .x/bench-venv/bin/python tooling/bench/pg_enqueue_pair.py                 # single enqueue
    .x/bench-venv/bin/python tooling/bench/pg_enqueue_pair.py --bulk          # enqueue_many(1,000)
    .x/bench-venv/bin/python tooling/bench/pg_enqueue_pair.py --peer oban --blocks 30
    .x/bench-venv/bin/python tooling/bench/pg_enqueue_pair.py --rows 10000 --blocks 6  # #16 bulk

``--rows N``: a block is N rows through each system's bulk API, ours in ONE ``enqueue_many`` of
N (which the driver sends in chunks of ``ENQUEUE_CHUNK``, 1,000), the peer in calls of
``--peer-chunk`` rows (default 1,000: PGQueuer's bulk in chunks of 1,000; ``--peer-chunk N``
gives it the N rows in one call).

A block is ``--block`` awaited single enqueues (default 1,000: the issue's measure (a), 1,000
single enqueues in a row) or, with ``--bulk``, 3 calls of 1,000. Shorter blocks read differently,
for a reason not pinned down: at 200 a block ours came out level with PGQueuer (0.95-1.04) in the
same hour that 1,000-row blocks had it 1.04-1.24 ahead (docs/performance.md).

Each side is warmed first (pool, prepared statements). Ours is a snapshot of the committed
sources at ``--ours-ref`` (default HEAD), as pg_bench.py takes it; the server is ``--dsn``
(default ``$DATABASE_URL`` or the local test server), on which the two databases are created and
dropped. Prints each pair and the medians: rows/s of each side and of the per-pair ratios.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
SNAPSHOTS = HERE.parents[1] / ".x" / "bench-snapshot"
BULK = 1000
BULK_CALLS = 3


async def child(system_name: str, dsn: str, block: int, bulk: bool, rows: int, chunk: int) -> None:
    from bench_systems import SYSTEMS

    system = SYSTEMS[system_name]()
    await system.install(dsn)
    await system.open(dsn)
    n = 0

    async def step() -> int:
        nonlocal n
        if rows:
            size = rows if system_name == "ultimat3" else chunk
            for start in range(n, n + rows, size):
                await system.enqueue_bulk(list(range(start, min(start + size, n + rows))))
            n += rows
            return rows
        if bulk:
            for _ in range(BULK_CALLS):
                await system.enqueue_bulk(list(range(n, n + BULK)))
                n += BULK
            return BULK_CALLS * BULK
        for _ in range(block):
            await system.enqueue_one(n)
            n += 1
        return block

    try:
        for _ in range(3):  # warm: the pool, prepared statements, plans
            await step()
        print("ready", flush=True)
        for line in sys.stdin:
            if line.strip() != "go":
                break
            started, cpu = time.perf_counter(), time.process_time()
            rows = await step()
            wall, used = time.perf_counter() - started, time.process_time() - cpu
            print(f"{rows / wall:.1f} {used / rows * 1e6:.1f}", flush=True)
    finally:
        await system.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--peer", default="pgqueuer")
    parser.add_argument("--blocks", type=int, default=20, help="blocks per side")
    parser.add_argument("--block", type=int, default=1000, help="single enqueues per block")
    parser.add_argument("--bulk", action="store_true", help="enqueue_many(1,000) x3 a block")
    parser.add_argument("--rows", type=int, default=0, help="rows per block, bulk APIs")
    parser.add_argument("--peer-chunk", type=int, default=1000, help="the peer's rows a call")
    parser.add_argument("--ours-ref", default="HEAD")
    parser.add_argument(
        "--dsn",
        default=os.environ.get("DATABASE_URL") or "postgresql://postgres@127.0.0.1:5432/test",
    )
    parser.add_argument("--child", help=argparse.SUPPRESS)
    args = parser.parse_args()
    sys.path.insert(0, str(HERE))
    if args.child:
        asyncio.run(child(args.child, args.dsn, args.block, args.bulk, args.rows, args.peer_chunk))
        return
    from bench_db import db_name, drop_db, fresh_db, snapshot_ours

    paths, head = snapshot_ours(SNAPSHOTS, args.ours_ref)
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(HERE), *map(str, paths)]))
    sides = ["ultimat3", args.peer]
    names = {side: db_name(f"pair_{side}") for side in sides}
    children: dict[str, subprocess.Popen[str]] = {}
    try:
        for side in sides:
            dsn = asyncio.run(fresh_db(args.dsn, names[side]))
            command = [sys.executable, __file__, "--child", side, "--dsn", dsn]
            command += ["--block", str(args.block)] + (["--bulk"] if args.bulk else [])
            command += ["--rows", str(args.rows), "--peer-chunk", str(args.peer_chunk)]
            proc = subprocess.Popen(
                command, env=env, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True
            )
            children[side] = proc
            assert proc.stdout is not None
            if proc.stdout.readline().strip() != "ready":
                raise SystemExit(f"{side} did not start")
        rates: dict[str, list[float]] = {side: [] for side in sides}
        cpus: dict[str, list[float]] = {side: [] for side in sides}
        what = "enqueue_many(1,000)" if args.bulk else "single enqueue"
        if args.rows:
            what = (
                f"{args.rows:,} rows: ours one enqueue_many, {args.peer} in calls of "
                f"{args.peer_chunk:,}"
            )
        print(f"{what}: ours ({head}) against {args.peer}, {args.blocks} blocks each, ABBA")
        for pair in range(args.blocks):
            order = sides if pair % 2 == 0 else sides[::-1]
            got: dict[str, float] = {}
            for side in order:
                proc = children[side]
                assert proc.stdin is not None and proc.stdout is not None
                proc.stdin.write("go\n")
                proc.stdin.flush()
                rate, cpu = proc.stdout.readline().split()
                got[side] = float(rate)
                rates[side].append(got[side])
                cpus[side].append(float(cpu))
            print(
                f"  pair {pair + 1:2d}: ours {got['ultimat3']:9,.0f}  {args.peer} "
                f"{got[args.peer]:9,.0f}  ratio {got['ultimat3'] / got[args.peer]:.3f}",
                flush=True,
            )
        ratios = [a / b for a, b in zip(rates["ultimat3"], rates[args.peer], strict=True)]
        ahead = sum(r > 1 for r in ratios)
        print(
            f"medians: ours {statistics.median(rates['ultimat3']):,.0f} rows/s, {args.peer} "
            f"{statistics.median(rates[args.peer]):,.0f} rows/s; per-pair ratio "
            f"{statistics.median(ratios):.3f} (ours ahead in {ahead} of {len(ratios)} pairs); "
            f"client CPU per row: ours {statistics.median(cpus['ultimat3']):.1f} us, "
            f"{args.peer} {statistics.median(cpus[args.peer]):.1f} us"
        )
    finally:
        for proc in children.values():
            if proc.stdin is not None:
                proc.stdin.close()
            proc.wait(timeout=60)
        for side in sides:
            asyncio.run(drop_db(args.dsn, names[side]))


if __name__ == "__main__":
    main()
