"""``subject_erase()``: erase one person's data as their ``define_subject()`` declares it.

The run first takes the subject's plan (every refusal — an undeclared table, an invalid
treatment, a loop, personal data an anonymize leaves — before any row is touched). Then, one step
per page of parent keys: the keys of every deleted table are read top-down (the subject's own
key first), and the treatments are written children first, the subject last. Every write is an
equality on one key (``where(column=key).delete()`` / ``.update(**values)``), and the keys each
step read are its checkpoint, so a run killed at any step resumes where it stopped and a replay
changes nothing twice. A retained table is reached (and reported) but never written.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, cast

from ultimat3.core import Duration, Signal, XError, to_json_form
from ultimat3.jobs import Job, JobContext, Retry, Step, job
from ultimat3.jobs.factories.backfill import MAX_PAGE_SIZE
from ultimat3.jobs.factories.subject import Anonymize, Retain, Subject


def _invalid(name: object, message: str, fix: str) -> XError:
    return XError("X_JOB_DECLARATION_INVALID", f"subject_erase({name!r}): {message}", fix=fix)


def _pages(keys: Sequence[Any], size: int) -> list[list[Any]]:
    return [list(keys[i : i + size]) for i in range(0, len(keys), size)]


def subject_erase(
    *,
    name: str,
    input: type[Any],
    subject: Subject,
    tenant: Any = "none",
    page_size: int = 500,
    retry: Retry | None = None,
    queue: str | None = None,
    timeout: Duration | None = None,
) -> Job[Any, dict[str, Any]]:
    """A job erasing the person ``subject.key(input)``; see the module. The result:
    ``{"tables": [{"table", "rows", "treatment"}]}`` in the order written (the subject last);
    ``rows`` counts the rows deleted or anonymized (0 for a retain)."""
    if not isinstance(name, str) or not name.strip():
        raise _invalid(name, "name is required (a durable queue key)", "subject_erase(name='...')")
    if not isinstance(subject, Subject):
        raise _invalid(name, f"subject {subject!r} is not a define_subject()", "subject=members")
    if not isinstance(input, type):
        raise _invalid(name, "input must be a pydantic model of the request", "input=EraseMember")
    if (
        isinstance(page_size, bool)
        or not isinstance(page_size, int)
        or not 1 <= page_size <= MAX_PAGE_SIZE
    ):
        raise _invalid(name, f"page_size {page_size!r} is not from 1 to {MAX_PAGE_SIZE}", "500")
    db = subject.database

    def idempotency_key(i: Any) -> str:
        return f"subject_erase:{name}:{to_json_form(subject.key(i))}"

    async def run(i: Any, step: Step, ctx: JobContext) -> dict[str, Any]:
        plan = subject.plan()  # every refusal before any row is touched
        person = to_json_form(subject.key(i))
        if person is None or person == "":
            raise XError(
                "X_INVARIANT",
                f"subject_erase({name!r}): key(input) answered no key",
                fix="key=lambda i: i.member_id",
            )
        root = plan.subject
        keys: dict[str, list[Any]] = {root: [person]}
        written = [s for s in plan.steps if s.table != root]
        # top-down: a deleted table's keys, read per page of its parents' keys
        for s in reversed(written):
            if s.treatment != "delete":
                continue
            ent = db.entities[s.table]
            [pk] = ent.primary_key if len(ent.primary_key) == 1 else [None]
            found: list[Any] = []
            for link in s.via:
                for n, page in enumerate(_pages(keys.get(link.parent, []), page_size)):

                    async def read(
                        signal: Signal, table: str = s.table, column: str = link.column,
                        page: list[Any] = page, pk: Any = pk,
                    ) -> list[Any]:  # fmt: skip
                        if pk is None:
                            return []  # a composite key: no table can reference its rows
                        rows = await db.table(table).where().and_where(column, "in", page).all()
                        return [to_json_form(r[pk]) for r in rows]

                    got = await step.run(f"subject:keys:{s.table}.{link.column}:{n:05d}", read)
                    found += cast("list[Any]", got)
            keys[s.table] = list(dict.fromkeys(found))

        report: list[dict[str, Any]] = []
        for s in plan.steps:
            treatment = s.treatment
            total = 0
            if not isinstance(treatment, Retain):
                links = s.via if s.table != root else ()
                targets: list[tuple[str, list[list[Any]], str]] = [
                    (link.column, _pages(keys.get(link.parent, []), page_size), link.column)
                    for link in links
                ]
                if s.table == root:
                    [pk] = db.entities[root].primary_key
                    targets = [(pk, [[person]], "")]
                for column, pages, label in targets:
                    for n, page in enumerate(pages):

                        async def write(
                            signal: Signal, table: str = s.table, column: str = column,
                            page: list[Any] = page, treatment: Any = treatment,
                        ) -> int:  # fmt: skip
                            handle = db.table(table)
                            changed = 0
                            for k in page:  # every write an equality on one key
                                q = handle.where(**{column: k})
                                if isinstance(treatment, Anonymize):
                                    changed += await q.update(**treatment.values)
                                else:
                                    changed += await q.delete()
                            return changed

                        where = f"{s.table}.{label}:{n:05d}" if label else s.table
                        total += cast("int", await step.run(f"subject:erase:{where}", write))
            report.append({"table": s.table, "rows": total, "treatment": s.treatment_name})
        return {"tables": report}

    options: dict[str, Any] = {}
    if queue is not None:
        options["queue"] = queue
    return job(
        name=name,
        input=input,
        idempotency_key=idempotency_key,
        tenant=tenant,
        retry=retry,
        timeout=timeout,
        run=run,
        **options,
    )


__all__ = ["subject_erase"]
