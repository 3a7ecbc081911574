"""docs/dashboard.md runs as written, shows a screenshot of every page, and names its choices;
and the dashboard's public surface is its ``__all__``."""

from __future__ import annotations

import re
import subprocess
import sys
import types
from pathlib import Path

import ultimat3.jobs.dashboard

ROOT = Path(__file__).resolve().parents[4]
PAGE = ROOT / "docs" / "dashboard.md"


def test_every_python_example_in_dashboard_md_runs() -> None:
    blocks = re.findall(r"```python\n(.*?)```", PAGE.read_text(encoding="utf-8"), re.DOTALL)
    assert blocks
    namespace: dict[str, object] = {"__name__": "dashboard_md"}
    for i, block in enumerate(blocks):
        exec(compile(block, f"dashboard.md[{i}]", "exec", dont_inherit=True), namespace)


def test_dashboard_md_shows_every_page_and_names_its_choices() -> None:
    text = PAGE.read_text(encoding="utf-8")
    assert "## Choices where the spec is silent" in text
    images = re.findall(r"!\[[^\]]*\]\((images/[^)]+)\)", text)
    assert {Path(i).stem for i in images} >= {
        "dashboard-overview",
        "dashboard-jobs",
        "dashboard-job",
        "dashboard-dead-letter",
        "dashboard-tasks",
    }
    for image in images:
        assert (ROOT / "docs" / image).read_bytes()[:4] == b"\x89PNG", image
    assert "jobs.dashboard.action" in text


def test_all_is_exactly_the_public_names_of_the_dashboard() -> None:
    public = {
        n
        for n, v in vars(ultimat3.jobs.dashboard).items()
        if not n.startswith("_") and not isinstance(v, types.ModuleType) and n != "annotations"
    }
    assert set(ultimat3.jobs.dashboard.__all__) == public


def test_the_cli_loads_neither_the_dashboard_nor_uvicorn_until_asked() -> None:
    code = (
        "import sys, ultimat3.jobs.cli; "
        "bad = ('uvicorn', 'ultimat3.jobs.dashboard'); "
        "print(','.join(m for m in sys.modules if m.startswith(bad)))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == ""
