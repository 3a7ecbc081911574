"""Which driver x talks to: a given driver, else --database-url / DATABASE_URL (Postgres), else
--driver redis with --redis-url / REDIS_URL; the environment is read once, in main."""

from __future__ import annotations

import json
import sys
import types
from typing import Any

import pytest

from ultimat3.jobs.adapter import MemoryJobDriver, memory_job_driver
from ultimat3.jobs.cli import main, main_async

Capture = pytest.CaptureFixture[str]


class ClosingDriver(MemoryJobDriver):
    def __init__(self, url: str, schema: str | None) -> None:
        super().__init__(name="fake-postgres")
        self.url = url
        self.schema = schema
        self.closed = False

    async def close(self) -> None:
        self.closed = True


@pytest.fixture
def opened(monkeypatch: pytest.MonkeyPatch) -> list[ClosingDriver]:
    """A stand-in ``ultimat3.jobs.postgres`` whose ``postgres_job_driver`` records each driver."""
    made: list[ClosingDriver] = []

    def postgres_job_driver(dsn: str, *, schema: str | None = None) -> ClosingDriver:
        made.append(ClosingDriver(dsn, schema))
        return made[-1]

    fake = types.ModuleType("ultimat3.jobs.postgres")
    fake.postgres_job_driver = postgres_job_driver  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, "ultimat3.jobs.postgres", fake)
    return made


def error_of(capsys: Capture) -> dict[str, Any]:
    error: dict[str, Any] = json.loads(capsys.readouterr().err)["error"]
    return error


def test_database_url_from_the_env_opens_the_postgres_driver_and_closes_it(
    capsys: Capture, opened: list[ClosingDriver]
) -> None:
    code = main(["jobs", "stats", "--json"], env={"DATABASE_URL": "postgresql://db/app"})
    assert code == 0
    [driver] = opened
    assert driver.url == "postgresql://db/app" and driver.schema is None
    assert driver.closed
    assert json.loads(capsys.readouterr().out) == {"queues": []}


def test_the_flag_wins_over_the_env_and_schema_is_passed_on(
    capsys: Capture, opened: list[ClosingDriver]
) -> None:
    argv = ["jobs", "paused", "--json", "--database-url", "postgresql://flag/db"]
    code = main([*argv, "--schema", "jobs"], env={"DATABASE_URL": "postgresql://env/db"})
    assert code == 0
    assert (opened[0].url, opened[0].schema) == ("postgresql://flag/db", "jobs")


def test_common_flags_may_come_before_the_command(
    capsys: Capture, opened: list[ClosingDriver]
) -> None:
    code = main(["--json", "--database-url", "postgresql://x/y", "jobs", "paused"], env={})
    assert code == 0
    assert json.loads(capsys.readouterr().out) == {"queues": [], "tasks": []}
    assert opened[0].url == "postgresql://x/y"


def test_the_driver_is_closed_after_a_refusal(capsys: Capture, opened: list[ClosingDriver]) -> None:
    code = main(
        ["jobs", "show", "0190b5a2-0000-7000-8000-00000000dead", "--json"],
        env={"DATABASE_URL": "postgresql://db/app"},
    )
    assert code == 1
    assert error_of(capsys)["code"] == "X_JOB_NOT_FOUND"
    assert opened[0].closed


