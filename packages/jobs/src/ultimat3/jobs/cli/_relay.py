"""``x relay``: run the outbox relay loop until SIGTERM or SIGINT; ``x worker --relay`` runs the
same loop beside the worker.

The outbox is the ``x_outbox`` table of the APP's database: ``--outbox-url`` (default
``$OUTBOX_DATABASE_URL``, else the jobs database, ``--database-url`` / ``$DATABASE_URL``) in
``--outbox-schema`` (default ``--schema``, else ``public``). What it publishes goes to the job
driver the command resolved (Postgres, or ``--driver redis``). The loop passes every
``--interval-ms`` (200) while it finds rows, doubling to ``--idle-poll-max-ms`` (2 s; 5 s while
its LISTEN on the stage's commit notification is proven) while it does not, and a commit wakes
it at once. The first pass runs before the command reports it is running, so a database nobody
migrated is refused at once instead of logged every pass.
"""

from __future__ import annotations

import argparse
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from ultimat3.core import XError, swap_adapter
from ultimat3.jobs.adapter import JOB_DRIVER, OUTBOX_STORE, to_json_dict
from ultimat3.jobs.cli._driver import POSTGRES_MODULE, load_callable, maybe_await, redact
from ultimat3.jobs.cli._invocation import Commands, Invocation
from ultimat3.jobs.cli._logging import check_log_options, root_logging
from ultimat3.jobs.cli._output import Answer
from ultimat3.jobs.cli._signals import stop_signals

if TYPE_CHECKING:
    from ultimat3.jobs import RelayLoop


def register(root: Commands, common: argparse.ArgumentParser) -> None:
    summary = "publish the outbox's committed rows onto the job driver until SIGTERM or SIGINT"
    p = root.add_parser("relay", help=summary, description=summary, parents=[common])
    p.set_defaults(handler=cmd_relay)
    add_relay_arguments(p)
    p.add_argument(
        "--log-level",
        default="info",
        metavar="LEVEL",
        help="the root logger's level: debug, info (default), warning, error",
    )
    p.add_argument(
        "--log-format",
        default="text",
        metavar="FORMAT",
        help="text (default) or json (one object a line)",
    )


def add_relay_arguments(p: argparse.ArgumentParser) -> None:
    """The relay's flags (``x relay`` and ``x worker --relay``)."""
    from ultimat3.jobs._process.relay import DEFAULT_RELAY_BATCH
    from ultimat3.jobs._process.relay_loop import (
        DEFAULT_RELAY_IDLE_MAX_MS,
        DEFAULT_RELAY_INTERVAL_MS,
    )

    p.add_argument(
        "--outbox-url",
        metavar="URL",
        help="the app's database holding x_outbox (default: $OUTBOX_DATABASE_URL, else the jobs "
        "database: --database-url / $DATABASE_URL)",
    )
    p.add_argument(
        "--outbox-schema",
        metavar="SCHEMA",
        help="the schema of x_outbox there (default: --schema, else public)",
    )
    p.add_argument(
        "--relay-interval-ms",
        type=int,
        default=DEFAULT_RELAY_INTERVAL_MS,
        metavar="MS",
        help=f"the pause between passes that find rows (default {DEFAULT_RELAY_INTERVAL_MS})",
    )
    p.add_argument(
        "--relay-idle-max-ms",
        type=int,
        default=DEFAULT_RELAY_IDLE_MAX_MS,
        metavar="MS",
        help=f"the idle pause's ceiling (default {DEFAULT_RELAY_IDLE_MAX_MS}; 5000 while the "
        "LISTEN wake is proven)",
    )
    p.add_argument(
        "--relay-batch",
        type=int,
        default=DEFAULT_RELAY_BATCH,
        metavar="N",
        help=f"rows a pass publishes at most (default {DEFAULT_RELAY_BATCH})",
    )


@dataclass(slots=True)
class OpenedRelay:
    loop: RelayLoop
    store: Any
    where: str

    async def close(self) -> None:
        try:
            await self.loop.stop()
        finally:
            await self.store.close()


def outbox_url(inv: Invocation) -> str:
    a = inv.args
    url = (
        getattr(a, "outbox_url", None)
        or inv.env.get("OUTBOX_DATABASE_URL")
        or getattr(a, "database_url", None)
        or inv.env.get("DATABASE_URL")
    )
    if not url:
        raise XError(
            "X_CONFIG_INVALID",
            "the relay has no outbox to read: none of --outbox-url, OUTBOX_DATABASE_URL, "
            "--database-url or DATABASE_URL is set",
            fix="pass --outbox-url postgresql://user@host/appdb (the database the app stages "
            "its enqueues in; x db migrate creates x_outbox there)",
        )
    return str(url)


async def open_relay(inv: Invocation, driver: Any) -> OpenedRelay:
    """The relay loop over the outbox the flags name, onto ``driver``, started after one pass
    (which raises what the outbox refuses: a bad URL, a schema nobody migrated)."""
    from ultimat3.jobs._process.relay_loop import relay_loop

    a = inv.args
    url = outbox_url(inv)
    schema = getattr(a, "outbox_schema", None) or getattr(a, "schema", None) or "public"
    factory = load_callable(
        POSTGRES_MODULE,
        "postgres_outbox_store",
        what="the Postgres outbox store (ultimat3.jobs.postgres)",
        fix="pip install -U ultimat3-jobs",
    )
    store = await maybe_await(factory(url, schema=schema))  # connects on first use
    try:
        loop = relay_loop(
            driver=driver,
            store=store,
            interval_ms=a.relay_interval_ms,
            idle_poll_max_ms=a.relay_idle_max_ms,
            batch_size=a.relay_batch,
        )
        opened = OpenedRelay(loop, store, f"{redact(url)} schema {schema}")
        await loop.run_pass()
        await loop.start()
    except BaseException:
        await store.close()
        raise
    return opened


async def cmd_relay(inv: Invocation) -> Answer:
    a = inv.args
    check_log_options(a.log_level, a.log_format)
    outbox_url(inv)  # refused before the driver is opened
    with root_logging(a.log_level, a.log_format):
        driver = await inv.driver()
        with swap_adapter(JOB_DRIVER, driver):
            opened = await open_relay(inv, driver)
            try:
                with swap_adapter(OUTBOX_STORE, opened.store), stop_signals() as (stop, got):
                    inv.progress(
                        f"x relay: publishing the outbox of {opened.where} onto the "
                        f"{driver.name} driver; SIGTERM or Ctrl-C stops it"
                    )
                    await stop.wait()
                    inv.progress(f"x relay: {got[0]} received: stopping after the pass in hand")
            finally:
                await opened.close()
    stats = opened.loop.stats()
    return Answer(
        {"signal": got[0], "outbox": opened.where, "stats": to_json_dict(stats)},
        f"x relay: stopped after {got[0]}: {stats.published} published in {stats.passes} "
        f"passes, {stats.failures} failed, {stats.wakes} woken by a commit",
    )
