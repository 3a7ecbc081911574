"""Values to and from the driver's scripts: JSON text, optional arguments, rows and steps.

A client may decode responses or not, so every value read back goes through :func:`text`.
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from ultimat3.core import XError, dumps_json, from_epoch_ms
from ultimat3.jobs.adapter import JobDetail, JobRow, StepRecord


def text(value: object) -> str:
    if isinstance(value, bytes):
        return value.decode("utf-8")
    return str(value)


def maybe_text(value: object) -> str | None:
    return None if value is None else text(value)


def opt(value: object | None) -> str:
    """An optional argument: ``""`` for ``None``, else ``"=" + value``."""
    return "" if value is None else "=" + str(value)


_encoder = json.JSONEncoder(ensure_ascii=False, separators=(",", ":"))


def _compact_json_maker() -> Callable[[Any], str]:
    """``_encoder.encode``, minus the C encoder it builds (and the cycle-check dict it fills) on
    every call: the same C encoder, built once, without the cycle check. Every value encoded here
    is acyclic (a payload only after ``_plain``, which a cycle fails) or made by the driver; a
    Python without the C accelerator keeps ``_encoder.encode``."""
    make = getattr(json.encoder, "c_make_encoder", None)
    if make is None:  # pragma: no cover - CPython always has it
        return _encoder.encode
    encode = make(None, _encoder.default, json.encoder.encode_basestring, None,
                  ":", ",", False, False, True)  # fmt: skip

    def compact_json(value: Any) -> str:
        return "".join(encode(value, 0))

    return compact_json


compact_json = _compact_json_maker()
"""JSON text without spaces or escapes beyond JSON's own: ``json.JSONEncoder(ensure_ascii=False,
separators=(",", ":")).encode(value)`` exactly, for an acyclic value."""


def _plain(value: object) -> bool:
    """Whether ``value`` is already its own JSON form: ``None``, ``bool``, ``str``, ``int``, a
    finite ``float``, and ``dict`` (``str`` keys) / ``list`` of those, exact types only."""
    kind = type(value)
    if value is None or kind is str or kind is int or kind is bool:
        return True
    if kind is float:
        return math.isfinite(value)  # type: ignore[arg-type]
    if kind is dict:
        return all(type(k) is str and _plain(v) for k, v in value.items())  # type: ignore[attr-defined]
    if kind is list:
        return all(_plain(v) for v in value)  # type: ignore[attr-defined]
    return False


def freeze(value: Any, *, what: str, code: str = "X_INVARIANT") -> str:
    """``value`` as JSON text (core's JSON form); refuses what has none with ``code``. A value
    that is its own JSON form already (an enqueue's payload, made by pydantic) goes straight to
    the C encoder: the same text as ``dumps_json``, at a fraction of the cost."""
    try:
        if _plain(value):
            return compact_json(value)
    except RecursionError:  # a cycle, or nesting past Python's limit: the full path says which
        pass
    try:
        return dumps_json(value)
    except XError as exc:
        raise XError(code, f"{what}: {exc.message}", fix=exc.fix, meta=exc.meta) from exc


def thaw(value: object) -> Any:
    return None if value is None else json.loads(text(value))


_LIVE_HEADS: dict[tuple[str, str | None], str] = {}
_quote = json.encoder.encode_basestring  # what compact_json writes a str as


def live_key(name: str, tenant_id: str | None, idempotency_key: str) -> str:
    """The live key as one string: ``None`` and ``""`` tenants stay distinct. It is
    ``compact_json([name, tenant_id, idempotency_key])``, the ``[name,tenant,`` head written
    once per job and tenant (each enqueue quotes its key alone)."""
    if type(idempotency_key) is not str:
        return compact_json([name, tenant_id, idempotency_key])
    head = _LIVE_HEADS.get((name, tenant_id))
    if head is None:
        head = compact_json([name, tenant_id])[:-1] + ","
        if len(_LIVE_HEADS) > 10_000:
            _LIVE_HEADS.clear()
        _LIVE_HEADS[(name, tenant_id)] = head
    return head + _quote(idempotency_key) + "]"


def pairs(flat: Sequence[Any]) -> dict[str, Any]:
    """A flat ``[field, value, ...]`` reply (``HGETALL`` from a script) as a dict."""
    return {text(flat[i]): flat[i + 1] for i in range(0, len(flat), 2)}


def _int(h: Mapping[str, Any], name: str) -> int | None:
    value = h.get(name)
    return None if value is None else int(text(value))


def _time(h: Mapping[str, Any], name: str) -> Any:
    ms = _int(h, name)
    return None if ms is None else from_epoch_ms(ms)


def _row_fields(h: Mapping[str, Any]) -> dict[str, Any]:
    return {
        "id": text(h["id"]),
        "run_id": text(h["run_id"]),
        "name": text(h["name"]),
        "queue": text(h["queue"]),
        "state": text(h["state"]),
        "attempts": _int(h, "attempts"),
        "max_attempts": _int(h, "max_attempts"),
        "run_at": _time(h, "run_at"),
        "created_at": _time(h, "created_at"),
        "updated_at": _time(h, "updated_at"),
        "idempotency_key": text(h["idempotency_key"]),
        "payload": thaw(h.get("payload")),
        "tenant_id": maybe_text(h.get("tenant_id")),
        "concurrency_key": maybe_text(h.get("concurrency_key")),
        "last_error": thaw(h.get("last_error")),
        "progress": thaw(h.get("progress")),
        "result": thaw(h.get("result")),
        "worker_id": maybe_text(h.get("worker_id")),
        "lease_expires_at": _time(h, "lease_expires_at"),
        "finished_at": _time(h, "finished_at"),
        "crashes": _int(h, "crashes") or 0,
    }


def job_row(flat: Sequence[Any]) -> JobRow:
    return JobRow(**_row_fields(pairs(flat)))


def job_detail(flat: Sequence[Any], steps: dict[str, StepRecord]) -> JobDetail:
    return JobDetail(**_row_fields(pairs(flat)), steps=steps)


def step_record(name: str, raw: object) -> tuple[int, StepRecord]:
    """One stored step (cjson ``{s, n, o, e, u, q}``) and its first-record sequence number."""
    rec = json.loads(text(raw))
    output, error = rec.get("o"), rec.get("e")
    updated = rec.get("u")
    return int(rec.get("q") or 0), StepRecord(
        name=name,
        state=rec["s"],
        executions=int(rec.get("n") or 0),
        output=None if output is None else json.loads(output),
        error=None if error is None else json.loads(error),
        updated_at=None if updated is None else from_epoch_ms(int(updated)),
    )


def step_records(flat: Sequence[Any]) -> dict[str, StepRecord]:
    """The steps hash, in the order the steps were first recorded."""
    decoded = [step_record(name, raw) for name, raw in pairs(flat).items()]
    decoded.sort(key=lambda pair: pair[0])
    return {rec.name: rec for _, rec in decoded}
