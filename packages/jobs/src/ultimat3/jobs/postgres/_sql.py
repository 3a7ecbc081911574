"""The driver's SQL: named blocks of ``sql/queries/*.sql`` (one file per concern), compiled once
per schema.

Every table name is a ``psycopg.sql.Identifier`` qualified by the schema, so a hostile schema name
is quoted, never spliced; literals (the notify channel, the counter tiers) are
``psycopg.sql.Literal``. The compiled text is constant per driver, so psycopg prepares it.
"""

from __future__ import annotations

import hashlib
import json
import re
from functools import cache
from importlib import resources
from types import MappingProxyType
from typing import Final

from psycopg import sql

from ultimat3.core import XError
from ultimat3.jobs.adapter import COUNTER_TIERS

TABLES: Final[tuple[str, ...]] = (
    "x_schema_migrations",
    "x_jobs",
    "x_job_steps",
    "x_job_leases",
    "x_job_counters",
    "x_outbox",
    "x_events",
    "x_backfills",
    "x_task_fires",
    "x_workers",
    "x_paused_queues",
    "x_paused_tasks",
    "x_job_redactions",
)
"""Every table the driver owns, as named in ``sql/schema.sql``."""

MAX_IDENTIFIER_BYTES: Final = 63
_NAME = re.compile(r"^-- name: ([a-z_][a-z0-9_]*)\s*$", re.MULTILINE)
_GENERIC_MARK = re.compile(r"^--\s*plan:\s*generic\s*$")
_PLACEHOLDER = re.compile(r"\{([a-z_][a-z0-9_]*)\}")


def sql_text(name: str) -> str:
    """A file of the ``sql`` folder (``schema.sql``, ``sql/queries/*.sql``) as text."""
    return resources.files(__package__).joinpath("sql", name).read_text(encoding="utf-8")


def migration_files() -> list[tuple[int, str, str]]:
    """``(version, file name, text)`` of every ``sql/migrations/NNNN_name.sql``, in order."""
    folder = resources.files(__package__).joinpath("sql", "migrations")
    out: list[tuple[int, str, str]] = []
    for entry in folder.iterdir():
        match = re.fullmatch(r"(\d{4})_[a-z0-9_]+\.sql", entry.name)
        if match:
            out.append((int(match.group(1)), entry.name, entry.read_text(encoding="utf-8")))
    out.sort()
    return out


QUERY_FILES: Final = "queries"
"""The folder of ``sql`` holding the statements, one file per concern (enqueue, claim, settle,
introspect, leases, outbox, events, tasks, counters, ...)."""


@cache
def _parsed() -> tuple[MappingProxyType[str, str], frozenset[str]]:
    """Every named block of ``sql/queries/*.sql`` (its text without the leading comment lines),
    and the names whose leading comment says ``-- plan: generic``."""
    folder = resources.files(__package__).joinpath("sql", QUERY_FILES)
    found: dict[str, str] = {}
    where: dict[str, str] = {}
    generic: set[str] = set()
    for entry in sorted(folder.iterdir(), key=lambda e: e.name):
        if not entry.name.endswith(".sql"):
            continue
        text = entry.read_text(encoding="utf-8")
        marks = list(_NAME.finditer(text))
        for i, mark in enumerate(marks):
            end = marks[i + 1].start() if i + 1 < len(marks) else len(text)
            lines = text[mark.end() : end].strip("\n").splitlines()
            name = mark.group(1)
            while lines and lines[0].lstrip().startswith("--"):
                if _GENERIC_MARK.match(lines.pop(0).strip()):
                    generic.add(name)
            if name in found:
                raise RuntimeError(f"sql block {name!r} is named in {where[name]} and {entry.name}")
            found[name] = "\n".join(lines).strip()
            where[name] = entry.name
    return MappingProxyType(found), frozenset(generic)


def blocks() -> MappingProxyType[str, str]:
    """The named blocks of every ``sql/queries/*.sql``, each without its leading comment lines;
    a name is unique across the files (a second one is a bug, refused here)."""
    return _parsed()[0]


def generic_plans() -> frozenset[str]:
    """The blocks marked ``-- plan: generic`` in their leading comment: the worker's hot
    statements, which the driver runs on its own pool under ``plan_cache_mode =
    force_generic_plan`` (planned once per connection, not again at every execution — the
    claim's custom plan cost more than its execution). Every other statement keeps Postgres's
    ``auto``: an optional filter (``%(x)s IS NULL OR ...``) needs its custom plan."""
    return _parsed()[1]


