"""obstore against s3fs (fsspec) on one S3-compatible server: the measurement behind s3()'s
choice of library (issue 18; docs/storage.md, "Why obstore").

    uv run --with "s3fs>=2024.6" python tooling/bench/storage_bench.py [--mb 100] [--rounds 3]

moto's S3 server runs in a child process on 127.0.0.1 (a fresh bucket per library). For each
library, ``--rounds`` times: a streamed put of ``--mb`` MB (8 MiB chunks from a generator, a
multipart upload), a whole get, a streamed get, and 200 ranged reads of 64 KiB at random offsets;
MB/s (ranged: reads/s) as the median of the rounds, and the client's peak RSS growth over the put
and the streamed get. s3fs is not a dependency of the project: ``--with`` brings it for this run.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import random
import statistics
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import AsyncIterator
from typing import Any

MIB = 1_048_576
CHUNK = 8 * MIB
SERVER = """
import sys
from moto.server import ThreadedMotoServer
server = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
server.start()
host, port = server.get_host_and_port()
print(f"http://{host}:{port}", flush=True)
sys.stdin.read()
"""
_PAGE = os.sysconf("SC_PAGE_SIZE")


def rss() -> int:
    with open("/proc/self/statm", "rb") as f:
        return int(f.read().split()[1]) * _PAGE


class Peak:
    def __enter__(self) -> Peak:
        self.start = self.peak = rss()
        self._stop = threading.Event()
        self._t = threading.Thread(target=self._run, daemon=True)
        self._t.start()
        return self

    def _run(self) -> None:
        while not self._stop.wait(0.005):
            self.peak = max(self.peak, rss())

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._t.join()

    @property
    def growth_mib(self) -> float:
        return (self.peak - self.start) / MIB


BLOCK = os.urandom(CHUNK)


async def chunks(size: int) -> AsyncIterator[bytes]:
    sent = 0
    while sent < size:
        piece = BLOCK[: min(CHUNK, size - sent)]
        sent += len(piece)
        yield piece


def make_bucket(endpoint: str, name: str) -> None:
    import boto3

    boto3.client(
        "s3",
        endpoint_url=endpoint,
        region_name="us-east-1",
        aws_access_key_id="test",
        aws_secret_access_key="test",
    ).create_bucket(Bucket=name)


async def bench_obstore(endpoint: str, size: int, offsets: list[int]) -> dict[str, float]:
    import obstore
    from obstore.store import S3Store

    bucket = f"ob-{uuid.uuid4().hex[:10]}"
    make_bucket(endpoint, bucket)
    store = S3Store(
        bucket,
        endpoint=endpoint,
        region="us-east-1",
        access_key_id="test",
        secret_access_key="test",
        client_options={"allow_http": True},
    )
    out: dict[str, float] = {}
    with Peak() as put_peak:
        t = time.perf_counter()
        await obstore.put_async(store, "big", chunks(size), chunk_size=CHUNK, max_concurrency=4)
        out["put"] = size / MIB / (time.perf_counter() - t)
    t = time.perf_counter()
    got = await (await obstore.get_async(store, "big")).bytes_async()
    out["get"] = size / MIB / (time.perf_counter() - t)
    assert len(got) == size
    del got
    with Peak() as get_peak:
        t = time.perf_counter()
        n = 0
        async for chunk in await obstore.get_async(store, "big"):
            n += len(chunk)
        out["stream"] = size / MIB / (time.perf_counter() - t)
    assert n == size
    t = time.perf_counter()
    for at in offsets:
        assert len(await obstore.get_range_async(store, "big", start=at, length=65_536)) == 65_536
    out["ranged"] = len(offsets) / (time.perf_counter() - t)
    out["rss_put"], out["rss_stream"] = put_peak.growth_mib, get_peak.growth_mib
    return out


def bench_s3fs(endpoint: str, size: int, offsets: list[int]) -> dict[str, float]:
    """s3fs through fsspec's file interface (what an fsspec user writes): a buffered S3File
    whose blocks go up as a multipart upload, read back in blocks."""
    import s3fs

    bucket = f"fs-{uuid.uuid4().hex[:10]}"
    make_bucket(endpoint, bucket)
    fs = s3fs.S3FileSystem(
        key="test",
        secret="test",
        endpoint_url=endpoint,
        client_kwargs={"region_name": "us-east-1"},
        skip_instance_cache=True,
    )
    path = f"{bucket}/big"
    out: dict[str, float] = {}
    with Peak() as put_peak:
        t = time.perf_counter()
        with fs.open(path, "wb", block_size=CHUNK) as f:
            sent = 0
            while sent < size:
                piece = BLOCK[: min(CHUNK, size - sent)]
                f.write(piece)
                sent += len(piece)
        out["put"] = size / MIB / (time.perf_counter() - t)
    t = time.perf_counter()
    got = fs.cat_file(path)
    out["get"] = size / MIB / (time.perf_counter() - t)
    assert len(got) == size
    del got
    with Peak() as get_peak:
        t = time.perf_counter()
        n = 0
        with fs.open(path, "rb", block_size=CHUNK) as f:
            while piece := f.read(CHUNK):
                n += len(piece)
        out["stream"] = size / MIB / (time.perf_counter() - t)
    assert n == size
    t = time.perf_counter()
    for at in offsets:
        assert len(fs.cat_file(path, start=at, end=at + 65_536)) == 65_536
    out["ranged"] = len(offsets) / (time.perf_counter() - t)
    out["rss_put"], out["rss_stream"] = put_peak.growth_mib, get_peak.growth_mib
    return out


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--mb", type=int, default=100)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    size = args.mb * MIB
    rng = random.Random(7)
    offsets = [rng.randrange(size - 65_536) for _ in range(200)]
    server = subprocess.Popen(
        [sys.executable, "-c", SERVER],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
    )
    assert server.stdout is not None and server.stdin is not None
    endpoint = server.stdout.readline().strip()
    results: dict[str, list[dict[str, float]]] = {"obstore": [], "s3fs": []}
    try:
        for _ in range(args.rounds):
            results["obstore"].append(asyncio.run(bench_obstore(endpoint, size, offsets)))
            results["s3fs"].append(bench_s3fs(endpoint, size, offsets))
    finally:
        server.stdin.close()
        server.wait(timeout=10)
        server.stdout.close()
    print(f"# {args.mb} MB object, {args.rounds} rounds (medians), moto S3 server on loopback")
    print(
        "| library | put MB/s | get MB/s | streamed get MB/s | 64 KiB ranged reads/s "
        "| RSS put | RSS streamed get |"
    )
    print("|---|---|---|---|---|---|---|")
    med: dict[str, dict[str, Any]] = {}
    for name, rounds in results.items():
        m = {k: statistics.median(r[k] for r in rounds) for k in rounds[0]}
        med[name] = m
        print(
            f"| {name} | {m['put']:.0f} | {m['get']:.0f} | {m['stream']:.0f} | "
            f"{m['ranged']:.0f} | +{m['rss_put']:.0f} MiB | +{m['rss_stream']:.0f} MiB |"
        )
    for k in ("put", "get", "stream", "ranged"):
        print(f"# {k}: obstore / s3fs = {med['obstore'][k] / med['s3fs'][k]:.2f}x")


if __name__ == "__main__":
    main()
