"""docs/rollups.md cannot drift: every Python block runs as written, in order, in one namespace."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

PAGE = Path(__file__).resolve().parents[4] / "docs" / "rollups.md"


def test_every_python_example_in_rollups_md_runs() -> None:
    blocks = re.findall(r"```python\n(.*?)```", PAGE.read_text(encoding="utf-8"), re.S)
    assert len(blocks) == 2
    namespace: dict[str, Any] = {"__name__": "rollups_md"}
    for i, block in enumerate(blocks):
        exec(compile(block, f"rollups.md[{i}]", "exec"), namespace)
