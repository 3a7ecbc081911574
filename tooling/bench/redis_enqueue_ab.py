"""Paired A/B of the Redis enqueue loop: two processes, A and B, take turns (ABBA...) running
blocks of awaited ``job.enqueue`` calls against one redis-server, so both meet the same machine
state; on a shared VM whose speed moves run to run, the ratio of adjacent blocks is what to read.

    git archive <commit> packages/core packages/jobs packages/jobs-redis | tar -x -C /tmp/before
    .x/redis-bench-venv/bin/python tooling/bench/redis_enqueue_ab.py --a-src /tmp/before
    .x/redis-bench-venv/bin/python tooling/bench/redis_enqueue_ab.py --b-uvloop   # loop A/B

``--a-src`` / ``--b-src``: a checkout whose ``packages/{core,jobs,jobs-redis}/src`` go first on
the path (default: the installed workspace). A uses database 1, B database 2 of a redis-server of
the tool's own (``--redis-url``: an existing one, whose databases 1 and 2 are FLUSHED).
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


async def child(url: str, block: int) -> None:
    if os.environ.get("AB_UVLOOP"):
        import uvloop  # the bench venv only; never a project dependency

        asyncio.set_event_loop_policy(uvloop.EventLoopPolicy())
    import redis.asyncio as aredis
    import redis_bench_tasks as tasks

    from ultimat3.jobs.adapter import install_job_driver
    from ultimat3.jobs_redis import redis_job_driver

    admin = aredis.Redis.from_url(url)
    await admin.flushdb()
    driver = redis_job_driver(url)
    install_job_driver(driver)
    job = tasks.ultimat3_job()
    for i in range(200):  # warm
        await job.enqueue({"x": -float(i) - 1})
    n = 0
    print("ready", flush=True)
    for line in sys.stdin:
        if line.strip() != "go":
            break
        started, cpu = time.perf_counter(), time.process_time()
        for _ in range(block):
            await job.enqueue({"x": float(n)})
            n += 1
        wall = time.perf_counter() - started
        print(f"{block / wall:.1f} {(time.process_time() - cpu) / block * 1e6:.1f}", flush=True)
    await driver.close()
    await admin.aclose()


def env_for(src: str | None, uvloop: bool) -> dict[str, str]:
    env = dict(os.environ)
    if src:
        root = Path(src).resolve()
        env["PYTHONPATH"] = os.pathsep.join(
            str(root / "packages" / p / "src") for p in ("core", "jobs", "jobs-redis")
        )
    if uvloop:
        env["AB_UVLOOP"] = "1"
    return env


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--redis-url", help="an existing server, no db (1 and 2 are FLUSHED)")
    parser.add_argument("--a-src")
    parser.add_argument("--b-src")
    parser.add_argument("--b-uvloop", action="store_true", help="B runs on uvloop")
    parser.add_argument("--pairs", type=int, default=60)
    parser.add_argument("--block", type=int, default=250)
    parser.add_argument("--child", nargs=2, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        sys.path.insert(0, str(HERE))
        asyncio.run(child(args.child[0], int(args.child[1])))
        return
    sys.path.insert(0, str(HERE))
    from redis_bench import Server

    server = None if args.redis_url else Server()
    url = args.redis_url or server.url  # type: ignore[union-attr]
    base = url.rstrip("/") if args.redis_url else url.rsplit("/", 1)[0]
    time.sleep(0.3)  # the server is up
    sides = {"A": (args.a_src, False, 1), "B": (args.b_src, args.b_uvloop, 2)}
    procs = {
        name: subprocess.Popen(
            [sys.executable, __file__, "--child", f"{base}/{db}", str(args.block)],
            env=env_for(src, uvloop),
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
        )
        for name, (src, uvloop, db) in sides.items()
    }
    rows: dict[str, list[tuple[float, float]]] = {"A": [], "B": []}
    try:
        for proc in procs.values():
            assert proc.stdout is not None and proc.stdout.readline().strip() == "ready"
        for i in range(args.pairs):
            for name in ("A", "B") if i % 2 == 0 else ("B", "A"):
                proc = procs[name]
                assert proc.stdin is not None and proc.stdout is not None
                proc.stdin.write("go\n")
                proc.stdin.flush()
                rate, cpu = map(float, proc.stdout.readline().split())
                rows[name].append((rate, cpu))
    finally:
        for proc in procs.values():
            if proc.stdin is not None:
                proc.stdin.close()
            proc.wait(timeout=30)
        if server is not None:
            server.close()
    for name, (src, uvloop, _) in sides.items():
        rates = [r for r, _ in rows[name]]
        cpus = [c for _, c in rows[name]]
        what = (src or "the installed workspace") + (" on uvloop" if uvloop else "")
        rate, cpu = statistics.median(rates), statistics.median(cpus)
        print(
            f"{name} ({what}): median {rate:,.0f} enqueues/s (blocks {min(rates):,.0f}-"
            f"{max(rates):,.0f}), client CPU {cpu:.1f} us per enqueue"
        )
    ratios = [b[0] / a[0] for a, b in zip(rows["A"], rows["B"], strict=True)]
    print(
        f"B/A over {len(ratios)} adjacent pairs of {args.block}: median "
        f"{statistics.median(ratios):.3f}, B faster in {sum(r > 1 for r in ratios)}"
    )


if __name__ == "__main__":
    main()
