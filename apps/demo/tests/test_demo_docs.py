"""docs/demo.md cannot drift: its command lines parse, its Python example runs (starting the
embedded PostgreSQL in a folder of the test's own), and every flag it names exists."""

from __future__ import annotations

import os
import re
import shlex
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from ultimat3.jobs.cli._main import build_parser

DEMO_MD = Path(__file__).resolve().parents[3] / "docs" / "demo.md"


def _text() -> str:
    return DEMO_MD.read_text(encoding="utf-8")


@pytest.fixture
def scratch_cwd() -> Iterator[Path]:
    """A current directory outside pytest's tmp root (which pytest keeps at 0700: a server run
    as its own user, as root makes it, could not reach it)."""
    base = Path(tempfile.mkdtemp(prefix="x-demo-docs-"))
    before = Path.cwd()
    os.chdir(base)
    try:
        yield base
    finally:
        os.chdir(before)
        shutil.rmtree(base, ignore_errors=True)


def test_every_command_line_on_the_page_parses() -> None:
    blocks = re.findall(r"```console\n(.*?)```", _text(), re.DOTALL)
    lines = [line[2:] for b in blocks for line in b.splitlines() if line.startswith("$ ")]
    assert len(lines) == 3
    for line in lines:
        argv = shlex.split(line.split("&& ")[-1])
        argv = argv[2:] if argv[:2] == ["uv", "run"] else argv
        assert argv[0] == "x"
        assert build_parser().parse_args(argv[1:]).command == "demo"


def test_every_demo_flag_the_page_names_exists() -> None:
    named = set(re.findall(r"`(--[a-z-]+)", _text()))
    assert {"--jobs", "--batch", "--backlog", "--schema", "--data-dir", "--timeout"} <= named
    for flag in named - {"--database-url", "--schema", "--json"}:
        args = [flag] if flag == "--stop" else [flag, "1"]
        build_parser().parse_args(["demo", *args])


def test_the_python_example_runs(scratch_cwd: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("DATABASE_URL", raising=False)  # both halves take the embedded server
    blocks = re.findall(r"```python\n(.*?)```", _text(), re.DOTALL)
    assert len(blocks) == 1
    exec(compile(blocks[0], "demo.md[0]", "exec", dont_inherit=True), {"__name__": "demo_md"})
    assert (scratch_cwd / ".x" / "pg" / "PG_VERSION").exists()
    assert not (scratch_cwd / ".x" / "pg" / "postmaster.pid").exists()  # stopped at the end
