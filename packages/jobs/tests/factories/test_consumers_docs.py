"""docs/consumers.md runs as written: every python block, in order, in one namespace — in a
process of its own, so the lazy ``from ultimat3.jobs import consumer`` starts from a fresh
module."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

CONSUMERS_MD = Path(__file__).resolve().parents[4] / "docs" / "consumers.md"
FACTORIES = Path(__file__).resolve().parents[2] / "src/ultimat3/jobs/factories"


def test_every_python_example_in_consumers_md_runs() -> None:
    text = CONSUMERS_MD.read_text(encoding="utf-8")
    blocks = re.findall(r"```python\n(.*?)```", text, re.DOTALL)
    assert len(blocks) >= 3
    out = subprocess.run(
        [sys.executable, "-c", "\n".join(blocks)],
        capture_output=True,
        text=True,
        timeout=90,
        check=False,
    )
    assert out.returncode == 0, out.stderr
    lines = out.stdout.splitlines()
    assert lines == [
        "{'keys': 1, 'started': ['acct_1']}",
        "done 3 {'acct_1': '250'}",
        "250 250",
        "X_CONSUMER_INVALID 3",
        "orders 120 cursor 120",
    ]


def test_consumers_md_shows_the_cursor_ddl_names_its_choices_and_every_log_event() -> None:
    text = CONSUMERS_MD.read_text(encoding="utf-8")
    assert "## Choices where the spec is silent" in text
    assert "CREATE TABLE consumer_cursors" in text
    source = "".join(p.read_text(encoding="utf-8") for p in FACTORIES.glob("consumer*.py"))
    events = set(re.findall(r'"(jobs\.consumer\.[a-z-]+)"', source))
    assert events
    for event in events:
        assert f"`{event}`" in text, event
