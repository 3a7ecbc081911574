"""Each distribution's README is its PyPI page: its Python example runs as written."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

PACKAGES = Path(__file__).resolve().parents[3]
BLOCK = re.compile(r"```python\n(.*?)```", re.S)


@pytest.mark.parametrize("dist", ["core", "jobs"])
def test_the_readme_example_runs(dist: str) -> None:
    text = (PACKAGES / dist / "README.md").read_text(encoding="utf-8")
    blocks = BLOCK.findall(text)
    assert blocks, f"packages/{dist}/README.md has no Python example"
    assert "pip install ultimat3-" in text
    for i, block in enumerate(blocks):
        exec(compile(block, f"{dist}/README.md[{i}]", "exec"), {"__name__": f"readme_{dist}_{i}"})
