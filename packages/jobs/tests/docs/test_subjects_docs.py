"""docs/subjects.md cannot drift: every Python block runs as written."""

from __future__ import annotations

import re
from pathlib import Path

PAGE = Path(__file__).resolve().parents[4] / "docs" / "subjects.md"


def test_every_python_example_in_subjects_md_runs() -> None:
    blocks = re.findall(r"```python\n(.*?)```", PAGE.read_text(encoding="utf-8"), re.S)
    assert len(blocks) == 2
    for i, block in enumerate(blocks):
        exec(compile(block, f"subjects.md[{i}]", "exec"), {"__name__": f"subjects_md_{i}"})
