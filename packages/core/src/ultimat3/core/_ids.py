"""Ids: lowercase UUID version 7, monotonic within a process."""

from __future__ import annotations

import os
import re
import struct
import threading
import time
from itertools import accumulate
from typing import TypeGuard

from ._errors import XError

_UUID_RE = re.compile(r"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}")
_TAIL_BITS = 74  # 12 bits rand_a + 62 bits rand_b
_TAIL_MASK = (1 << _TAIL_BITS) - 1
_lock = threading.Lock()
_last = 0  # (ms << 74) | tail of the last id
_VERSION_BITS = 0x7 << 76
_VARIANT_BITS = 0b10 << 62
_RAND_B_MASK = (1 << 62) - 1
_ONE_MORE = (1).__add__  # s -> 1 + s, in C (new_ids maps it over its steps)


def _compose(ms: int, tail: int) -> str:
    rand_a = tail >> 62
    rand_b = tail & ((1 << 62) - 1)
    value = (ms << 80) | (0x7 << 76) | (rand_a << 64) | (0b10 << 62) | rand_b
    h = f"{value:032x}"
    return f"{h[:8]}-{h[8:12]}-{h[12:16]}-{h[16:20]}-{h[20:]}"


def uuid7_at(ms: int, tail: int) -> str:
    """The uuid7 for a 48-bit ms timestamp and a 74-bit tail (for tests and fixtures)."""
    if not 0 <= ms < 1 << 48 or not 0 <= tail <= _TAIL_MASK:
        raise XError("X_INVARIANT", f"uuid7_at: ms {ms!r} or tail {tail!r} out of range")
    return _compose(ms, tail)


def new_id() -> str:
    """A new lowercase uuid7; ids from one process sort in creation order."""
    global _last
    ms = time.time_ns() // 1_000_000
    tail = int.from_bytes(os.urandom(10), "big") & _TAIL_MASK
    with _lock:
        candidate = (ms << _TAIL_BITS) | tail
        if candidate <= _last:
            # same millisecond (or the clock stepped back): count on from the last id,
            # keeping random bits so the next value is not guessable.
            candidate = _last + 1 + (tail & 0xFFFFFFFF)
        _last = candidate
    return _compose((candidate >> _TAIL_BITS) & ((1 << 48) - 1), candidate & _TAIL_MASK)


def new_ids(n: int) -> list[str]:
    """``n`` new lowercase uuid7s in creation order, after every id before them — as ``n`` calls
    of :func:`new_id` within one millisecond would answer them (each one past the last by 1 plus
    32 random bits) — from one clock read and one ``os.urandom``."""
    global _last
    if n <= 0:
        return []
    if n == 2:
        return _two()
    raw = os.urandom(10 + 4 * n)
    ms = time.time_ns() // 1_000_000
    steps = struct.unpack(f"<{n}I", raw[10:])
    with _lock:
        first = (ms << _TAIL_BITS) | (int.from_bytes(raw[:10], "big") & _TAIL_MASK)
        if first <= _last:
            first = _last + 1 + steps[0]
        # The common case: the 62 low bits (rand_b) do not carry into rand_a over the batch, so
        # the first 16 hex digits are the same for every id and only the last 16 are written
        # per id (from one struct.pack); else every value is composed whole.
        rand_b = first & _RAND_B_MASK
        lows = list(accumulate(map(_ONE_MORE, steps[1:]), initial=_VARIANT_BITS | rand_b))
        if lows[-1] >> 62 == 0b10:
            _last = first - rand_b + (lows[-1] & _RAND_B_MASK)
            head = f"{first >> _TAIL_BITS:012x}7{first >> 62 & 0xFFF:03x}"  # ms, version, rand_a
            head = f"{head[:8]}-{head[8:12]}-{head[12:16]}-"
            wide = struct.pack(f">{n}Q", *lows).hex()
            return [f"{head}{wide[o : o + 4]}-{wide[o + 4 : o + 16]}" for o in range(0, 16 * n, 16)]
        values = list(accumulate(map(_ONE_MORE, steps[1:]), initial=first))
        _last = values[-1]
    wide = b"".join(
        [
            (
                (v >> _TAIL_BITS << 80)
                | _VERSION_BITS
                | ((v >> 62 & 0xFFF) << 64)
                | _VARIANT_BITS
                | (v & _RAND_B_MASK)
            ).to_bytes(16, "big")
            for v in values
        ]
    ).hex()
    return [
        f"{wide[o : o + 8]}-{wide[o + 8 : o + 12]}-{wide[o + 12 : o + 16]}-"
        f"{wide[o + 16 : o + 20]}-{wide[o + 20 : o + 32]}"
        for o in range(0, 32 * n, 32)
    ]


_HEX32 = "{:032x}".format


def _two() -> list[str]:
    """``new_ids(2)`` (a job's id and its run id, every single enqueue): one clock read, one
    ``os.urandom`` and one lock for both, and no loop."""
    global _last
    raw = os.urandom(18)  # as new_ids lays it out: the tail, then two little-endian steps
    ms = time.time_ns() // 1_000_000
    tail = int.from_bytes(raw[:10], "big") & _TAIL_MASK
    with _lock:
        first = (ms << _TAIL_BITS) | tail
        if first <= _last:
            first = _last + 1 + int.from_bytes(raw[10:14], "little")
        second = first + 1 + int.from_bytes(raw[14:], "little")
        _last = second
    a = _HEX32(
        (first >> _TAIL_BITS << 80)
        | _VERSION_BITS
        | ((first >> 62 & 0xFFF) << 64)
        | _VARIANT_BITS
        | (first & _RAND_B_MASK)
    )
    b = _HEX32(
        (second >> _TAIL_BITS << 80)
        | _VERSION_BITS
        | ((second >> 62 & 0xFFF) << 64)
        | _VARIANT_BITS
        | (second & _RAND_B_MASK)
    )
    return [
        f"{a[:8]}-{a[8:12]}-{a[12:16]}-{a[16:20]}-{a[20:]}",
        f"{b[:8]}-{b[8:12]}-{b[12:16]}-{b[16:20]}-{b[20:]}",
    ]


def is_lowercase_uuid(value: object) -> TypeGuard[str]:
    """Whether ``value`` is a canonical 8-4-4-4-12 lowercase hex UUID string."""
    return isinstance(value, str) and _UUID_RE.fullmatch(value) is not None


def require_lowercase_uuid(value: object, *, name: str) -> str:
    """``value`` if it is a lowercase UUID, else ``X_ID_INVALID`` naming ``name``."""
    if is_lowercase_uuid(value):
        return value
    shown = repr(value)
    if len(shown) > 80:
        shown = shown[:77] + "..."
    raise XError(
        "X_ID_INVALID",
        f"{name} must be a lowercase UUID, got {shown}",
        fix=f"pass {name} as a canonical lowercase UUID (str(uuid).lower(), or new_id())",
        meta={"name": name},
    )
