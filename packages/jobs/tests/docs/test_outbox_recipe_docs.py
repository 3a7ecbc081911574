"""docs/web-apps.md's outbox recipe runs as written: the endpoint stages its job in the request's
transaction on the app's Postgres, the relay moves the committed one into the harness (the
``job_harness`` fixture, from ultimat3-jobs' own pytest11 plugin), and the harness runs it."""

from __future__ import annotations

import re
import types
from pathlib import Path
from typing import Any
from urllib.parse import quote

import pytest

WEB_APPS_MD = Path(__file__).resolve().parents[4] / "docs" / "web-apps.md"
MARK = "# tests/test_signup.py"


def _recipe() -> str:
    blocks = re.findall(r"```python\n(.*?)```", WEB_APPS_MD.read_text(encoding="utf-8"), re.DOTALL)
    [found] = [b for b in blocks if b.startswith(MARK)]
    return str(found)


async def test_the_outbox_recipe_runs_with_the_fixture(
    job_harness: Any, database_url: str, pg_schema: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    sep = "&" if "?" in database_url else "?"
    monkeypatch.setenv(
        "DATABASE_URL", f"{database_url}{sep}options={quote(f'-csearch_path={pg_schema}')}"
    )
    monkeypatch.setenv("APP_SCHEMA", pg_schema)
    module = types.ModuleType("signup_recipe")
    exec(compile(_recipe(), "web-apps.md:signup", "exec", dont_inherit=True), module.__dict__)
    await module.test_signup_sends_the_welcome_mail(job_harness)


def test_the_fixture_comes_from_the_installed_plugin(request: pytest.FixtureRequest) -> None:
    from importlib.metadata import entry_points

    [plugin] = [e for e in entry_points(group="pytest11") if e.name == "ultimat3_jobs"]
    assert plugin.value == "ultimat3.jobs.testing.pytest_plugin"
    assert request.config.pluginmanager.has_plugin("ultimat3_jobs")


async def test_the_fixture_binds_its_harness_for_the_test(job_harness: Any) -> None:
    from pydantic import BaseModel

    from ultimat3.core import adapter, current_clock
    from ultimat3.jobs import job
    from ultimat3.jobs.adapter import JOB_DRIVER

    class N(BaseModel):
        n: int

    async def double(input: N, step: Any, ctx: Any) -> int:
        return input.n * 2

    doubled = job(input=N, idempotency_key=lambda i: f"d:{i.n}", name="fixture.double", run=double)
    h = job_harness(jobs=[doubled])
    assert adapter(JOB_DRIVER) is h.driver and current_clock() is h.clock
    queued = await doubled.enqueue({"n": 21})  # the app's own call reaches the harness
    await h.drain()
    trace = await h.trace(queued.id)
    assert trace.state == "done" and trace.result == 42
