"""docs/cli.md cannot drift from the command: every example command line parses, and the Python
example runs."""

from __future__ import annotations

import re
import shlex
from pathlib import Path

import pytest

from ultimat3.jobs.cli._main import build_parser

CLI_MD = Path(__file__).resolve().parents[4] / "docs" / "cli.md"


def example_lines() -> list[str]:
    blocks = re.findall(r"```console\n(.*?)```", CLI_MD.read_text(encoding="utf-8"), re.DOTALL)
    lines = [line[2:] for block in blocks for line in block.splitlines() if line.startswith("$ x ")]
    # a synopsis ([--flag V] or (a | b)) documents the grammar, it is not a command line
    return [line for line in lines if "[" not in line and "(--" not in line]


def test_the_page_has_examples() -> None:
    assert len(example_lines()) >= 8


@pytest.mark.parametrize("line", example_lines())
def test_every_example_command_line_parses(line: str) -> None:
    command = re.split(r" \| | > ", line)[0]
    argv = shlex.split(command)
    assert argv[0] == "x"
    build_parser().parse_args(argv[1:])


def test_the_python_example_runs(capsys: pytest.CaptureFixture[str]) -> None:
    blocks = re.findall(r"```python\n(.*?)```", CLI_MD.read_text(encoding="utf-8"), re.DOTALL)
    assert blocks
    for i, block in enumerate(blocks):
        exec(compile(block, f"cli.md[{i}]", "exec"), {"__name__": f"cli_md_{i}"})
