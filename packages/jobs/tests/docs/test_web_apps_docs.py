"""docs/web-apps.md runs as written: its FastAPI and Starlette apps are loaded from the page,
their lifespans entered, and requests sent through httpx's ASGI transport, on a schema of the
test's own; the ghost-job warning is proven both ways."""

from __future__ import annotations

import asyncio
import re
import types
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any
from urllib.parse import quote

import httpx
import psycopg
import pytest
from psycopg_pool import AsyncConnectionPool

from ultimat3.core import swap_adapter
from ultimat3.jobs.adapter import JOB_DRIVER
from ultimat3.jobs.postgres import postgres_job_driver, transaction

WEB_APPS_MD = Path(__file__).resolve().parents[4] / "docs" / "web-apps.md"


def _apps() -> list[str]:
    blocks = re.findall(r"```python\n(.*?)```", WEB_APPS_MD.read_text(encoding="utf-8"), re.DOTALL)
    return [b for b in blocks if b.startswith("import os")]


def _load(source: str, name: str) -> types.ModuleType:
    module = types.ModuleType(name)
    exec(compile(source, f"web-apps.md:{name}", "exec", dont_inherit=True), module.__dict__)
    return module


@pytest.fixture
def app_env(database_url: str, pg_schema: str, monkeypatch: pytest.MonkeyPatch) -> str:
    """DATABASE_URL whose search_path is the test's schema (the app's tables land there too)."""
    sep = "&" if "?" in database_url else "?"
    url = f"{database_url}{sep}options={quote(f'-csearch_path={pg_schema}')}"
    monkeypatch.setenv("DATABASE_URL", url)
    monkeypatch.setenv("JOBS_SCHEMA", pg_schema)
    return url


async def _state(url: str, schema: str, job_id: str, want: str) -> str:
    driver = postgres_job_driver(url, schema=schema)
    try:
        for _ in range(1000):
            row = await driver.introspect.show(job_id)
            if row.state == want:
                return str(row.state)
            await asyncio.sleep(0.01)
        return str(row.state)
    finally:
        await driver.close()


@pytest.fixture
async def client_of() -> AsyncIterator[Any]:
    opened: list[Any] = []

    async def make(app: Any) -> httpx.AsyncClient:
        lifespan = app.router.lifespan_context(app)
        await lifespan.__aenter__()
        opened.append(lifespan)
        client = httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://app")
        opened.append(client)
        return client

    yield make
    for thing in reversed(opened):
        await thing.__aexit__(None, None, None)


def test_the_page_holds_a_fastapi_and_a_starlette_app() -> None:
    apps = _apps()
    assert len(apps) == 2
    assert "from fastapi import FastAPI" in apps[0]
    assert "from starlette.applications import Starlette" in apps[1]
    text = WEB_APPS_MD.read_text(encoding="utf-8")
    assert "ghost job" in text and "transaction(pool)" in text and "x worker" in text


async def test_the_fastapi_example_enqueues_in_the_request_transaction_and_runs_it(
    app_env: str, pg_schema: str, client_of: Any
) -> None:
    module = _load(_apps()[0], "fastapi_example")
    client = await client_of(module.app)
    answer = await client.post("/signups", json={"email": "ada@example.com"})
    assert answer.status_code == 200, answer.text
    job_id = answer.json()["job_id"]
    result = await client.get(f"/signups/jobs/{job_id}")
    assert result.json() == {"result": "welcomed ada@example.com"}
    assert await _state(app_env, pg_schema, job_id, "done") == "done"
    async with await psycopg.AsyncConnection.connect(app_env) as conn:
        rows = await (await conn.execute("SELECT email FROM signups")).fetchall()
    assert rows == [("ada@example.com",)]


async def test_the_starlette_example_runs_a_job_enqueued_by_a_request(
    app_env: str, client_of: Any
) -> None:
    module = _load(_apps()[1], "starlette_example")
    client = await client_of(module.app)
    answer = await client.post("/reports", json={"month": "2026-11"})
    assert answer.status_code == 202, answer.text
    result = await client.get(f"/reports/{answer.json()['job_id']}")
    assert result.json() == {"month": "2026-11", "status": "built"}


async def test_the_ghost_job_a_plain_transaction_leaves_and_transaction_pool_does_not(
    app_env: str, pg_schema: str
) -> None:
    """The warning box, both halves: ``pool.connection() + conn.transaction()`` enqueues on the
    driver's own connection (the job outlives the rollback); ``transaction(pool)`` does not."""
    module = _load(_apps()[0], "ghost_example")
    async with AsyncConnectionPool(app_env, min_size=1, max_size=2, open=False) as pool:
        driver = postgres_job_driver(pool, schema=pg_schema)
        with swap_adapter(JOB_DRIVER, driver):

            async def ghost() -> str:
                async with pool.connection() as conn, conn.transaction():
                    queued = await module.send_welcome.enqueue({"email": "ghost@example.com"})
                    raise RuntimeError(queued.id)

            with pytest.raises(RuntimeError) as ghosted:
                await ghost()
            row = await driver.introspect.show(str(ghosted.value))
            assert row.state == "ready"  # survived the rollback: a ghost job

            async def bound() -> str:
                async with transaction(pool):
                    queued = await module.send_welcome.enqueue({"email": "kept@example.com"})
                    raise RuntimeError(queued.id)

            with pytest.raises(RuntimeError) as rolled:
                await bound()
            page = await driver.introspect.list(name="send_welcome")
            assert [r.id for r in page] == [row.id]  # the bound one rolled back with it
            assert str(rolled.value) != row.id
