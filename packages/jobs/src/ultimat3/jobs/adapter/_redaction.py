"""What an operator surface must not print: a job input's ``x-sensitive`` values.

A job declares a field sensitive in its input model —
``Field(json_schema_extra={"x-sensitive": True})`` — and the mark lands in the input's JSON
schema. ``sensitive_paths(schema)`` reads the marks as **redaction paths** (property names, with
``*`` for every item of a list or every value of a map). A worker upserts its jobs' paths into the
driver's ``RedactionCatalog`` (``driver.redactions``) when it starts, so ``x jobs show`` and the
dashboard — which load no app — redact what the declarations mark. ``show_redacted`` is the one
read both use: the row through ``introspect.show``, its payload with the declared paths (and any
key naming a secret) replaced by ``[redacted]``. ``introspect.show`` itself answers the stored
values: ``job.result()`` and the test harness read through it.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import replace
from typing import Any, Final, Protocol, runtime_checkable

from ._model import JobDetail

REDACTED: Final = "[redacted]"
SENSITIVE_MARK: Final = "x-sensitive"
"""The JSON-schema keyword a sensitive field carries (``json_schema_extra={MARK: True}``)."""
ANY: Final = "*"
"""A path segment: every item of a list, every value of a map."""
MAX_PATHS: Final = 256
"""Paths kept per job (a schema marking more is cut there: the rest fall back to key names)."""
_MAX_DEPTH: Final = 32

SENSITIVE_KEY = re.compile(
    r"pass(word|wd|phrase)?|secret|token|api[-_]?key|auth(orization)?|cookie|credential|"
    r"private[-_]?key|session|ssn|card[-_]?number|cvv",
    re.IGNORECASE,
)
"""A key naming a secret: its value is redacted wherever it appears, declared or not."""

RedactionPath = tuple[str, ...]


@runtime_checkable
class RedactionCatalog(Protocol):
    """The drivers' store of redaction paths by job name (``driver.redactions``)."""

    async def declare(self, paths: Mapping[str, Sequence[Sequence[str]]]) -> None:
        """Add ``paths`` to each named job's set (a union: a worker of an older version that
        marks less never un-redacts what a newer one marked). One statement for all names."""
        ...

    async def lookup(self, names: Sequence[str]) -> dict[str, list[RedactionPath]]:
        """The declared paths of each of ``names`` that has any."""
        ...


def driver_redactions(driver: object) -> RedactionCatalog | None:
    found = getattr(driver, "redactions", None)
    return found if isinstance(found, RedactionCatalog) else None


# --- reading the marks --------------------------------------------------------------------------


def _marked(node: Mapping[str, Any]) -> bool:
    return node.get(SENSITIVE_MARK) is True


def sensitive_paths(schema: Mapping[str, Any]) -> list[RedactionPath]:
    """The paths of every ``x-sensitive`` node of a JSON schema (pydantic's ``$defs`` / ``$ref``,
    ``items``, ``additionalProperties``, ``anyOf`` / ``oneOf`` / ``allOf`` followed). ``()``: the
    whole input is sensitive."""
    given = schema.get("$defs")
    defs: Mapping[str, Any] = given if isinstance(given, Mapping) else {}
    found: list[RedactionPath] = []

    def walk(node: Any, path: RedactionPath, refs: frozenset[str]) -> None:
        if len(found) >= MAX_PATHS or len(path) > _MAX_DEPTH or not isinstance(node, Mapping):
            return
        if _marked(node):
            if path not in found:
                found.append(path)
            return
        ref = node.get("$ref")
        if isinstance(ref, str) and ref.startswith("#/$defs/") and ref not in refs:
            walk(defs.get(ref.removeprefix("#/$defs/")), path, refs | {ref})
        for key in ("anyOf", "oneOf", "allOf"):
            for option in node.get(key) or ():
                walk(option, path, refs)
        props = node.get("properties")
        if isinstance(props, Mapping):
            for name, sub in props.items():
                if isinstance(name, str):
                    walk(sub, (*path, name), refs)
        for key in ("items", "additionalProperties"):
            walk(node.get(key), (*path, ANY), refs)
        for option in node.get("prefixItems") or ():
            walk(option, (*path, ANY), refs)

    walk(schema, (), frozenset())
    return found


def declared_paths(jobs: Iterable[Any]) -> dict[str, list[RedactionPath]]:
    """``{job name: paths}`` for each job (anything with ``describe()``) whose input marks any."""
    out: dict[str, list[RedactionPath]] = {}
    for job in jobs:
        describe = getattr(job, "describe", None)
        if describe is None:
            continue
        row = describe()
        schema = row.get("input") if isinstance(row, Mapping) else None
        if isinstance(schema, Mapping):
            paths = sensitive_paths(schema)
            if paths:
                out[str(row["name"])] = paths
    return out


# --- applying them ------------------------------------------------------------------------------


def redact_keys(value: Any) -> Any:
    """``value`` with the values under a key naming a secret replaced, at any depth."""
    if isinstance(value, Mapping):
        return {
            k: REDACTED if isinstance(k, str) and SENSITIVE_KEY.search(k) else redact_keys(v)
            for k, v in value.items()
        }
    if isinstance(value, list | tuple):
        return [redact_keys(v) for v in value]
    return value


def _at(value: Any, path: RedactionPath) -> Any:
    if not path:
        return REDACTED
    head, rest = path[0], path[1:]
    if isinstance(value, Mapping):
        if head == ANY:
            return {k: _at(v, rest) for k, v in value.items()}
        if head in value:
            return {k: (_at(v, rest) if k == head else v) for k, v in value.items()}
        return value
    if isinstance(value, list | tuple) and head == ANY:
        return [_at(v, rest) for v in value]
    return value


def redact_paths(value: Any, paths: Iterable[Sequence[str]]) -> Any:
    """``value`` with what each path reaches replaced by ``[redacted]`` (absent: untouched)."""
    for path in paths:
        value = _at(value, tuple(path))
    return value


def redact_detail(job: JobDetail, paths: Iterable[Sequence[str]] = ()) -> JobDetail:
    """The row as an operator may see it: the payload through ``paths`` then the key names;
    the result and every step output through the key names."""
    steps = {
        name: replace(s, output=redact_keys(s.output)) if s.output is not None else s
        for name, s in job.steps.items()
    }
    return replace(
        job,
        payload=redact_keys(redact_paths(job.payload, paths)),
        result=redact_keys(job.result),
        steps=steps,
    )


async def show_redacted(
    driver: object,
    job_id: str,
    *,
    declared: Mapping[str, Sequence[Sequence[str]]] | None = None,
) -> JobDetail:
    """``introspect.show(job_id)`` redacted by the catalog's paths for the job's name, plus
    ``declared`` (an app's own declarations, ``declared_paths(jobs)``)."""
    intro = getattr(driver, "introspect", None)
    if intro is None:
        from ultimat3.core import XError

        raise XError(
            "X_NOT_IMPLEMENTED",
            f"the {getattr(driver, 'name', type(driver).__name__)!r} driver has no introspect: "
            "there is no job row to show",
            fix="use the Postgres, Redis or memory driver (each carries driver.introspect)",
        )
    job: JobDetail = await intro.show(job_id)
    paths: list[Sequence[str]] = list((declared or {}).get(job.name, ()))
    catalog = driver_redactions(driver)
    if catalog is not None:
        paths += (await catalog.lookup([job.name])).get(job.name, [])
    return redact_detail(job, paths)
