"""docs/ledger.md runs as written: every python block, in order, in one namespace — in a process
of its own, so the lazy ``from ultimat3.jobs import ledger`` starts from a fresh module."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

LEDGER_MD = Path(__file__).resolve().parents[4] / "docs" / "ledger.md"


def test_every_python_example_in_ledger_md_runs() -> None:
    text = LEDGER_MD.read_text(encoding="utf-8")
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
    printed = out.stdout
    assert "done {'key': 'pi_3Nq8', 'lines': 2, 'written': 2}" in printed
    assert "\n0\n" in printed
    assert "X_LEDGER_UNBALANCED posting 'fx-2026-12-01' does not balance: -0.07 USD" in printed
    assert "dead X_LEDGER_POSTING_CONFLICT" in printed
    assert "LedgerLine(posting_key='pi_3Nq8', line=0, account='cash'" in printed


def test_ledger_md_names_its_choices() -> None:
    assert "## Choices where the spec is silent" in LEDGER_MD.read_text(encoding="utf-8")
