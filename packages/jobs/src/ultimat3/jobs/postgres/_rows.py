"""Rows off the wire into the port's values, and values onto it (JSON text, checked names)."""

from __future__ import annotations

import json
import math
from collections.abc import Mapping, Sequence
from datetime import UTC, datetime
from typing import Any, Final

from ultimat3.core import XError, is_lowercase_uuid, to_json_form
from ultimat3.jobs.adapter import BackfillRow, JobDetail, JobRow, StepRecord, WorkerRow

JOB_COLUMNS: Final = 21
"""How many columns the ``job_columns`` fragment of ``sql/queries/*.sql`` selects."""


def utc(value: datetime) -> datetime:
    """An aware datetime in UTC (psycopg answers in the session's time zone)."""
    return value.astimezone(UTC)


def utc_or_none(value: datetime | None) -> datetime | None:
    return None if value is None else value.astimezone(UTC)


def job_row(r: Sequence[Any]) -> JobRow:
    """A ``JobRow`` from the first ``JOB_COLUMNS`` columns (``job_columns`` in sql/queries/)."""
    return JobRow(
        id=r[0],
        run_id=r[1],
        name=r[2],
        queue=r[3],
        state=r[4],
        attempts=r[5],
        max_attempts=r[6],
        run_at=utc(r[7]),
        created_at=utc(r[8]),
        updated_at=utc(r[9]),
        idempotency_key=r[10],
        payload=r[11],
        tenant_id=r[12],
        concurrency_key=r[13],
        last_error=r[14],
        progress=r[15],
        result=r[16],
        worker_id=r[17],
        lease_expires_at=utc_or_none(r[18]),
        finished_at=utc_or_none(r[19]),
        crashes=r[20],
    )


def step_record(r: Sequence[Any], at: int = 0) -> StepRecord:
    """A ``StepRecord`` from ``name, state, executions, output, error, updated_at`` at ``at``."""
    return StepRecord(
        name=r[at],
        state=r[at + 1],
        executions=r[at + 2],
        output=r[at + 3],
        error=r[at + 4],
        updated_at=utc_or_none(r[at + 5]),
    )


def job_detail(rows: Sequence[Sequence[Any]]) -> JobDetail:
    """``show``: the job columns repeated on every row, one step per row (none: NULLs)."""
    first = job_row(rows[0])
    steps = {r[JOB_COLUMNS]: step_record(r, JOB_COLUMNS) for r in rows if r[JOB_COLUMNS]}
    fields = {name: getattr(first, name) for name in JobRow.__dataclass_fields__}
    return JobDetail(**fields, steps=steps)


def worker_row(r: Sequence[Any]) -> WorkerRow:
    return WorkerRow(
        id=r[0],
        host=r[1],
        started_at=utc(r[2]),
        queues=tuple(r[3]),
        slots=r[4],
        in_flight=tuple(r[5]),
        last_heartbeat_at=utc(r[6]),
    )


def backfill_row(r: Sequence[Any]) -> BackfillRow:
    return BackfillRow(
        id=r[0],
        name=r[1],
        state=r[2],
        rows=r[3],
        cursor=r[4],
        started_at=utc(r[5]),
        updated_at=utc(r[6]),
        job_id=r[7],
    )


def is_plain_json(value: Any, depth: int = 0) -> bool:
    """Whether ``value`` is already its own JSON form: exact dict (str keys) / list / str / int /
    finite float / bool / None. Type identity checks only, so the common payload skips core's
    general (and slower) walk; anything else takes that walk."""
    kind = type(value)
    if kind is str or kind is int or kind is bool or value is None:
        return True
    if kind is float:
        return math.isfinite(value)
    if depth > 64:
        return False
    if kind is dict:
        return all(type(k) is str and is_plain_json(v, depth + 1) for k, v in value.items())
    if kind is list:
        return all(is_plain_json(v, depth + 1) for v in value)
    return False


def json_form(value: Any, *, what: str, code: str = "X_INVARIANT") -> Any:
    """``value`` in core's JSON form (a datetime becomes its ISO string ...); refuses what has
    none with ``code`` naming ``what``."""
    if is_plain_json(value):
        return value
    try:
        return to_json_form(value)
    except XError as exc:
        raise XError(code, f"{what}: {exc.message}", fix=exc.fix, meta=exc.meta) from exc


def json_text(form: Any, *, what: str, code: str = "X_INVARIANT") -> str:
    """JSON text of a value already in JSON form, for a ``jsonb`` parameter; refuses a NUL
    character, which ``jsonb`` cannot store."""
    text = json.dumps(form, separators=(",", ":"), ensure_ascii=False)
    if "\\u0000" in text and _holds_nul(form):
        raise XError(
            code,
            f"{what} holds a NUL character (\\u0000), which Postgres jsonb cannot store",
            fix="drop or escape the NUL character before storing the value",
        )
    return text


def _holds_nul(form: Any) -> bool:
    if isinstance(form, str):
        return "\x00" in form
    if isinstance(form, dict):
        return any("\x00" in k or _holds_nul(v) for k, v in form.items())
    if isinstance(form, list):
        return any(_holds_nul(v) for v in form)
    return False


def to_json_text(value: Any, *, what: str, code: str = "X_INVARIANT") -> str:
    """``value`` as JSON text for a ``jsonb`` parameter (``json_form`` then ``json_text``)."""
    return json_text(json_form(value, what=what, code=code), what=what, code=code)


def json_or_none(value: Mapping[str, Any] | None, *, what: str) -> str | None:
    return None if value is None else to_json_text(dict(value), what=what)


def check_text(value: object, *, what: str, optional: bool = False) -> str | None:
    """A non-empty str Postgres can store (no NUL character); ``X_INVARIANT`` naming ``what``."""
    if value is None and optional:
        return None
    if not isinstance(value, str) or not value:
        raise XError(
            "X_INVARIANT",
            f"{what} is empty or not a string: {value!r}"[:200],
            fix="pass a non-empty string",
        )
    if "\x00" in value:
        raise XError(
            "X_INVARIANT",
            f"{what} {value[:80]!r} holds a NUL character, which Postgres text cannot store",
            fix="drop the NUL character from the name",
        )
    return value


def check_uuid(value: object, *, what: str) -> str:
    """A lowercase UUID (``x_jobs`` keys are ``uuid``); ``X_ID_INVALID`` naming ``what``."""
    if is_lowercase_uuid(value):
        return value
    shown = repr(value)
    if len(shown) > 80:
        shown = shown[:77] + "..."
    raise XError(
        "X_ID_INVALID",
        f"{what} must be a lowercase UUID, got {shown}",
        fix="allocate ids with new_id() (the job handle does), as canonical lowercase UUIDs",
        meta={"what": what},
    )


def ms_param(value: object, *, what: str) -> int | None:
    """An optional whole number of milliseconds."""
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int):
        raise XError(
            "X_INVARIANT",
            f"{what} {value!r} is not a whole number of milliseconds",
            fix=f"pass {what} as an int (or None)",
        )
    return value


def fenced_ids(job_id: object, claim: object) -> bool:
    """Whether a settle can match at all: ids this driver hands out are lowercase UUIDs, so
    anything else is a fenced miss, answered ``False`` without a round trip."""
    return is_lowercase_uuid(job_id) and is_lowercase_uuid(claim)
