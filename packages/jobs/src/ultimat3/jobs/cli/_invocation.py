"""One run of the ``x`` command: the parsed arguments, the environment ``main`` read, where the
output goes, and the driver (opened only when a command asks for it)."""

from __future__ import annotations

import argparse
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from typing import Any, TextIO, TypeAlias

from ultimat3.core import XError
from ultimat3.jobs.adapter import JobDriver, JobIntrospection, driver_introspect
from ultimat3.jobs.cli._driver import DriverSource
from ultimat3.jobs.cli._output import Answer


@dataclass(slots=True)
class Invocation:
    args: argparse.Namespace
    env: Mapping[str, str]
    as_json: bool
    stdout: TextIO
    stderr: TextIO
    source: DriverSource

    async def driver(self) -> JobDriver:
        return await self.source.get()

    async def introspect(self) -> JobIntrospection:
        """The driver's operator surface; ``X_NOT_IMPLEMENTED`` for a driver without one."""
        driver = await self.driver()
        intro = driver_introspect(driver)
        if intro is None:
            raise XError(
                "X_NOT_IMPLEMENTED",
                f"the {driver.name} driver has no introspect: it cannot show, retry, cancel, "
                "promote or pause jobs",
                fix="point x at the Postgres database the app uses (--database-url or "
                "DATABASE_URL); the Postgres driver carries the whole operator surface",
                meta={"driver": driver.name},
            )
        return intro

    def progress(self, line: str) -> None:
        """One line of progress on stderr (stdout stays the answer, --json or not)."""
        self.stderr.write(line.rstrip("\n") + "\n")
        self.stderr.flush()


Handler = Callable[[Invocation], Awaitable[Answer]]
Commands: TypeAlias = "argparse._SubParsersAction[Any]"
"""A group of subcommands (``x jobs``'s, ``x db``'s)."""


def add_command(
    group: Commands,
    name: str,
    *,
    summary: str,
    handler: Handler,
    common: argparse.ArgumentParser,
) -> argparse.ArgumentParser:
    """One leaf command: it takes the common flags (``--json``, the driver's) and runs
    ``handler``."""
    parser: argparse.ArgumentParser = group.add_parser(
        name, help=summary, description=summary, parents=[common]
    )
    parser.set_defaults(handler=handler)
    return parser
