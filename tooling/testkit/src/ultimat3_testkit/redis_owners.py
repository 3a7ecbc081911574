"""I6 on Redis, one owner per settle, read from what the server ran (#23).

Redis has no trigger, but ``MONITOR`` shows every command the server executes, in execution
order, a script's own commands (``[0 lua]``) contiguously after the ``EVALSHA`` that ran it (a
script is atomic: nothing runs between). From that stream:

- a claim handed out: inside a ``claim`` run, the ``HSET <prefix>j:<id> ... worker_id <w> claim
  <token>`` that gives the row to a worker;
- a settle that LANDED: an ``ack`` or ``nack`` run that passed its fence (``held``, an ``HMGET``
  that writes nothing) and wrote the row's state (``HSET <prefix>j:<id> ... state <s>``), on
  the (worker, claim) the EVALSHA presented (ARGV 2 and 3) — not the row's claim read back, so a
  fence that let a foreign or stale claim through is seen as such;
- a bury (a ``claim`` run moving a lapsed row on its final attempt to dead/failed): a settle on
  the last claim the stream showed for that job (``None`` when it showed none).

The stream has holes (the monitor's connection dies with the server), so claims also come from
the append-only file (:func:`aof_claims`): with ``appendfsync always`` Redis answers a command
only after its effects are fsynced, so every claim a worker ever received is in the file, the
ones the monitor missed too. Settles are counted only as seen; one in a hole is not checked.

:func:`i6_violations`: settles whose (job, claim, worker) no claim handed out, plus every claim
settled more than once (each extra settle counts).
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Final

Claim = tuple[str, str, str]
"""(job id, claim token, worker id)."""

SETTLERS: Final = frozenset({"ack", "nack"})


@dataclass(frozen=True, slots=True)
class Settle:
    job: str
    claim: str | None
    worker: str | None
    script: str
    state: str


@dataclass
class Owners:
    claims: set[Claim] = field(default_factory=set)
    settles: list[Settle] = field(default_factory=list)


_ESCAPES: Final = {"n": "\n", "r": "\r", "t": "\t", "b": "\b", "a": "\a", '"': '"', "\\": "\\"}


def monitor_args(line: str) -> tuple[str, list[str]] | None:
    """A ``MONITOR`` line (``<ts> [<db> <client>] "arg" ...``) as (client, args), the quoting
    undone (Redis's ``sdscatrepr``: ``\\"``, ``\\\\``, ``\\n`` ..., ``\\xHH``); ``None`` for a line
    that is not one (``OK``)."""
    open_ = line.find(" [")
    close = line.find("] ", open_)
    if open_ < 0 or close < 0:
        return None
    client = line[open_ + 2 : close].split(" ", 1)[-1]
    args: list[str] = []
    i, n = close + 2, len(line)
    while i < n:
        if line[i] == " ":
            i += 1
            continue
        if line[i] != '"':
            return None
        i += 1
        out: list[str] = []
        while i < n and line[i] != '"':
            ch = line[i]
            if ch == "\\" and i + 1 < n:
                nxt = line[i + 1]
                if nxt == "x" and i + 3 < n:
                    out.append(chr(int(line[i + 2 : i + 4], 16)))
                    i += 4
                    continue
                out.append(_ESCAPES.get(nxt, nxt))
                i += 2
                continue
            out.append(ch)
            i += 1
        args.append("".join(out))
        i += 1
    return client, args


def script_shas(sources: Mapping[str, str]) -> dict[str, str]:
    """sha1 of each script's text -> its name (what ``EVALSHA`` names it by)."""
    return {hashlib.sha1(text.encode()).hexdigest(): name for name, text in sources.items()}


def _fields(args: list[str]) -> dict[str, str]:
    return dict(zip(args[2::2], args[3::2], strict=False))


def monitor_owners(lines: Iterable[str], shas: Mapping[str, str], base: str) -> Owners:
    """Claims and landed settles from ``MONITOR`` lines (see the module); ``base`` the driver's
    key prefix as the scripts see it (``{prefix}:``)."""
    owners = Owners()
    row = base + "j:"
    last: dict[str, Claim] = {}
    script: str | None = None
    argv: list[str] = []
    for line in lines:
        parsed = monitor_args(line)
        if parsed is None or not parsed[1]:
            continue
        client, args = parsed
        if client != "lua":
            script = None
            if args[0].upper() == "EVALSHA" and len(args) >= 3 and args[1].lower() in shas:
                script = shas[args[1].lower()]
                argv = args[3 + int(args[2]) :]
            continue
        if script is None or args[0].upper() != "HSET" or len(args) < 2:
            continue
        if not args[1].startswith(row):
            continue
        job, f = args[1][len(row) :], _fields(args)
        if script == "claim" and "claim" in f and "worker_id" in f:
            claim = (job, f["claim"], f["worker_id"])
            owners.claims.add(claim)
            last[job] = claim
        elif "state" in f and script in SETTLERS and len(argv) >= 3 and argv[0] == job:
            owners.settles.append(Settle(job, argv[2], argv[1], script, f["state"]))
        elif "state" in f and script == "claim" and f["state"] != "running":
            held = last.get(job)
            owners.settles.append(
                Settle(job, held and held[1], held and held[2], "claim (bury)", f["state"])
            )
    return owners


def aof_claims(data: bytes, base: str) -> set[Claim]:
    """Every claim in an append-only file's commands (RESP arrays; a script's effects are
    written as its own commands): each ``HSET <base>j:<id>`` setting both ``worker_id`` and
    ``claim``. A torn last command (the server killed mid-write) is skipped."""
    out: set[Claim] = set()
    row = (base + "j:").encode()
    i, n = 0, len(data)
    while i < n:
        if data[i : i + 1] != b"*":  # an annotation (#TS:...) or the end
            j = data.find(b"\n", i)
            if j < 0:
                break
            i = j + 1
            continue
        j = data.find(b"\r\n", i)
        if j < 0:
            break
        count, i = int(data[i + 1 : j]), j + 2
        args: list[bytes] = []
        for _ in range(count):
            j = data.find(b"\r\n", i)
            if j < 0 or data[i : i + 1] != b"$":
                return out
            size = int(data[i + 1 : j])
            start = j + 2
            if start + size + 2 > n:
                return out
            args.append(data[start : start + size])
            i = start + size + 2
        if len(args) >= 2 and args[0].upper() == b"HSET" and args[1].startswith(row):
            f = dict(zip(args[2::2], args[3::2], strict=False))
            if b"claim" in f and b"worker_id" in f:
                job = args[1][len(row) :].decode()
                out.add((job, f[b"claim"].decode(), f[b"worker_id"].decode()))
    return out


def i6_violations(claims: set[Claim], settles: Iterable[Settle]) -> int:
    """Settles fenced on no claim handed out to that worker for that job (or on none), plus
    each settle beyond the first on one claim."""
    bad = 0
    seen: set[Claim] = set()
    for s in settles:
        if s.claim is None or s.worker is None:
            bad += 1
            continue
        key = (s.job, s.claim, s.worker)
        if key not in claims or key in seen:  # a foreign claim, or this claim's second settle
            bad += 1
        seen.add(key)
    return bad
