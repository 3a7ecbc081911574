"""The keys of one person's deleted rows, read top-down, one step per page of parent keys — the
first half of ``subject_erase()`` and ``subject_export()``.

A plan without a loop needs one pass (each parent's keys are read before its children's). A plan
whose loop of deleted tables is broken by a cleared nullable key reads again, round after round,
from the parent keys the previous round found, until a round finds none (the replies to a reply
to the person's comment are the person's too); a round past the first names its steps
``...:rN:NNNNN``.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Sequence
from typing import Any, Protocol, cast

from ultimat3.core import Signal, to_json_form
from ultimat3.jobs.factories.subject import Link, SubjectPlan


class StepRunner(Protocol):
    """What the walk needs of a ``Step``: ``run(name, fn)``."""

    async def run(self, name: str, fn: Callable[[Signal], Awaitable[Any]], /) -> Any: ...


def pages(keys: Sequence[Any], size: int) -> list[list[Any]]:
    return [list(keys[i : i + size]) for i in range(0, len(keys), size)]


async def collect_keys(
    step: StepRunner, plan: SubjectPlan, db: Any, person: Any, page_size: int, label: str
) -> dict[str, list[Any]]:
    """The keys of every deleted table of ``plan`` that another references or a loop runs
    through (``{table: [key, ...]}``, the subject's own included), read top-down, one step per
    page of parent keys (``<label>:keys:<table>.<column>:NNNNN``)."""
    keys: dict[str, list[Any]] = {plan.subject: [person]}
    seen: dict[str, set[Any]] = {plan.subject: {person}}
    # only a table something references (or a loop's, written by its own key) needs its keys:
    # a leaf is written through its parents' keys
    needed = {lk.parent for s in plan.steps for lk in s.via}
    needed |= {t for lk in plan.cleared for t in (lk.table, lk.parent)}
    walk = [
        s
        for s in reversed(plan.steps)
        if s.table != plan.subject and s.treatment == "delete" and s.table in needed
    ]
    consumed: dict[Link, int] = {}
    round_no = 0
    while True:
        grew = False
        for s in walk:
            ent = db.entities[s.table]
            pk = ent.primary_key[0] if len(ent.primary_key) == 1 else None
            found = keys.setdefault(s.table, [])
            known = seen.setdefault(s.table, set())
            for link in s.via:
                parent_keys = keys.get(link.parent, [])
                fresh = parent_keys[consumed.get(link, 0) :]
                consumed[link] = len(parent_keys)
                for n, page in enumerate(pages(fresh, page_size)):

                    async def read(
                        signal: Signal, table: str = s.table, column: str = link.column,
                        page: list[Any] = page, pk: Any = pk,
                    ) -> list[Any]:  # fmt: skip
                        if pk is None:
                            return []  # a composite key: no table can reference its rows
                        rows = await db.table(table).where().and_where(column, "in", page).all()
                        return [to_json_form(r[pk]) for r in rows]

                    at = f"r{round_no}:" if round_no else ""
                    name = f"{label}:keys:{s.table}.{link.column}:{at}{n:05d}"
                    for k in cast("list[Any]", await step.run(name, read)):
                        if k not in known:
                            known.add(k)
                            found.append(k)
                            grew = True
        if not plan.cleared or not grew:
            return keys
        round_no += 1


__all__ = ["StepRunner", "collect_keys", "pages"]
