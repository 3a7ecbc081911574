"""The checks behind ``job()``: each adds its causes, so one refusal names every one of them."""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from typing import Any, cast

from pydantic import TypeAdapter

from ultimat3.core import XError, parse_duration
from ultimat3.jobs._declare.policy import (
    _CURVES,
    _JITTERS,
    _WHEN_BUSY,
    MAX_JOB_NAME,
    MAX_RETRY_ATTEMPTS,
    Concurrency,
    Retry,
    WhenBusy,
)

_UNSET: Any = object()
"""A keyword ``job()`` was not given."""


@dataclass(frozen=True, slots=True)
class _Causes:
    """The causes of one declaration's refusal: what is wrong, and how to fix each."""

    items: list[tuple[str, str]] = field(default_factory=list)

    def add(self, cause: str, fix: str) -> None:
        self.items.append((cause, fix))


def _only(causes: _Causes) -> list[str]:
    return [c for c, _ in causes.items]


def _type_name(tp: object) -> str:
    return getattr(tp, "__name__", None) or repr(tp)


def _check_name(name: object, body: object, causes: _Causes) -> str | None:
    if name is None:
        if body is None:
            return None
        derived = getattr(body, "__name__", None)
        if not isinstance(derived, str) or not derived.isidentifier():
            causes.add(
                f"name is missing and the body {body!r} has no usable __name__",
                "pass name='<durable queue key>' (factories and lambdas need it)",
            )
            return None
        return derived
    if not isinstance(name, str) or not name.strip() or len(name) > MAX_JOB_NAME:
        causes.add(
            f"name {name!r} is not a non-empty str of at most {MAX_JOB_NAME} characters",
            "name='onboard-org' — a durable queue key",
        )
        return None
    return name


def _check_input(tp: object, causes: _Causes) -> TypeAdapter[Any] | None:
    if tp is _UNSET:
        causes.add(
            "input is missing",
            "input=<a pydantic model, or any type pydantic validates>",
        )
        return None
    try:
        return TypeAdapter(cast(Any, tp))
    except Exception as exc:  # pydantic refuses types it cannot validate
        causes.add(
            f"input {tp!r} is not a type pydantic validates ({type(exc).__name__})",
            "input=<a pydantic model, or any type pydantic validates>",
        )
        return None


def _whole(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _check_retry(retry: object, causes: _Causes) -> Retry | None:
    if retry is None:
        retry = Retry()
    if not isinstance(retry, Retry):
        causes.add(
            f"retry is a {type(retry).__name__}, not a Retry",
            "retry=Retry(attempts=5, backoff='exponential')",
        )
        return None
    ok = True
    if not _whole(retry.attempts) or not 1 <= retry.attempts <= MAX_RETRY_ATTEMPTS:
        causes.add(
            f"retry.attempts {retry.attempts!r} is not a whole number in "
            f"1..{MAX_RETRY_ATTEMPTS:,} (MAX_RETRY_ATTEMPTS)",
            "Retry(attempts=3): the attempts in all, the first included",
        )
        ok = False
    if retry.backoff not in _CURVES:
        causes.add(
            f"retry.backoff {retry.backoff!r} is not one of {', '.join(_CURVES)}",
            "Retry(backoff='exponential' | 'linear' | 'fixed')",
        )
        ok = False
    if retry.jitter not in _JITTERS:
        causes.add(
            f"retry.jitter {retry.jitter!r} is not one of {', '.join(_JITTERS)}",
            "Retry(jitter='equal' | 'none' | 'full')",
        )
        ok = False
    delay = _check_duration("retry.delay", retry.delay, causes, allow_zero=True)
    max_delay = _check_duration("retry.max_delay", retry.max_delay, causes, allow_zero=True)
    if delay is None or max_delay is None:
        ok = False
    elif max_delay < delay:
        causes.add(
            f"retry.max_delay ({max_delay} ms) is shorter than retry.delay ({delay} ms)",
            "give max_delay >= delay",
        )
        ok = False
    dead_letter: object = retry.dead_letter
    if not isinstance(dead_letter, bool):
        causes.add(f"retry.dead_letter {dead_letter!r} is not a bool", "dead_letter=False")
        ok = False
    if not ok or delay is None or max_delay is None:
        return None
    return replace(retry, delay=delay, max_delay=max_delay)


def _check_cap(label: str, value: object, causes: _Causes) -> int | None:
    if _whole(value) and isinstance(value, int) and value >= 1:
        return value
    why = "NaN" if isinstance(value, float) and math.isnan(value) else repr(value)
    causes.add(
        f"{label} {why} is not a whole number >= 1 (0, negative, fractional, NaN and "
        "infinite caps are refused)",
        f"{label}=4, or drop it for no cap",
    )
    return None


def _check_concurrency(
    value: object, causes: _Causes
) -> tuple[int | None, Callable[[Any], str] | None, WhenBusy | None]:
    if value is None:
        return None, None, None
    if isinstance(value, Concurrency):
        limit = _check_cap("concurrency.limit", value.limit, causes)
        key: object = value.key
        if not callable(key):
            causes.add(
                f"concurrency.key is a {type(key).__name__}, not a function of the input",
                "Concurrency(key=lambda i: str(i.account_id), limit=1)",
            )
        if value.when_busy not in _WHEN_BUSY:
            causes.add(
                f"concurrency.when_busy {value.when_busy!r} is not 'wait' or 'fail'",
                "Concurrency(..., when_busy='wait' | 'fail')",
            )
        return limit, cast("Callable[[Any], str]", key) if callable(key) else None, value.when_busy
    if isinstance(value, int | float) and not isinstance(value, bool):
        return _check_cap("concurrency", value, causes), None, None
    causes.add(
        f"concurrency is a {type(value).__name__}: neither a cap nor a Concurrency",
        "concurrency=4, or Concurrency(key=lambda i: ..., limit=1, when_busy='wait')",
    )
    return None, None, None


def _check_duration(
    label: str, value: object, causes: _Causes, *, allow_zero: bool = False
) -> int | None:
    if value is None:
        return None
    try:
        return parse_duration(value, name=label, allow_zero=allow_zero)  # type: ignore[arg-type]
    except XError as exc:
        if allow_zero:
            causes.add(exc.message, f"{label}='1s' (a duration >= 0)")
        else:
            causes.add(
                exc.message + " (a non-positive ceiling would read as 'no ceiling')",
                f"{label}='30s' (a positive duration), or leave it unset",
            )
        return None
