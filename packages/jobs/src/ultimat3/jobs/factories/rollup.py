"""``rollup()``: recompute the recent buckets of a time series into the app's own table.

Each run is ONE ``step.run``: it takes the first instant of the bucket holding
``clock.now() - lookback`` in the bucket's zone (so the oldest bucket it writes is read whole, a
DST day included), asks ``source(window)`` for the series points from there, maps each point to
one row of ``into`` and writes them all with ONE ``upsert_all(rows, on_conflict=key)`` — every
bucket or none. A re-run over the same rows writes the same values; a late row inside the
lookback moves its bucket on the next run. A row older than the lookback when it lands is not
counted, and a bucket whose rows were all deleted keeps its last value (the spec's "not handled").
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING, Any, cast
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from ultimat3.core import Duration, Signal, XError, parse_duration, to_json_form
from ultimat3.jobs import Job, JobContext, Retry, Step, job
from ultimat3.jobs.factories.backfill import NoInput
from ultimat3.jobs.factories.entity_extra import answer, need_entity

if TYPE_CHECKING:
    from ultimat3.entity import Entity, SeriesPoint, Table


@dataclass(frozen=True, slots=True)
class Bucket:
    """One row of ``into`` per ``unit`` (a unit ``series()`` has) in the IANA zone ``time_zone``."""

    unit: str = "day"
    time_zone: str = "UTC"


@dataclass(frozen=True, slots=True)
class RollupWindow:
    """What ``source`` and ``map`` get: the first instant read (an aware datetime in the bucket's
    zone), the bucket and the run's input."""

    since: datetime
    bucket: Bucket
    input: Any


Source = Callable[[RollupWindow], "Iterable[SeriesPoint] | Any"]
MapPoint = Callable[["SeriesPoint", RollupWindow], "Mapping[str, Any] | Any"]


def _invalid(name: object, message: str, fix: str) -> XError:
    return XError("X_JOB_ROLLUP_INVALID", f"rollup({name!r}): {message}", fix=fix)


