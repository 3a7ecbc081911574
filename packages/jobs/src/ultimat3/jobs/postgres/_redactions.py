"""``RedactionCatalog`` over ``x_job_redactions``: job name → the ``x-sensitive`` paths."""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence

from ultimat3.jobs.adapter import RedactionPath
from ultimat3.jobs.postgres._db import Database
from ultimat3.jobs.postgres._rows import check_text


class PostgresRedactionCatalog:
    """``declare`` is one statement for every name (a union per name); ``lookup`` one read."""

    def __init__(self, db: Database) -> None:
        self._db = db

    async def declare(self, paths: Mapping[str, Sequence[Sequence[str]]]) -> None:
        names: list[str] = []
        texts: list[str] = []
        for name, declared in paths.items():
            names.append(str(check_text(name, what="declaring redactions: a job name")))
            texts.append(json.dumps([list(p) for p in declared]))
        if not names:
            return
        await self._db.rowcount(
            "redactions_declare",
            {"names": names, "paths": texts},
            what=f"declaring the redactions of {len(names)} job(s)",
        )

    async def lookup(self, names: Sequence[str]) -> dict[str, list[RedactionPath]]:
        if not names:
            return {}
        rows = await self._db.fetchall(
            "redactions_lookup", {"names": list(names)}, what="reading the redaction catalog"
        )
        return {str(r[0]): [tuple(p) for p in r[1]] for r in rows if r[1]}
