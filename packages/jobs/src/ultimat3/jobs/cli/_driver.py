"""Which driver a command talks to, resolved once, at the edge.

Order: a driver object handed to ``main(argv, driver=...)`` (tests, embedding); else
``--driver redis`` with ``--redis-url`` or ``REDIS_URL`` (``ultimat3-jobs-redis``); else the
Postgres driver on ``--database-url`` or ``DATABASE_URL``. The environment is the mapping ``main``
read once; nothing here reads ``os.environ``. The Postgres and Redis drivers are imported only
when a command needs one, so ``x --help`` and ``x jobs drain`` work on any install.
"""

from __future__ import annotations

import importlib
import inspect
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, Final, Literal
from urllib.parse import urlsplit, urlunsplit

from ultimat3.core import XError
from ultimat3.jobs.adapter import JobDriver, driver_members_missing

DriverKind = Literal["postgres", "redis"]
DRIVER_KINDS: Final[tuple[DriverKind, ...]] = ("postgres", "redis")
POSTGRES_MODULE: Final = "ultimat3.jobs.postgres"
REDIS_MODULE: Final = "ultimat3.jobs_redis"


@dataclass(frozen=True, slots=True)
class DriverChoice:
    """What the flags and the environment ask for."""

    kind: DriverKind
    url: str | None
    schema: str | None = None
    pool_size: int | None = None
    """The Postgres pool's ``max_size`` when the command needs more than the default (``x worker
    --max-in-flight N`` asks for N + the worker's own connections)."""


def choose_driver(
    *,
    kind: str | None,
    database_url: str | None,
    redis_url: str | None,
    schema: str | None,
    env: Mapping[str, str],
    pool_size: int | None = None,
) -> DriverChoice:
    """Flags win over the environment; ``REDIS_URL`` is read only under ``--driver redis``."""
    if kind == "redis":
        return DriverChoice("redis", redis_url or env.get("REDIS_URL") or None)
    url = database_url or env.get("DATABASE_URL") or None
    return DriverChoice("postgres", url, schema, pool_size)


def redact(url: str) -> str:
    """``url`` without its password, for progress lines and messages."""
    try:
        parts = urlsplit(url)
        if parts.password is None:
            return url
        host = parts.hostname or ""
        if parts.port is not None:
            host = f"{host}:{parts.port}"
        user = f"{parts.username}:***@" if parts.username else ":***@"
        return urlunsplit(parts._replace(netloc=user + host))
    except ValueError:
        return "<unparseable url>"


def load_callable(module: str, attr: str, *, what: str, fix: str) -> Callable[..., Any]:
    """``module.attr``, imported now; ``X_CONFIG_INVALID`` naming ``fix`` when it is absent."""
    try:
        mod = importlib.import_module(module)
    except ImportError as exc:
        raise XError(
            "X_CONFIG_INVALID",
            f"{what} is not installed: importing {module} failed ({exc})",
            fix=fix,
            meta={"module": module},
        ) from exc
    found = getattr(mod, attr, None)
    if not callable(found):
        raise XError(
            "X_CONFIG_INVALID",
            f"{what} is not available in this install: {module} has no {attr}()",
            fix=fix,
            meta={"module": module, "attribute": attr},
        )
    return found  # type: ignore[no-any-return]


async def maybe_await(value: Any) -> Any:
    return await value if inspect.isawaitable(value) else value


async def open_driver(choice: DriverChoice) -> JobDriver:
    """Build the driver ``choice`` names; refuses with ``X_CONFIG_INVALID`` when it cannot."""
    if choice.kind == "redis":
        if not choice.url:
            raise XError(
                "X_CONFIG_INVALID",
                "--driver redis needs a Redis URL: neither --redis-url nor REDIS_URL is set",
                fix="export REDIS_URL=redis://127.0.0.1:6379/0 (or pass --redis-url)",
            )
        factory = load_callable(
            REDIS_MODULE,
            "redis_job_driver",
            what="the Redis job driver (ultimat3-jobs-redis)",
            fix="pip install ultimat3-jobs-redis",
        )
        driver = await maybe_await(factory(choice.url))
    else:
        if not choice.url:
            raise XError(
                "X_CONFIG_INVALID",
                "no database to talk to: neither --database-url nor DATABASE_URL is set",
                fix="export DATABASE_URL=postgresql://user@host/db (or pass --database-url)",
            )
        factory = load_callable(
            POSTGRES_MODULE,
            "postgres_job_driver",
            what="the Postgres job driver (ultimat3.jobs.postgres)",
            fix="pip install -U ultimat3-jobs",
        )
        kwargs: dict[str, Any] = {} if choice.schema is None else {"schema": choice.schema}
        if choice.pool_size is not None:
            kwargs["max_size"] = choice.pool_size
        driver = await maybe_await(factory(choice.url, **kwargs))
    check_driver(driver)
    return driver  # type: ignore[no-any-return]


def check_driver(driver: object) -> None:
    missing = driver_members_missing(driver)
    if missing:
        raise XError(
            "X_CONFIG_INVALID",
            f"{driver!r} is not a job driver: it lacks {', '.join(missing)}",
            fix="pass a driver such as memory_job_driver() or postgres_job_driver(dsn)",
            meta={"missing": missing},
        )


class DriverSource:
    """The command's driver, opened on first use and closed at the end only if opened here: a
    driver handed in by the caller stays the caller's."""

    def __init__(self, *, given: JobDriver | None, choice: DriverChoice) -> None:
        if given is not None:
            check_driver(given)
        self._given = given
        self.choice = choice
        self._opened: JobDriver | None = None

    async def get(self) -> JobDriver:
        if self._given is not None:
            return self._given
        if self._opened is None:
            self._opened = await open_driver(self.choice)
        return self._opened

    async def close(self) -> None:
        opened, self._opened = self._opened, None
        if opened is not None:
            await opened.close()
