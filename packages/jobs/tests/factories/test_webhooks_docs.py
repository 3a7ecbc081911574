"""docs/webhooks.md runs as written: every python block, in order, in one namespace; its DDL is
the Postgres ledger's."""

from __future__ import annotations

import re
from pathlib import Path

from ultimat3.jobs.factories.webhook_ledger import postgres_webhook_ledger

WEBHOOKS_MD = Path(__file__).resolve().parents[4] / "docs" / "webhooks.md"


def test_every_python_example_in_webhooks_md_runs() -> None:
    text = WEBHOOKS_MD.read_text(encoding="utf-8")
    blocks = re.findall(r"```python\n(.*?)```", text, re.DOTALL)
    assert len(blocks) >= 2
    namespace: dict[str, object] = {"__name__": "webhooks_md"}
    for i, block in enumerate(blocks):
        exec(compile(block, f"webhooks.md[{i}]", "exec", dont_inherit=True), namespace)


def test_the_ddl_on_the_page_is_the_ledgers() -> None:
    text = WEBHOOKS_MD.read_text(encoding="utf-8")
    (shown,) = re.findall(r"```sql\n(.*?)```", text, re.DOTALL)
    ddl = postgres_webhook_ledger("postgresql://unused").ddl

    def words(s: str) -> list[str]:
        return [
            w for line in s.splitlines() if not line.strip().startswith("--") for w in line.split()
        ]

    assert words(shown.replace(";\n", "\n").rstrip(";\n")) == words(ddl.replace(";\n", "\n"))
    assert "## Choices where the spec is silent" in text
