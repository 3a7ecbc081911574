"""docs/reliability.md runs as written: every python block, in order, in one namespace."""

from __future__ import annotations

import re
from pathlib import Path

RELIABILITY_MD = Path(__file__).resolve().parents[2] / "docs" / "reliability.md"


def test_every_python_example_in_reliability_md_runs() -> None:
    text = RELIABILITY_MD.read_text(encoding="utf-8")
    blocks = re.findall(r"```python\n(.*?)```", text, re.DOTALL)
    assert blocks
    namespace: dict[str, object] = {"__name__": "reliability_md"}
    for i, block in enumerate(blocks):
        exec(compile(block, f"reliability.md[{i}]", "exec", dont_inherit=True), namespace)


def test_reliability_md_names_every_refusal_code_it_promises() -> None:
    text = RELIABILITY_MD.read_text(encoding="utf-8")
    for code in ("X_BODY_INVALID", "X_ID_INVALID", "X_JOB_DECLARATION_INVALID", "X_INVARIANT"):
        assert code in text
