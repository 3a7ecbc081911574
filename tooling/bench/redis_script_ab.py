"""Paired A/B of the server's time for one enqueue script run: A's and B's ``enqueue`` script
(each checkout's own ``script_sources()``) alternate in rounds of pipelined ``EVALSHA``s on a
redis-server of the tool's own, each round on a flushed database, every call a new row; the
figure is ``INFO commandstats``' ``usec_per_call`` of ``evalsha`` (the script's own time, the
calls it makes included once).

    git archive <commit> packages/core packages/jobs packages/jobs-redis | tar -x -C /tmp/before
    flock /tmp/bench.lock .x/redis-bench-venv/bin/python tooling/bench/redis_script_ab.py \\
        --a-src /tmp/before [--b-src <checkout>]

A checkout whose ``enqueue`` script takes one request (no leading count) is called that way.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent.parent


def sources(src: str | None) -> dict[str, str]:
    root = Path(src).resolve() if src else ROOT
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(
        str(root / "packages" / p / "src") for p in ("core", "jobs", "jobs-redis")
    )
    code = (
        "import json; from ultimat3.jobs_redis._scripts import script_sources; "
        "print(json.dumps(script_sources()))"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True
    )
    result: dict[str, str] = json.loads(out.stdout)
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--a-src")
    parser.add_argument("--b-src")
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--calls", type=int, default=4000)
    args = parser.parse_args()
    sys.path.insert(0, str(HERE))
    import redis
    from redis_bench import Server

    texts = {"A": sources(args.a_src), "B": sources(args.b_src)}
    server = Server()
    try:
        time.sleep(0.3)
        client = redis.Redis.from_url(server.url)
        sides: dict[str, tuple[str, list[Any]]] = {}
        for name, text in texts.items():
            one = "enqueue_many" in text  # then enqueue.lua takes one request, no count
            sides[name] = (client.script_load(text["enqueue"]), [] if one else [1])
        rows: dict[str, list[float]] = {"A": [], "B": []}
        n = 0
        for i in range(args.rounds):
            for name in ("A", "B") if i % 2 == 0 else ("B", "A"):
                sha, head = sides[name]
                client.flushdb()
                client.config_resetstat()
                pipe = client.pipeline(transaction=False)
                for j in range(args.calls):
                    n += 1
                    pipe.evalsha(
                        sha, 1, "{x}:", *head,
                        f"01900000-0000-7000-8000-{n:012x}", f"01900000-0000-7000-9000-{n:012x}",
                        "bench.noop", "default", str(n), 3, "", "", "", "",
                        f'["bench.noop",null,"{n}"]', "", f'{{"x":{n}.0}}',
                    )  # fmt: skip
                    if j % 500 == 499 or j == args.calls - 1:
                        replies = pipe.execute()
                        pipe = client.pipeline(transaction=False)
                        # every call inserted a row: 0, or [id, run_id, 0]
                        assert all(r == 0 or r[2] == 0 for r in replies), replies[:2]
                stats = client.info("commandstats")["cmdstat_evalsha"]
                rows[name].append(float(stats["usec_per_call"]))
        client.close()
    finally:
        server.close()
    for name, src in (("A", args.a_src), ("B", args.b_src)):
        v = rows[name]
        print(
            f"{name} ({src or 'this checkout'}): enqueue script median {statistics.median(v):.2f}"
            f" us a call (min {min(v):.2f}; {len(v)} rounds of {args.calls:,})"
        )


if __name__ == "__main__":
    main()
