"""The Redis driver's ``RedactionCatalog``: one set per job name, each member a path as JSON."""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Any

from ultimat3.jobs.adapter import RedactionPath

from ._codec import text
from ._scripts import ScriptRunner


class RedisRedactionCatalog:
    """``declare`` is one script call for every name (a union per name); ``lookup`` one more.
    Paths come back sorted (a set keeps no order)."""

    def __init__(self, runner: ScriptRunner) -> None:
        self._r = runner

    async def declare(self, paths: Mapping[str, Sequence[Sequence[str]]]) -> None:
        args: list[Any] = []
        for name, declared in paths.items():
            members = sorted({json.dumps(list(p), separators=(",", ":")) for p in declared})
            args += [name, len(members), *members]
        if args:
            await self._r.run(
                "redactions", "declare", len(paths), *args, op="declare job redactions"
            )

    async def lookup(self, names: Sequence[str]) -> dict[str, list[RedactionPath]]:
        if not names:
            return {}
        reply = await self._r.run("redactions", "lookup", *names, op="read job redactions")
        out: dict[str, list[RedactionPath]] = {}
        for name, members in zip(names, reply, strict=True):
            if members:
                out[name] = sorted(tuple(json.loads(text(m))) for m in members)
        return out
