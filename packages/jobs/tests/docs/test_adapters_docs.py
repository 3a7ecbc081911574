"""docs/adapters.md runs as written: every python block, in order, in one namespace."""

from __future__ import annotations

import re
from pathlib import Path

from ultimat3.core import install_adapter, uninstall_adapter
from ultimat3.jobs.adapter import JOB_DRIVER, installed_job_driver

ADAPTERS_MD = Path(__file__).resolve().parents[4] / "docs" / "adapters.md"


def test_every_python_example_in_adapters_md_runs() -> None:
    text = ADAPTERS_MD.read_text(encoding="utf-8")
    blocks = re.findall(r"```python\n(.*?)```", text, re.DOTALL)
    assert len(blocks) >= 5
    namespace: dict[str, object] = {"__name__": "adapters_md"}
    before = installed_job_driver()
    try:
        for i, block in enumerate(blocks):
            exec(compile(block, f"adapters.md[{i}]", "exec", dont_inherit=True), namespace)
    finally:  # the page installs a driver process-wide: put back what was there
        if before is None:
            uninstall_adapter(JOB_DRIVER)
        else:
            install_adapter(JOB_DRIVER, before)
    assert "TestMyDriver" in namespace


def test_adapters_md_states_the_memory_drivers_limit_and_every_refusal_code() -> None:
    text = ADAPTERS_MD.read_text(encoding="utf-8")
    assert "Nothing survives a restart" in text
    for code in (
        "X_JOB_NOT_FOUND",
        "X_JOB_PAGE_INVALID",
        "X_JOB_NOT_REMOVABLE",
        "X_JOB_NOT_REQUEUEABLE",
        "X_JOB_DUPLICATE",
        "X_JOB_NOT_CANCELLABLE",
        "X_JOB_LEASE_LOST",
        "X_JOB_CONCURRENCY_UNENFORCEABLE",
    ):
        assert code in text, code