def test_main_reads_os_environ_when_no_env_is_given(
    capsys: Capture, opened: list[ClosingDriver], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("DATABASE_URL", "postgresql://from/os")
    assert main(["jobs", "paused", "--json"]) == 0
    assert opened[0].url == "postgresql://from/os"


def test_no_database_url_is_config_invalid(capsys: Capture) -> None:
    assert main(["jobs", "list", "--json"], env={}) == 1
    error = error_of(capsys)
    assert error["code"] == "X_CONFIG_INVALID"
    assert "DATABASE_URL" in error["message"] and "DATABASE_URL" in error["fix"]


def test_redis_url_alone_does_not_pick_redis(capsys: Capture) -> None:
    assert main(["jobs", "list", "--json"], env={"REDIS_URL": "redis://r/0"}) == 1
    assert "DATABASE_URL" in error_of(capsys)["message"]


def test_driver_redis_without_the_distribution_names_the_install(
    capsys: Capture, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setitem(sys.modules, "ultimat3.jobs_redis", None)  # as if not installed
    code = main(["jobs", "list", "--json", "--driver", "redis"], env={"REDIS_URL": "redis://r/0"})
    assert code == 1
    error = error_of(capsys)
    assert error["code"] == "X_CONFIG_INVALID"
    assert error["fix"] == "pip install ultimat3-jobs-redis"


def test_driver_redis_needs_a_redis_url(capsys: Capture) -> None:
    code = main(["jobs", "list", "--json", "--driver", "redis"], env={"DATABASE_URL": "pg://x"})
    assert code == 1
    error = error_of(capsys)
    assert error["code"] == "X_CONFIG_INVALID" and "REDIS_URL" in error["message"]


def test_driver_redis_opens_redis_job_driver_on_the_url(
    capsys: Capture, monkeypatch: pytest.MonkeyPatch
) -> None:
    seen: list[str] = []

    def redis_job_driver(url: str) -> MemoryJobDriver:
        seen.append(url)
        return memory_job_driver(name="redis")

    fake = types.ModuleType("ultimat3.jobs_redis")
    fake.redis_job_driver = redis_job_driver  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, "ultimat3.jobs_redis", fake)
    argv = ["jobs", "stats", "--json", "--driver", "redis", "--redis-url", "redis://flag/1"]
    assert main(argv, env={"REDIS_URL": "redis://env/0"}) == 0
    assert seen == ["redis://flag/1"]


def test_a_given_driver_wins_and_stays_open(capsys: Capture) -> None:
    driver = ClosingDriver("given", None)
    assert main(["jobs", "paused", "--json"], driver=driver, env={"DATABASE_URL": "pg://x"}) == 0
    assert not driver.closed


def test_a_given_object_that_is_not_a_driver_is_config_invalid(capsys: Capture) -> None:
    assert main(["jobs", "paused", "--json"], driver=object()) == 1  # type: ignore[arg-type]
    error = error_of(capsys)
    assert error["code"] == "X_CONFIG_INVALID" and "enqueue" in error["message"]


def test_a_postgres_module_without_the_factory_is_config_invalid(
    capsys: Capture, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setitem(sys.modules, "ultimat3.jobs.postgres", types.ModuleType("empty"))
    assert main(["jobs", "list", "--json"], env={"DATABASE_URL": "postgresql://db/app"}) == 1
    error = error_of(capsys)
    assert error["code"] == "X_CONFIG_INVALID" and "postgres_job_driver" in error["message"]


async def test_main_async_runs_inside_a_running_loop(capsys: Capture) -> None:
    driver = memory_job_driver()
    assert await main_async(["jobs", "paused", "--json"], driver=driver) == 0
    assert json.loads(capsys.readouterr().out) == {"queues": [], "tasks": []}


def test_help_exits_zero_and_a_missing_command_exits_two(capsys: Capture) -> None:
    assert main(["--help"]) == 0
    assert "jobs" in capsys.readouterr().out
    assert main([]) == 2
    assert "usage: x" in capsys.readouterr().err
    assert main(["jobs", "frobnicate"]) == 2
    assert "invalid choice" in capsys.readouterr().err


def test_the_public_names_are_exactly_all() -> None:
    import ultimat3.jobs.cli as cli

    # "@py_builtins" / "@pytest_ar": pytest rewrites the asserts of a dist with a pytest11 plugin
    public = {name for name in vars(cli) if not name.startswith(("_", "@"))}
    assert (
        set(cli.__all__)
        == public
        == {
            "main",
            "main_async",
            # the plugin surface of the ``ultimat3.cli`` entry point group
            "PLUGIN_GROUP",
            "Answer",
            "Commands",
            "Handler",
            "Invocation",
            "add_command",
            "redact",
        }
    )
