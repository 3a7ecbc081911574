"""``subject_export()``: one person's data, as their ``define_subject()`` declares it, written to
an object store — one object per page per table, plus ``index.json``.

The run takes the subject's plan first (every refusal before anything is read), reads the keys
of every deleted table top-down exactly as ``subject_erase()`` does, then exports every reached
table — deleted, anonymized and retained alike, the subject last — one step per page of parent
keys: ``<prefix>/<table>/part-NNNNN.<ext>``. ``<prefix>/index.json`` holds each table's row
count, treatment and retain reason. ``.sealed()`` columns never leave.
"""

from __future__ import annotations

import csv
import io
import json
from collections.abc import Callable, Mapping, Sequence
from typing import Any, cast

from ultimat3.core import Duration, Signal, XError, to_json_form
from ultimat3.jobs import Job, JobContext, Retry, Step, job
from ultimat3.jobs.factories.backfill import MAX_PAGE_SIZE
from ultimat3.jobs.factories.entity_extra import answer, need_entity
from ultimat3.jobs.factories.subject import Retain, Subject, mark_subject_job
from ultimat3.jobs.factories.subject_keys import collect_keys, pages

FORMULA_PREFIXES = ("=", "+", "-", "@")


def _invalid(name: object, message: str, fix: str) -> XError:
    return XError("X_JOB_DECLARATION_INVALID", f"subject_export({name!r}): {message}", fix=fix)


def _encode(rows: Sequence[Mapping[str, Any]], fmt: str) -> bytes:
    forms = [cast("dict[str, Any]", to_json_form(dict(r))) for r in rows]
    if fmt == "ndjson":
        return "".join(json.dumps(f, sort_keys=True) + "\n" for f in forms).encode()
    out = io.StringIO()
    writer = csv.writer(out, lineterminator="\r\n")
    header = list(forms[0]) if forms else []
    writer.writerow(header)
    for f in forms:
        cells = []
        for c in header:
            v = f.get(c)
            text = "" if v is None else v if isinstance(v, str) else json.dumps(v)
            cells.append("'" + text if text.startswith(FORMULA_PREFIXES) else text)
        writer.writerow(cells)
    return out.getvalue().encode()


def subject_export(
    *,
    name: str,
    input: type[Any],
    subject: Subject,
    prefix: Callable[[Any], str],
    sink: Callable[[Any], Any],
    tenant: Any = "none",
    format: str = "ndjson",
    page_size: int = 500,
    retry: Retry | None = None,
    queue: str | None = None,
    timeout: Duration | None = None,
) -> Job[Any, dict[str, Any]]:
    """A job exporting the person ``subject.key(input)`` to ``sink(input)`` (an object store:
    ``await put(key, data, content_type=...)``) under ``prefix(input)``; see the module. The
    result: ``{"tables": [{"table", "rows", "treatment"}], "prefix": ...}``."""
    ent_mod = need_entity("subject_export")
    if not isinstance(name, str) or not name.strip():
        raise _invalid(name, "name is required (a durable queue key)", "subject_export(name=...)")
    if not isinstance(subject, Subject):
        raise _invalid(name, f"subject {subject!r} is not a define_subject()", "subject=members")
    if not isinstance(input, type):
        raise _invalid(name, "input must be a pydantic model of the request", "input=ExportMember")
    if not callable(prefix) or not callable(sink):
        raise _invalid(
            name, "prefix and sink must be callables of the input", "sink=lambda i: store"
        )
    if format not in ("ndjson", "csv"):
        raise _invalid(name, f"format {format!r} is not 'ndjson' or 'csv'", "format='ndjson'")
    if (
        isinstance(page_size, bool)
        or not isinstance(page_size, int)
        or not 1 <= page_size <= MAX_PAGE_SIZE
    ):
        raise _invalid(name, f"page_size {page_size!r} is not from 1 to {MAX_PAGE_SIZE}", "500")
    db = subject.database
    exportable = ent_mod.exportable
    content_type = "application/x-ndjson" if format == "ndjson" else "text/csv"

    def idempotency_key(i: Any) -> str:
        return f"subject_export:{name}:{to_json_form(subject.key(i))}"

    async def run(i: Any, step: Step, ctx: JobContext) -> dict[str, Any]:
        plan = subject.plan()
        person = to_json_form(subject.key(i))
        root = plan.subject
        base = str(prefix(i)).rstrip("/")
        keys = await collect_keys(step, plan, db, person, page_size, "subject")
        report: list[dict[str, Any]] = []
        index: dict[str, Any] = {}
        for s in plan.steps:
            ent = db.entities[s.table]
            if s.table == root:
                targets = [(ent.primary_key[0], [[person]])]
            elif plan.clears(s.table):  # a loop's table: its rows by their own keys, once each
                targets = [(ent.primary_key[0], pages(keys.get(s.table, []), page_size))]
            else:
                targets = [(lk.column, pages(keys.get(lk.parent, []), page_size)) for lk in s.via]
            part = total = 0
            for column, column_pages in targets:
                for page in column_pages:

                    async def export(
                        signal: Signal, table: str = s.table, column: str = column,
                        page: list[Any] = page, part: int = part, ent: Any = ent,
                    ) -> int:  # fmt: skip
                        rows = await db.table(table).where().and_where(column, "in", page).all()
                        if not rows:
                            return 0
                        data = _encode([exportable(ent, r) for r in rows], format)
                        store = await answer(sink(i))
                        key = f"{base}/{table}/part-{part:05d}.{format}"
                        await store.put(key, data, content_type=content_type)
                        return len(rows)

                    got = cast(
                        "int", await step.run(f"subject:export:{s.table}:{part:05d}", export)
                    )
                    total += got
                    part += 1
            why = s.treatment.why if isinstance(s.treatment, Retain) else None
            index[s.table] = {"rows": total, "treatment": s.treatment_name, "retain": why}
            report.append({"table": s.table, "rows": total, "treatment": s.treatment_name})

        async def write_index(signal: Signal) -> None:
            store = await answer(sink(i))
            body = json.dumps(index, sort_keys=True, indent=2).encode()
            await store.put(f"{base}/index.json", body, content_type="application/json")

        await step.run("subject:export:index", write_index)
        return {"tables": report, "prefix": base}

    options: dict[str, Any] = {}
    if queue is not None:
        options["queue"] = queue
    made = job(
        name=name,
        input=input,
        idempotency_key=idempotency_key,
        tenant=tenant,
        retry=retry,
        timeout=timeout,
        run=run,
        **options,
    )
    mark_subject_job(made, subject)
    return made


__all__ = ["FORMULA_PREFIXES", "collect_keys", "subject_export"]
