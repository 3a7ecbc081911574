"""docs/imports.md runs as written: every python block, in order, in one namespace — in a child
process, because its ``from ultimat3.jobs import import_rows`` (the lazy factory path) binds the
factories on ``ultimat3.jobs``, which the exported-members test of this process must not see."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

IMPORTS_MD = Path(__file__).resolve().parents[4] / "docs" / "imports.md"

RUNNER = """
import re, sys
text = open(sys.argv[1], encoding="utf-8").read()
namespace = {"__name__": "imports_md"}
for i, block in enumerate(re.findall(r"```python\\n(.*?)```", text, re.DOTALL)):
    exec(compile(block, f"imports.md[{i}]", "exec", dont_inherit=True), namespace)
import ultimat3.jobs
assert ultimat3.jobs.import_rows is namespace["import_rows"]
print("ran", i + 1)
"""


def test_every_python_example_in_imports_md_runs() -> None:
    blocks = re.findall(r"```python\n(.*?)```", IMPORTS_MD.read_text(encoding="utf-8"), re.DOTALL)
    assert len(blocks) >= 3
    proc = subprocess.run(
        [sys.executable, "-c", RUNNER, str(IMPORTS_MD)],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 0, proc.stderr[-4000:]
    assert proc.stdout.strip() == f"ran {len(blocks)}"


def test_imports_md_records_its_choices() -> None:
    assert "## Choices where the spec is silent" in IMPORTS_MD.read_text(encoding="utf-8")
