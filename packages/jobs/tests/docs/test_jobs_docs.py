"""docs/jobs.md runs as written: every python block, in order, in one namespace."""

from __future__ import annotations

import re
from pathlib import Path

JOBS_MD = Path(__file__).resolve().parents[4] / "docs" / "jobs.md"


def test_every_python_example_in_jobs_md_runs() -> None:
    blocks = re.findall(r"```python\n(.*?)```", JOBS_MD.read_text(encoding="utf-8"), re.DOTALL)
    assert len(blocks) >= 6
    namespace: dict[str, object] = {"__name__": "jobs_md"}
    for i, block in enumerate(blocks):
        exec(compile(block, f"jobs.md[{i}]", "exec", dont_inherit=True), namespace)


def test_jobs_md_names_the_choices_and_the_restart_caveat() -> None:
    text = JOBS_MD.read_text(encoding="utf-8")
    assert "nothing survives a restart" in text
    assert "## Choices where the spec is silent" in text
