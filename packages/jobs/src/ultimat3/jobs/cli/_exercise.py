"""``x exercise --app module:attribute``: prove every subject's erase on a scratch schema.

The app is loaded as ``x verify`` loads it. The personal-data checks run first
(``X_PERSONAL_DATA_UNERASED`` / ``X_PERSONAL_DATA_UNREACHED`` and every plan refusal are
findings); then, for each subject whose plan stands, ``subject_proof()`` runs on a scratch
schema of its own (``x_exercise_<id>``, on ``--database-url`` / ``DATABASE_URL``; an in-memory
copy for a subject over a ``memory_database``), and the schema is dropped after, whatever the
proof found. Each canary left is an ``X_SUBJECT_ERASE_INCOMPLETE`` finding naming the table and
the column. Any finding exits 1. No row of the app's own schema is read or written.
"""

from __future__ import annotations

import argparse
from typing import Any

from ultimat3.core import XError, new_id
from ultimat3.jobs.cli._driver import redact
from ultimat3.jobs.cli._invocation import Commands, Invocation, add_command
from ultimat3.jobs.cli._output import Answer
from ultimat3.jobs.cli._verify import findings_answer, load_app

SCRATCH_PREFIX = "x_exercise_"


def register(root: Commands, common: argparse.ArgumentParser) -> None:
    p = add_command(
        root,
        "exercise",
        summary="prove every define_subject() of the app: seed a generated person with canaries "
        "on a scratch schema, erase them, report what is left (X_SUBJECT_ERASE_INCOMPLETE); "
        "drops the scratch schema after; exits 1 on any finding",
        handler=cmd_exercise,
        common=common,
    )
    p.add_argument(
        "--app",
        required=True,
        metavar="MODULE:ATTR",
        help="the app's jobs and subjects, e.g. myapp.jobs:JOBS",
    )


async def cmd_exercise(inv: Invocation) -> Answer:
    from ultimat3.jobs.factories.subject import personal_data_problems
    from ultimat3.jobs.factories.subject_proof import subject_proof

    loaded = load_app(inv.args.app)
    findings: list[XError] = list(loaded.findings)
    proved: list[dict[str, Any]] = []
    if loaded.subjects:
        findings += personal_data_problems(loaded.subjects)
    for subject in loaded.subjects:
        try:
            subject.plan()
        except XError:
            continue  # already a finding: nothing to prove
        scratch, drop = _scratch(inv, subject)
        try:
            inv.progress(f"x exercise: proving {subject.name!r} on {_where(scratch)}")
            found = await subject_proof(subject, database=scratch)
        except XError as exc:  # the erase itself failed: that is what the proof found
            found = [exc]
        finally:
            await drop()
        findings += found
        proved.append({"subject": subject.name, "findings": len(found)})
    return findings_answer("exercise", loaded, findings, proved=proved)


def _where(db: Any) -> str:
    schema = getattr(db, "schema", None)
    return f"scratch schema {schema}" if schema else "an in-memory copy"


def _scratch(inv: Invocation, subject: Any) -> tuple[Any, Any]:
    """A database declaring the subject's entities on a fresh schema, and how to drop it."""
    from ultimat3.entity import Database, database, memory_database

    declared = subject.database
    entities = list(declared.entities.values())
    if not isinstance(declared, Database):

        async def nothing() -> None:
            return None

        return memory_database(entities), nothing
    url = inv.source.choice.url if inv.source.choice.kind == "postgres" else None
    if not url:
        raise XError(
            "X_CONFIG_INVALID",
            f"x exercise needs a Postgres database for the scratch schema of {subject.name!r}: "
            "neither --database-url nor DATABASE_URL is set",
            fix="export DATABASE_URL=postgresql://user@host/db (or pass --database-url); the "
            "proof writes only to a schema of its own and drops it",
        )
    schema = SCRATCH_PREFIX + new_id().replace("-", "")[:16]
    scratch = database(url, entities, schema=schema, key_ring=declared.key_ring)

    async def drop() -> None:
        import psycopg
        from psycopg import sql

        try:
            await scratch.close()
        finally:
            try:
                async with await psycopg.AsyncConnection.connect(url, autocommit=True) as conn:
                    await conn.execute(
                        sql.SQL("DROP SCHEMA IF EXISTS {} CASCADE").format(sql.Identifier(schema))
                    )
            except psycopg.Error as exc:
                raise XError(
                    "X_CONFIG_INVALID",
                    f"x exercise: could not drop the scratch schema {schema} on {redact(url)}: "
                    f"{exc}",
                    fix=f"drop schema {schema} cascade",
                ) from exc

    return scratch, drop


__all__ = ["SCRATCH_PREFIX", "register"]
