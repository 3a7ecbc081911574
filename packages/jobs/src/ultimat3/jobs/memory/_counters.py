"""The memory driver's settle counters: one count per settle, moved by the settle itself, kept in
the tiers of ``COUNTER_TIERS`` (1-minute buckets for 24 h, 5-minute for 7 d, 1-hour for 30 d)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from ultimat3.core import from_epoch_ms
from ultimat3.jobs.adapter import COUNTER_TIERS, CounterRow, CounterTotals

CounterKind = Literal["done", "retried", "failed", "dead"]


@dataclass(slots=True)
class _Bucket:
    done: int = 0
    retried: int = 0
    failed: int = 0
    dead: int = 0
    duration_ms: int = 0


class CounterBook:
    """Per job name and bucket start, one ``_Bucket`` in every tier."""

    def __init__(self) -> None:
        self._tiers: list[dict[tuple[str, int], _Bucket]] = [{} for _ in COUNTER_TIERS]

    def add(self, job: str, kind: CounterKind, now_ms: int, duration_ms: int | None = None) -> None:
        for (bucket_ms, _kept), buckets in zip(COUNTER_TIERS, self._tiers, strict=True):
            start = now_ms - now_ms % bucket_ms
            bucket = buckets.setdefault((job, start), _Bucket())
            setattr(bucket, kind, getattr(bucket, kind) + 1)
            if duration_ms:
                bucket.duration_ms += max(0, duration_ms)
        self.prune(now_ms)

    def prune(self, now_ms: int) -> None:
        """Drop every bucket past its tier's retention."""
        for (bucket_ms, kept_ms), buckets in zip(COUNTER_TIERS, self._tiers, strict=True):
            stale = [k for k in buckets if k[1] + bucket_ms <= now_ms - kept_ms]
            for k in stale:
                del buckets[k]

    def rows(self, *, job: str | None, since_ms: int, now_ms: int) -> list[CounterRow]:
        """Buckets of the finest tier still covering ``since_ms`` that end after it, oldest
        first (then by job)."""
        self.prune(now_ms)
        tier = _tier_for(since_ms, now_ms)
        bucket_ms = COUNTER_TIERS[tier][0]
        out = [
            CounterRow(
                job=name,
                bucket_start=from_epoch_ms(start),
                bucket_ms=bucket_ms,
                done=b.done,
                retried=b.retried,
                failed=b.failed,
                dead=b.dead,
                duration_ms=b.duration_ms,
            )
            for (name, start), b in self._tiers[tier].items()
            if (job is None or name == job) and start + bucket_ms > since_ms
        ]
        out.sort(key=lambda r: (r.bucket_start, r.job))
        return out

    def totals(self, *, since_ms: int, now_ms: int) -> CounterTotals:
        done = retried = failed = dead = duration = 0
        for row in self.rows(job=None, since_ms=since_ms, now_ms=now_ms):
            done += row.done
            retried += row.retried
            failed += row.failed
            dead += row.dead
            duration += row.duration_ms
        return CounterTotals(
            done=done, retried=retried, failed=failed, dead=dead, duration_ms=duration
        )


def _tier_for(since_ms: int, now_ms: int) -> int:
    span = now_ms - since_ms
    for i, (_bucket_ms, kept_ms) in enumerate(COUNTER_TIERS):
        if span <= kept_ms:
            return i
    return len(COUNTER_TIERS) - 1