def check_schema_name(schema: str) -> str:
    """``schema`` if Postgres can name a schema so; else ``X_CONFIG_INVALID``."""
    if not isinstance(schema, str) or not schema:
        raise XError(
            "X_CONFIG_INVALID",
            f"postgres job driver: schema {schema!r} is not a schema name",
            fix="pass schema='jobs' (or leave it unset for 'public')",
        )
    if "\x00" in schema or len(schema.encode()) > MAX_IDENTIFIER_BYTES:
        raise XError(
            "X_CONFIG_INVALID",
            f"postgres job driver: schema {schema[:80]!r} is longer than "
            f"{MAX_IDENTIFIER_BYTES} bytes or holds a NUL character",
            fix="pick a schema name of at most 63 bytes",
        )
    return schema


def wake_channel(schema: str) -> str:
    """The LISTEN / NOTIFY channel of a schema's queue: ``x_jobs`` for ``public``, else
    ``x_jobs.<schema>`` (hashed when that would pass 63 bytes). The payload is a queue name."""
    if schema == "public":
        return "x_jobs"
    channel = f"x_jobs.{schema}"
    if len(channel.encode()) <= MAX_IDENTIFIER_BYTES:
        return channel
    return "x_jobs." + hashlib.sha256(schema.encode()).hexdigest()[:32]


EVENT_NOTE: Final = "\x01x-event:"
"""A wake-channel payload that starts so names a committed event's id (``x_events.id``), not a
queue (no queue is named that way)."""


def outbox_channel(schema: str) -> str:
    """The channel an outbox stage notifies at commit, so an idle relay passes at once."""
    channel = f"x_outbox.{schema}"
    if len(channel.encode()) <= MAX_IDENTIFIER_BYTES:
        return channel
    return "x_outbox." + hashlib.sha256(schema.encode()).hexdigest()[:32]


def settle_channel(schema: str) -> str:
    """The channel a run's final settle (done, dead, failed) notifies with its id at commit, so
    a ``job.result()`` waiter wakes at once."""
    channel = f"x_settled.{schema}"
    if len(channel.encode()) <= MAX_IDENTIFIER_BYTES:
        return channel
    return "x_settled." + hashlib.sha256(schema.encode()).hexdigest()[:32]


def _lease_lost_error() -> str:
    base = XError("X_JOB_LEASE_LOST", "the lease lapsed on the final attempt").to_dict()
    return json.dumps(base, separators=(",", ":"))


def _int_array(values: tuple[int, ...]) -> sql.Composable:
    return sql.Literal("{" + ",".join(str(v) for v in values) + "}")


@cache
def compile_queries(schema: str) -> MappingProxyType[str, str]:
    """Every block of ``sql/queries/*.sql`` rendered for ``schema``: fragments pasted in, tables as
    quoted qualified identifiers, literals quoted."""
    check_schema_name(schema)
    fills: dict[str, sql.Composable] = {t: sql.Identifier(schema, t) for t in TABLES}
    fills["schema"] = sql.Identifier(schema)
    fills["lease_tokens"] = sql.Literal(
        sql.Identifier(schema, "x_job_lease_tokens").as_string(None)
    )
    fills["channel"] = sql.Literal(wake_channel(schema))
    fills["channel_ident"] = sql.Identifier(wake_channel(schema))
    fills["settle_channel_ident"] = sql.Identifier(settle_channel(schema))
    fills["outbox_channel"] = sql.Literal(outbox_channel(schema))
    fills["outbox_channel_ident"] = sql.Identifier(outbox_channel(schema))
    fills["settle_channel"] = sql.Literal(settle_channel(schema))
    fills["event_note"] = sql.Literal(EVENT_NOTE)
    fills["counter_bucket_ms"] = _int_array(tuple(b for b, _ in COUNTER_TIERS))
    fills["counter_kept_ms"] = _int_array(tuple(k for _, k in COUNTER_TIERS))
    fills["counter_tiers"] = sql.Literal(len(COUNTER_TIERS))
    fills["lease_lost_error"] = sql.Literal(_lease_lost_error())
    source = blocks()

    def paste(text: str) -> str:
        def one(match: re.Match[str]) -> str:
            name = match.group(1)
            return paste(source[name]) if name in source else match.group(0)

        return _PLACEHOLDER.sub(one, text)

    out: dict[str, str] = {}
    for name, text in source.items():
        out[name] = sql.SQL(paste(text)).format(**fills).as_string(None)
    return MappingProxyType(out)
