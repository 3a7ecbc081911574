"""docs/entity.md runs as written: every python block, in order, in one namespace, against the
real Postgres (its schemas dropped afterwards even when a block fails)."""

from __future__ import annotations

import os
import re
from pathlib import Path

import psycopg
from psycopg import sql

ENTITY_MD = Path(__file__).resolve().parents[2] / "docs" / "entity.md"
URL = os.environ.get("DATABASE_URL") or "postgresql://postgres@127.0.0.1:5432/test"


def test_every_python_example_in_entity_md_runs() -> None:
    blocks = re.findall(r"```python\n(.*?)```", ENTITY_MD.read_text(encoding="utf-8"), re.DOTALL)
    assert len(blocks) >= 10
    namespace: dict[str, object] = {"__name__": "entity_md"}
    try:
        for i, block in enumerate(blocks):
            exec(compile(block, f"entity.md[{i}]", "exec", dont_inherit=True), namespace)
    finally:
        schema = namespace.get("SCHEMA")
        if isinstance(schema, str):
            with psycopg.connect(URL, autocommit=True) as conn:
                for name in (schema, schema + "_jobs"):
                    conn.execute(
                        sql.SQL("DROP SCHEMA IF EXISTS {} CASCADE").format(sql.Identifier(name))
                    )


def test_entity_md_names_its_choices_and_the_covered_topics() -> None:
    text = ENTITY_MD.read_text(encoding="utf-8")
    assert "## Choices where the spec is silent" in text
    for topic in (
        "## Declaring",
        "## Transactions",
        "## series()",
        "## Tenancy",
        "## Sealed columns and key rotation",
    ):
        assert topic in text, topic
