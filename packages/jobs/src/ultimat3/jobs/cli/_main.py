"""``main(argv)``: parse, resolve the driver once, run one command, print, answer an exit code."""

from __future__ import annotations

import argparse
import asyncio
import os
import sys
from collections.abc import Mapping, Sequence
from importlib.metadata import entry_points
from typing import NoReturn, TextIO

from ultimat3.core import XError
from ultimat3.jobs.adapter import JobDriver
from ultimat3.jobs.cli import _dashboard, _db, _jobs, _relay, _scheduler, _tasks, _worker
from ultimat3.jobs.cli._driver import DRIVER_KINDS, DriverSource, choose_driver, redact
from ultimat3.jobs.cli._invocation import Handler, Invocation
from ultimat3.jobs.cli._output import (
    EXIT_ERROR,
    EXIT_INTERRUPTED,
    EXIT_OK,
    EXIT_USAGE,
    emit,
    emit_error,
    usage_error,
)

PROG = "x"
PLUGIN_GROUP = "ultimat3.cli"
"""The entry point group other distributions register ``x`` subcommands in."""


class UsageError(Exception):
    def __init__(self, parser: argparse.ArgumentParser, message: str) -> None:
        super().__init__(message)
        self.parser = parser
        self.message = message


class _Parser(argparse.ArgumentParser):
    """argparse, except a bad command line raises instead of exiting, so ``main`` can answer it
    as JSON under ``--json`` and return 2 instead of ending the caller's process."""

    def error(self, message: str) -> NoReturn:
        raise UsageError(self, message)


def _common() -> argparse.ArgumentParser:
    """The flags every command takes. Defaults are SUPPRESSed, so ``x --json jobs list`` and
    ``x jobs list --json`` both work and a subcommand never resets what the root parsed."""
    common = _Parser(add_help=False)
    common.add_argument(
        "--json",
        action="store_true",
        default=argparse.SUPPRESS,
        help="machine-readable output on stdout; errors as JSON on stderr",
    )
    common.add_argument(
        "--database-url",
        metavar="URL",
        default=argparse.SUPPRESS,
        help="the Postgres database (default: $DATABASE_URL)",
    )
    common.add_argument(
        "--driver",
        choices=DRIVER_KINDS,
        default=argparse.SUPPRESS,
        help="which driver to talk to (default: postgres)",
    )
    common.add_argument(
        "--redis-url",
        metavar="URL",
        default=argparse.SUPPRESS,
        help="with --driver redis (default: $REDIS_URL)",
    )
    common.add_argument(
        "--schema",
        default=argparse.SUPPRESS,
        help="the Postgres schema holding the jobs tables",
    )
    return common


def build_parser() -> argparse.ArgumentParser:
    common = _common()
    parser = _Parser(
        prog=PROG,
        description="Operate ultimat3 jobs: inspect and change the queue, migrate the schema, "
        "run a worker. Every command takes --json.",
        parents=[common],
    )
    root = parser.add_subparsers(dest="command", metavar="<command>", required=True)
    _jobs.register(root, common)
    _db.register(root, common)
    _worker.register(root, common)
    _relay.register(root, common)
    _scheduler.register(root, common)
    _tasks.register(root, common)
    _dashboard.register(root, common)
    from ultimat3.jobs.cli import _exercise, _verify  # issue 24: x verify / x exercise

    _verify.register(root, common)
    _exercise.register(root, common)
    for entry in sorted(entry_points(group=PLUGIN_GROUP), key=lambda e: e.name):
        register = entry.load()
        register(root, common)
    return parser


async def main_async(
    argv: Sequence[str] | None = None,
    *,
    driver: JobDriver | None = None,
    env: Mapping[str, str] | None = None,
    stdout: TextIO | None = None,
    stderr: TextIO | None = None,
) -> int:
    """:func:`main` inside a running event loop."""
    args_in = list(sys.argv[1:] if argv is None else argv)
    out = sys.stdout if stdout is None else stdout
    err = sys.stderr if stderr is None else stderr
    environ = dict(os.environ) if env is None else dict(env)
    wants_json = "--json" in args_in
    try:
        args = build_parser().parse_args(args_in)
    except UsageError as exc:
        if wants_json:
            emit_error(usage_error(exc.parser.prog, exc.message), as_json=True, err=err)
        else:
            exc.parser.print_usage(err)
            err.write(f"{exc.parser.prog}: error: {exc.message}\n")
        return EXIT_USAGE
    except SystemExit as exc:  # --help
        return exc.code if isinstance(exc.code, int) else EXIT_USAGE
    as_json = bool(getattr(args, "json", False))
    handler: Handler = args.handler
    try:
        source = DriverSource(
            given=driver,
            choice=choose_driver(
                kind=getattr(args, "driver", None),
                database_url=getattr(args, "database_url", None),
                redis_url=getattr(args, "redis_url", None),
                schema=getattr(args, "schema", None),
                env=environ,
                pool_size=worker_pool_size(getattr(args, "max_in_flight", None)),
            ),
        )
        invocation = Invocation(args, environ, as_json, out, err, source)
        try:
            answer = await handler(invocation)
        finally:
            await source.close()
    except XError as exc:
        emit_error(_cli_fix(exc, args, environ), as_json=as_json, err=err)
        return EXIT_ERROR
    emit(answer, as_json=as_json, out=out)
    return answer.exit_code or EXIT_OK  # x verify / x exercise answer their findings with 1


def _cli_fix(exc: XError, args: argparse.Namespace, env: Mapping[str, str]) -> XError:
    """A schema nobody migrated: from the command line the fix is ``x db migrate``, not the
    library's ``await migrate(...)``."""
    meta = exc.meta
    if exc.code != "X_CONFIG_INVALID" or "operation" not in meta or "schema" not in meta:
        return exc
    url = getattr(args, "database_url", None) or env.get("DATABASE_URL")
    command = "x db migrate"
    if url:
        command += f" --database-url '{redact(url)}'"
    schema = meta.get("schema")
    if schema not in (None, "public"):
        command += f" --schema {schema}"
    return XError(exc.code, exc.message, fix=command, meta=dict(meta), status=exc.status)


def worker_pool_size(max_in_flight: object) -> int | None:
    """The pool ``x worker`` opens: the driver's default whatever ``--max-in-flight`` says (a
    run borrows a connection per statement and holds none), so ``None``."""
    del max_in_flight
    return None


def main(
    argv: Sequence[str] | None = None,
    *,
    driver: JobDriver | None = None,
    env: Mapping[str, str] | None = None,
) -> int:
    """The ``x`` command. ``argv`` defaults to ``sys.argv[1:]``; ``driver`` (tests, embedding)
    is used instead of resolving one from ``--database-url`` / ``DATABASE_URL``; ``env``
    (default: ``os.environ``, read once here) is where ``DATABASE_URL`` and ``REDIS_URL`` come
    from. Answers the exit code: 0 done, 1 refused (``X_`` code on stderr), 2 bad usage, 130
    interrupted (Ctrl-C outside ``x worker``, which drains on it instead)."""
    try:
        return asyncio.run(main_async(argv, driver=driver, env=env))
    except KeyboardInterrupt:
        sys.stderr.write("x: interrupted\n")
        return EXIT_INTERRUPTED
