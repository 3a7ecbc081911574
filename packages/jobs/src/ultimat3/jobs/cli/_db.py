"""``x db ...``: the Postgres schema (``migrate``) and the backfill ledger (``backfill --list``)."""

from __future__ import annotations

import argparse
import inspect
import time
from typing import Any

from ultimat3.core import XError
from ultimat3.jobs.adapter import MAX_JOB_PAGE, driver_backfills, to_json_dict
from ultimat3.jobs.cli._driver import POSTGRES_MODULE, load_callable, maybe_await, redact
from ultimat3.jobs.cli._invocation import Commands, Invocation, add_command
from ultimat3.jobs.cli._output import Answer, backfill_table


def register(root: Commands, common: argparse.ArgumentParser) -> None:
    db = root.add_parser("db", help="the jobs schema and the backfill ledger", parents=[common])
    group = db.add_subparsers(dest="db_command", metavar="<command>", required=True)
    add_command(
        group,
        "migrate",
        summary="bring the Postgres jobs schema up to date (DATABASE_URL / --database-url)",
        handler=cmd_migrate,
        common=common,
    )
    p = add_command(
        group,
        "backfill",
        summary="the backfill() ledger: one row per pass, newest first",
        handler=cmd_backfill,
        common=common,
    )
    p.add_argument("--list", action="store_true", required=True, help="list the passes")
    p.add_argument(
        "--limit",
        type=int,
        default=MAX_JOB_PAGE,
        help=f"at most this many passes (default {MAX_JOB_PAGE})",
    )


async def cmd_migrate(inv: Invocation) -> Answer:
    choice = inv.source.choice
    if choice.kind != "postgres" or not choice.url:
        raise XError(
            "X_CONFIG_INVALID",
            "x db migrate needs the Postgres database: neither --database-url nor DATABASE_URL "
            "is set",
            fix="export DATABASE_URL=postgresql://user@host/db (or pass --database-url)",
        )
    migrate = load_callable(
        POSTGRES_MODULE,
        "migrate",
        what="the Postgres job driver's migrate (ultimat3.jobs.postgres)",
        fix="pip install -U ultimat3-jobs",
    )
    where = redact(choice.url) + (f" (schema {choice.schema})" if choice.schema else "")
    kwargs: dict[str, Any] = {} if choice.schema is None else {"schema": choice.schema}
    if _accepts(migrate, "progress"):
        kwargs["progress"] = lambda line: inv.progress(f"x db migrate: {line}")
    inv.progress(f"x db migrate: migrating {where} ...")
    started = time.monotonic()
    result = await maybe_await(migrate(choice.url, **kwargs))
    seconds = round(time.monotonic() - started, 3)
    inv.progress(f"x db migrate: done in {seconds:.2f}s")
    data = {
        "migrated": True,
        "database": redact(choice.url),
        "schema": choice.schema if choice.schema is not None else "public",
        "result": to_json_dict(result),
        "seconds": seconds,
    }
    return Answer(data, f"{where} is up to date" + _applied(result))


def _accepts(fn: Any, name: str) -> bool:
    try:
        params = inspect.signature(fn).parameters
    except (TypeError, ValueError):
        return False
    return name in params


def _applied(result: Any) -> str:
    if isinstance(result, list | tuple):
        if not result:
            return ": nothing to apply"
        return f": applied versions {', '.join(str(r) for r in result)}"
    return ""


async def cmd_backfill(inv: Invocation) -> Answer:
    driver = await inv.driver()
    ledger = driver_backfills(driver)
    if ledger is None:
        inv.progress(f"x db backfill: the {driver.name} driver keeps no backfill ledger")
        return Answer({"backfills": []}, "no backfill ledger on this driver")
    rows = await ledger.list(limit=inv.args.limit)
    text = backfill_table(rows) if rows else "no backfill passes recorded"
    return Answer({"backfills": to_json_dict(rows)}, text)
