"""The Redis single-enqueue loop of ours beside the peers, ``--runs`` times in one process on one
redis-server of the bench's own (issue #16's target: ours at least 1.3x Dramatiq's).

    bash tooling/bench/redis_setup_peers.sh
    .x/redis-bench-venv/bin/python tooling/bench/redis_enqueue_peers.py            # 3 runs
    .x/redis-bench-venv/bin/python tooling/bench/redis_enqueue_peers.py --systems ultimat3,arq

Each run is redis_bench.py's enqueue loop (``measure_loops``: every system's client open at
once, ``LOOP_ROUNDS`` rounds of ``N_LOOP`` awaited single enqueues each, the systems in turns,
ABC CBA ..., a system's rate the median of its rounds). Prints each run's rates and ratios
against the first peer, then the median of the runs' rates and of their ratios (each ratio taken
within its own run).
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--systems", default="ultimat3,dramatiq")
    parser.add_argument("--runs", type=int, default=3)
    args = parser.parse_args()
    sys.path.insert(0, str(HERE))
    from redis_bench import LOOP_ROUNDS, N_LOOP, Server, measure_loops

    systems = [s.strip() for s in args.systems.split(",") if s.strip()]
    ours, peer = systems[0], systems[1]
    server = Server()
    time.sleep(0.3)
    rates: dict[str, list[float]] = {s: [] for s in systems}
    ratios: list[float] = []
    try:
        print(
            f"single enqueue loop: {LOOP_ROUNDS} rounds of {N_LOOP:,} a system in turns, "
            f"{args.runs} runs"
        )
        for run in range(args.runs):
            got = asyncio.run(measure_loops(systems, server.url))
            for system in systems:
                rates[system].append(got[system]["enqueue_per_s"])
            ratio = got[ours]["enqueue_per_s"] / got[peer]["enqueue_per_s"]
            ratios.append(ratio)
            print(
                f"  run {run + 1}: "
                + "  ".join(f"{s} {got[s]['enqueue_per_s']:,.0f}/s" for s in systems)
                + f"  {ours}/{peer} {ratio:.3f}",
                flush=True,
            )
    finally:
        server.close()
    print(
        "medians of the runs: "
        + "  ".join(f"{s} {statistics.median(rates[s]):,.0f}/s" for s in systems)
        + f"; {ours}/{peer} (within each run) {statistics.median(ratios):.3f}"
    )


if __name__ == "__main__":
    main()
