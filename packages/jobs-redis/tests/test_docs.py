"""docs/redis.md cannot drift from the driver: every Python example runs against the real Redis,
and the page names every refusal code the driver raises of its own."""

from __future__ import annotations

import asyncio
import os
import re
from pathlib import Path

from redis.asyncio import Redis

from ultimat3.core import swap_adapter
from ultimat3.jobs.adapter import JOB_DRIVER, memory_job_driver

REDIS_MD = Path(__file__).resolve().parents[3] / "docs" / "redis.md"
SOURCES = Path(__file__).resolve().parents[1] / "src" / "ultimat3" / "jobs_redis"


def test_every_python_example_in_redis_md_runs() -> None:
    blocks = re.findall(r"```python\n(.*?)```", REDIS_MD.read_text(encoding="utf-8"), re.DOTALL)
    assert blocks
    try:
        with swap_adapter(JOB_DRIVER, memory_job_driver()):
            for i, block in enumerate(blocks):
                exec(compile(block, f"redis.md[{i}]", "exec"), {"__name__": f"redis_md_{i}"})
    finally:
        asyncio.run(_drop_prefix("docs-demo"))


async def _drop_prefix(prefix: str) -> None:
    client = Redis.from_url(os.environ.get("REDIS_URL", "redis://127.0.0.1:6379/0"))
    try:
        async for key in client.scan_iter(match="{" + prefix + "}:*"):
            await client.delete(key)
    finally:
        await client.aclose()


def test_the_page_names_every_code_the_driver_raises() -> None:
    raised = set()
    for path in SOURCES.glob("*.py"):
        raised |= set(re.findall(r'"(X_[A-Z_]+)"', path.read_text(encoding="utf-8")))
    page = REDIS_MD.read_text(encoding="utf-8")
    missing = sorted(code for code in raised if code not in page)
    assert not missing, f"docs/redis.md does not mention {missing}"
