import re
from pathlib import Path

from ultimat3.core import CODES

ERRORS_MD = Path(__file__).resolve().parents[3] / "docs" / "errors.md"


def sections() -> dict[str, str]:
    text = ERRORS_MD.read_text(encoding="utf-8")
    parts = re.split(r"^## ", text, flags=re.MULTILINE)[1:]
    return {part.split("\n", 1)[0].strip(): part for part in parts}


def test_every_code_has_a_section_with_cause_fix_retry_and_an_example() -> None:
    found = sections()
    missing = sorted(set(CODES) - set(found))
    assert not missing, f"docs/errors.md lacks sections for {missing}"
    for code, info in CODES.items():
        section = found[code]
        assert "**Cause:**" in section, code
        assert "**Fix:**" in section, code
        assert f"**Retry:** `{info.retry}`" in section, code
        assert "```python" in section, f"{code} has no example"


def test_every_section_is_a_registered_code() -> None:
    stray = sorted(set(sections()) - set(CODES))
    assert not stray, f"docs/errors.md documents unregistered codes {stray}"


CORE_MD = ERRORS_MD.parent / "core.md"


def test_every_python_example_in_core_md_runs() -> None:
    from ultimat3.core import reset_error_retry

    blocks = re.findall(r"```python\n(.*?)```", CORE_MD.read_text(encoding="utf-8"), re.DOTALL)
    assert len(blocks) >= 10
    try:
        for i, block in enumerate(blocks):
            exec(compile(block, f"core.md[{i}]", "exec"), {"__name__": f"core_md_{i}"})
    finally:
        reset_error_retry()