def bucket_start(instant: datetime, unit: str, zone: ZoneInfo) -> datetime:
    """The first instant of the ``unit`` holding ``instant`` in ``zone``, as ``series()`` buckets
    it: below a day the wall-clock offset into the unit is taken off (a repeated fall-back hour
    is its own bucket); a day and up start at local midnight, a week on Monday."""
    local = instant.astimezone(zone)
    if unit == "minute":
        return local.replace(second=0, microsecond=0)
    if unit == "hour":
        return local.replace(minute=0, second=0, microsecond=0)
    day = local.date()
    if unit == "week":
        day = day - timedelta(days=day.weekday())
    elif unit == "month":
        day = day.replace(day=1)
    elif unit == "quarter":
        day = day.replace(month=(day.month - 1) // 3 * 3 + 1, day=1)
    elif unit == "year":
        day = day.replace(month=1, day=1)
    midnight = datetime(day.year, day.month, day.day, tzinfo=zone)
    # through UTC so the answer carries the offset in force at that instant
    return midnight.astimezone(UTC).astimezone(zone)


def _bucket(name: str, bucket: object, units: Sequence[str]) -> tuple[Bucket, ZoneInfo]:
    if isinstance(bucket, Mapping):
        try:
            bucket = Bucket(**bucket)
        except TypeError as exc:
            raise _invalid(
                name, f"bucket {bucket!r} is not {{'unit', 'time_zone'}}", "bucket=Bucket('day')"
            ) from exc
    if not isinstance(bucket, Bucket):
        raise _invalid(
            name, "bucket is required", "bucket=Bucket(unit='day', time_zone='Europe/Berlin')"
        )
    if bucket.unit not in units:
        raise _invalid(
            name,
            f"bucket unit {bucket.unit!r} is not a series() unit ({', '.join(units)})",
            "bucket=Bucket(unit='day')",
        )
    zone_name = bucket.time_zone
    if not isinstance(zone_name, str) or not zone_name or zone_name.startswith(("/", ".")):
        zone: ZoneInfo | None = None
    else:
        try:
            zone = ZoneInfo(zone_name) if ".." not in zone_name else None
        except (ZoneInfoNotFoundError, ValueError):
            zone = None
    if zone is None:
        raise _invalid(
            name,
            f"bucket time_zone {zone_name!r} is not an IANA zone name",
            "Bucket(unit='day', time_zone='Europe/Berlin')",
        )
    return bucket, zone


def rollup(
    *,
    name: str,
    into: Entity,
    table: Callable[[], Table],
    key: Sequence[str],
    lookback: Duration,
    bucket: Bucket | Mapping[str, str],
    source: Source,
    map: MapPoint,
    tenant: Any = "none",
    input: type[Any] | None = None,
    retry: Retry | None = None,
    queue: str | None = None,
    timeout: Duration | None = None,
) -> Job[Any, dict[str, Any]]:
    """A job recomputing the buckets inside ``lookback`` into ``into``; see the module.

    ``source(window)`` answers the series points (what ``q.series(...)`` answers) from
    ``window.since``; ``map(point, window)`` one row of ``into`` per point; ``key`` the columns of
    a unique index of ``into`` the upsert resolves on. The input (``input=``, default none) is
    ``window.input``; the same input enqueued while a run is queued dedupes onto it. The result:
    ``{"buckets": n, "since": iso}``.
    """
    ent_mod = need_entity("rollup")
    if not isinstance(name, str) or not name.strip():
        raise _invalid(name, "name is required (a durable queue key)", "rollup(name='...', ...)")
    if not isinstance(into, ent_mod.Entity):
        raise _invalid(name, f"into {into!r} is not an entity()", "into=likes_per_day")
    if into.view is not None:
        raise _invalid(name, f"into {into.name!r} is a view", "roll up into a table entity")
    for what, fn in (("table", table), ("source", source), ("map", map)):
        if not callable(fn):
            raise _invalid(name, f"{what} must be a callable", f"{what}=lambda ...: ...")
    if lookback is None:
        raise _invalid(name, "lookback is required (how late a row may land)", "lookback='2d'")
    try:
        lookback_ms = parse_duration(lookback, name="lookback")
    except XError as exc:
        raise _invalid(name, f"lookback {lookback!r} is not a positive duration", "'2d'") from exc
    the_bucket, zone = _bucket(name, bucket, tuple(ent_mod.SERIES_UNITS))
    if isinstance(key, str) or not key or not all(isinstance(c, str) for c in key):
        raise _invalid(name, f"key {key!r} is not a list of column names", "key=['org_id', 'day']")
    on_conflict = list(key)
    if frozenset(on_conflict) not in into.unique_sets():
        raise _invalid(
            name,
            f"no unique index of {into.name!r} covers key {on_conflict}",
            f"declare Index({tuple(on_conflict)!r}, unique=True) on {into.name!r}",
        )
    model: type[Any] = NoInput if input is None else input

    def idempotency_key(i: Any) -> str:
        form = json.dumps(to_json_form(i), sort_keys=True, separators=(",", ":"))
        return f"rollup:{name}:{hashlib.sha256(form.encode()).hexdigest()[:32]}"

    async def run(i: Any, step: Step, ctx: JobContext) -> dict[str, Any]:
        async def once(signal: Signal) -> dict[str, Any]:
            since = bucket_start(
                ctx.clock.now() - timedelta(milliseconds=lookback_ms), the_bucket.unit, zone
            )
            window = RollupWindow(since=since, bucket=the_bucket, input=i)
            points = await answer(source(window))
            rows: list[Mapping[str, Any]] = []
            for point in points:
                row = await answer(map(point, window))
                if not isinstance(row, Mapping):
                    raise XError(
                        "X_INVARIANT",
                        f"rollup({name!r}): map answered {type(row).__name__}, not a row (a dict)",
                        fix="map=lambda point, window: {'day': point.bucket, ...}",
                    )
                rows.append(row)
            if rows:
                handle = await answer(table())
                await handle.upsert_all(rows, on_conflict=on_conflict)
            return {"buckets": len(rows), "since": since.isoformat()}

        return cast("dict[str, Any]", await step.run("rollup", once))

    options: dict[str, Any] = {}
    if queue is not None:
        options["queue"] = queue
    return job(
        name=name,
        input=model,
        idempotency_key=idempotency_key,
        tenant=tenant,
        retry=retry,
        timeout=timeout,
        run=run,
        **options,
    )


__all__ = ["Bucket", "RollupWindow", "bucket_start", "rollup"]
