"""docs/backfill.md cannot drift: every Python block runs as written."""

from __future__ import annotations

import re
from pathlib import Path

PAGE = Path(__file__).resolve().parents[4] / "docs" / "backfill.md"


def test_every_python_example_in_backfill_md_runs() -> None:
    blocks = re.findall(r"```python\n(.*?)```", PAGE.read_text(encoding="utf-8"), re.S)
    assert blocks
    for i, block in enumerate(blocks):
        exec(compile(block, f"backfill.md[{i}]", "exec"), {"__name__": f"backfill_md_{i}"})
