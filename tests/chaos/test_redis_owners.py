"""I6 on Redis read from MONITOR (``ultimat3_testkit.redis_owners``), on lines recorded from a
private redis-server 7.0 (``redis_monitor.txt``): the Redis driver enqueued one job, worker
``w-a`` claimed it and nacked it (retry), ``w-b`` claimed it again, ``w-a`` acked late on its old
claim (fenced off: the script read the row and wrote nothing), ``w-b`` acked. ``SCRIPT LOAD``
lines left out."""

from __future__ import annotations

import hashlib
from pathlib import Path

from redis.asyncio import Redis

from ultimat3.jobs_redis._scripts import ScriptRunner, script_sources
from ultimat3_testkit.redis_owners import (
    Settle,
    aof_claims,
    i6_violations,
    monitor_args,
    monitor_owners,
    script_shas,
)

LINES = (Path(__file__).parent / "redis_monitor.txt").read_text().splitlines()
SHAS = {
    "9ac74c7cedeeba0feb572a75bf1dbccefb438ada": "claim",
    "3667c86206a1997b9192cb8bdb8d4f9661c9c5fd": "nack",
    "dfab4ddcc17f9e939ba10041f03456cfc64fce61": "ack",
    "4721574cfc2ad20d3839a4c80d751fcbb838fb89": "enqueue_many",
}
BASE = "{rchaos}:"
JOB = "01a2349f-762f-7726-a364-ee67a36f174b"
T1 = "01a2349f-7636-7310-8751-b467a4093adf:1"
T2 = "01a2349f-763e-7623-9b7c-b9c0e9c15a7b:1"
ACK_B = next(i for i, x in enumerate(LINES) if '"w-b" "' + T2 + '" "={' in x)
"""Where w-b's ack (the one that lands) starts; its script's lines follow up to the ECHO."""
END = next(i for i, x in enumerate(LINES) if '"HELLO"' in x)


def i6(lines: list[str]) -> int:
    owners = monitor_owners(lines, SHAS, BASE)
    return i6_violations(owners.claims, owners.settles)


def test_the_recorded_stream_gives_each_claim_and_each_settle_that_landed() -> None:
    owners = monitor_owners(LINES, SHAS, BASE)
    assert owners.claims == {(JOB, T1, "w-a"), (JOB, T2, "w-b")}
    assert owners.settles == [  # w-a's late ack, fenced off, is no settle
        Settle(JOB, T1, "w-a", "nack", "ready"),
        Settle(JOB, T2, "w-b", "ack", "done"),
    ]
    assert i6_violations(owners.claims, owners.settles) == 0


def test_a_claim_settled_twice_is_counted() -> None:
    again = LINES[ACK_B:END]
    assert i6([*LINES[:END], *again]) == 1
    assert i6([*LINES[:END], *again, *again]) == 2


def test_a_stale_claim_let_through_the_fence_is_counted() -> None:
    # w-a's late ack on T1 (already settled by its nack) as if its fence had passed
    landed = [x.replace('"w-b" "' + T2 + '"', '"w-a" "' + T1 + '"') for x in LINES[ACK_B:END]]
    assert i6([*LINES[:ACK_B], *landed]) == 1


def test_a_settle_on_a_foreign_claim_is_counted() -> None:
    block = LINES[ACK_B:END]
    other_worker = [block[0].replace('"w-b"', '"w-z"'), *block[1:]]
    assert i6([*LINES[:ACK_B], *other_worker]) == 1
    never_handed_out = [block[0].replace(T2, "forged:1"), *block[1:]]
    assert i6([*LINES[:ACK_B], *never_handed_out]) == 1
    assert i6_violations(set(), [Settle(JOB, None, None, "claim (bury)", "dead")]) == 1


def test_only_the_drivers_scripts_count() -> None:
    owners = monitor_owners(LINES, {}, BASE)
    assert owners.claims == set()
    assert owners.settles == []
    assert monitor_owners(LINES, SHAS, "{other}:").settles == []


def test_the_shas_are_the_ones_the_driver_calls_by() -> None:
    runner = ScriptRunner(Redis(), "rchaos")
    assert script_shas(script_sources()) == {sha: n for n, sha in runner._shas.items()}
    assert script_shas({"x": "return 1"}) == {hashlib.sha1(b"return 1").hexdigest(): "x"}


def test_monitor_quoting_is_undone() -> None:
    line = r'1.5 [0 lua] "HSET" "k" "a \"q\" \\ b\n" "\x01\xff"'
    assert monitor_args(line) == ("lua", ["HSET", "k", 'a "q" \\ b\n', "\x01\xff"])
    assert monitor_args('1.5 [3 127.0.0.1:5000] "PING"') == ("127.0.0.1:5000", ["PING"])
    assert monitor_args("OK") is None


def _resp(*args: str) -> bytes:
    out = f"*{len(args)}\r\n".encode()
    for a in args:
        b = a.encode()
        out += b"$%d\r\n%s\r\n" % (len(b), b)
    return out


def test_the_append_only_file_gives_every_claim() -> None:
    data = (
        _resp("SELECT", "0")
        + _resp("MULTI")
        + _resp("HSET", BASE + "j:" + JOB, "id", JOB, "state", "ready")
        + _resp("HSET", BASE + "j:" + JOB, "attempts", "1", "worker_id", "w-a", "claim", T1)
        + _resp("EXEC")
        + _resp("HSET", "{other}:j:x", "worker_id", "w-a", "claim", "t")
        + _resp("HSET", BASE + "j:" + JOB, "attempts", "2", "worker_id", "w-b", "claim", T2)
    )
    assert aof_claims(data, BASE) == {(JOB, T1, "w-a"), (JOB, T2, "w-b")}
    assert aof_claims(data[:-7], BASE) == {(JOB, T1, "w-a")}  # a torn last command
