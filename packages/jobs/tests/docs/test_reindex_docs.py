"""docs/reindex.md cannot drift: every Python block runs as written."""

from __future__ import annotations

import re
from pathlib import Path

PAGE = Path(__file__).resolve().parents[4] / "docs" / "reindex.md"


def test_every_python_example_in_reindex_md_runs() -> None:
    blocks = re.findall(r"```python\n(.*?)```", PAGE.read_text(encoding="utf-8"), re.S)
    assert len(blocks) == 1
    for i, block in enumerate(blocks):
        exec(compile(block, f"reindex.md[{i}]", "exec"), {"__name__": f"reindex_md_{i}"})
