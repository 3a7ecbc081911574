"""The memory driver's ``RedactionCatalog``: job name → redaction paths, in this process."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from ultimat3.jobs.adapter import RedactionPath


class MemoryRedactionCatalog:
    """A union per job name, as the Postgres catalog keeps it."""

    def __init__(self) -> None:
        self._paths: dict[str, list[RedactionPath]] = {}

    async def declare(self, paths: Mapping[str, Sequence[Sequence[str]]]) -> None:
        for name, declared in paths.items():
            kept = self._paths.setdefault(name, [])
            for path in declared:
                if tuple(path) not in kept:
                    kept.append(tuple(path))

    async def lookup(self, names: Sequence[str]) -> dict[str, list[RedactionPath]]:
        return {n: list(self._paths[n]) for n in names if self._paths.get(n)}
