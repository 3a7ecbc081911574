"""docs/tasks.md runs as written: every python block, in order, in one namespace."""

from __future__ import annotations

import re
from pathlib import Path

TASKS_MD = Path(__file__).resolve().parents[4] / "docs" / "tasks.md"


def test_every_python_example_in_tasks_md_runs() -> None:
    blocks = re.findall(r"```python\n(.*?)```", TASKS_MD.read_text(encoding="utf-8"), re.DOTALL)
    assert len(blocks) >= 3
    namespace: dict[str, object] = {"__name__": "tasks_md"}
    for i, block in enumerate(blocks):
        exec(compile(block, f"tasks.md[{i}]", "exec", dont_inherit=True), namespace)


def test_tasks_md_names_its_choices_and_every_event_the_scheduler_logs() -> None:
    text = TASKS_MD.read_text(encoding="utf-8")
    assert "## Choices where the spec is silent" in text
    source = (
        Path(__file__).resolve().parents[2]
        / "src"
        / "ultimat3"
        / "jobs"
        / "_process"
        / "scheduler.py"
    ).read_text(encoding="utf-8")
    events = set(re.findall(r'"(jobs\.(?:scheduler|task)\.[a-z-]+)"', source))
    assert events
    for event in events:
        short = event.rsplit(".", 1)[1]
        assert event in text or f"/ `{short}`" in text, event
