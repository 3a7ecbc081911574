"""docs/http.md runs as written: every python block, in order, in one namespace."""

from __future__ import annotations

import re
from pathlib import Path

HTTP_MD = Path(__file__).resolve().parents[3] / "docs" / "http.md"


def test_every_python_example_in_http_md_runs() -> None:
    blocks = re.findall(r"```python\n(.*?)```", HTTP_MD.read_text(encoding="utf-8"), re.DOTALL)
    assert len(blocks) >= 3
    namespace: dict[str, object] = {"__name__": "http_md"}
    for i, block in enumerate(blocks):
        exec(compile(block, f"http.md[{i}]", "exec", dont_inherit=True), namespace)


def test_http_md_records_its_choices() -> None:
    assert "## Choices where the spec is silent" in HTTP_MD.read_text(encoding="utf-8")
