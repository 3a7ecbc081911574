"""docs/partitions.md cannot drift: every Python block runs as written."""

from __future__ import annotations

import re
from pathlib import Path

PAGE = Path(__file__).resolve().parents[4] / "docs" / "partitions.md"


def test_every_python_example_in_partitions_md_runs() -> None:
    blocks = re.findall(r"```python\n(.*?)```", PAGE.read_text(encoding="utf-8"), re.S)
    assert len(blocks) == 1
    for i, block in enumerate(blocks):
        exec(compile(block, f"partitions.md[{i}]", "exec"), {"__name__": f"partitions_md_{i}"})
