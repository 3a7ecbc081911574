"""docs/storage.md runs as written: every python block, in order, in one namespace."""

from __future__ import annotations

import re
from pathlib import Path

STORAGE_MD = Path(__file__).resolve().parents[3] / "docs" / "storage.md"


def test_every_python_example_in_storage_md_runs() -> None:
    text = STORAGE_MD.read_text(encoding="utf-8")
    blocks = re.findall(r"```python\n(.*?)```", text, re.DOTALL)
    assert len(blocks) >= 4
    namespace: dict[str, object] = {"__name__": "storage_md"}
    for i, block in enumerate(blocks):
        exec(compile(block, f"storage.md[{i}]", "exec", dont_inherit=True), namespace)


def test_storage_md_records_its_choices() -> None:
    text = STORAGE_MD.read_text(encoding="utf-8")
    assert "## Choices where the spec is silent" in text
    assert "## Why obstore" in text
