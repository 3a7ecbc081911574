"""``subject_erase()``: erase one person's data as their ``define_subject()`` declares it.

The run first takes the subject's plan (every refusal — an undeclared table, an invalid
treatment, a loop, personal data an anonymize leaves — before any row is touched). Then, one step
per page of parent keys: the keys of every deleted table are read top-down (the subject's own
key first), and the treatments are written children first, the subject last. Every write is
one statement per page, an equality on the page's stored keys (``where column in (keys)``, never
a range), and the keys each step read are its checkpoint, so a run killed at any step resumes
where it stopped and a replay changes nothing twice. A loop of deleted tables has its nullable
key set to ``None`` first. A retained table is reached (and reported) but never written. With an
``AUDIT_SINK`` installed, one ``allowed`` record per completed erase and one ``failed`` per
attempt that threw (the subject's entity and the run id, never the person's key).
"""

from __future__ import annotations

from typing import Any, cast

from ultimat3.core import (
    AUDIT_SINK,
    AuditOutcome,
    AuditRecord,
    AuditSink,
    Duration,
    Signal,
    XError,
    installed_adapter,
    to_json_form,
)
from ultimat3.jobs import Job, JobContext, Retry, Step, job
from ultimat3.jobs.factories.backfill import MAX_PAGE_SIZE
from ultimat3.jobs.factories.subject import (
    Anonymize,
    Retain,
    Subject,
    SubjectPlan,
    mark_subject_job,
)
from ultimat3.jobs.factories.subject_keys import StepRunner, collect_keys, pages


def _invalid(name: object, message: str, fix: str) -> XError:
    return XError("X_JOB_DECLARATION_INVALID", f"subject_erase({name!r}): {message}", fix=fix)


async def erase_person(
    step: StepRunner, plan: SubjectPlan, db: Any, person: Any, page_size: int
) -> list[dict[str, Any]]:
    """Erase ``person`` as ``plan`` says, one ``step.run`` per page: the keys top-down, the
    loop's nullable keys cleared, then the treatments children first, the subject last. Answers
    ``[{"table", "rows", "treatment"}]`` in the order written."""
    root = plan.subject
    keys = await collect_keys(step, plan, db, person, page_size, "subject")

    def writer(table: str, column: str, page: list[Any], values: Any) -> Any:
        async def write(signal: Signal) -> int:
            handle = db.table(table)
            # one statement per page: `column in (the page's stored keys)` — equalities on keys
            # read before, never a range, so a replay changes nothing twice
            q = handle.where().and_where(column, "in", page)
            return int(await (q.delete() if values is None else q.update(**values)))

        return write

    # a loop of deleted tables: its nullable key is set to None first, so no delete is blocked
    for link in plan.cleared:
        for n, page in enumerate(pages(keys.get(link.parent, []), page_size)):
            clear = writer(link.table, link.column, page, {link.column: None})
            await step.run(f"subject:clear:{link.table}.{link.column}:{n:05d}", clear)
    report: list[dict[str, Any]] = []
    for s in plan.steps:
        treatment = s.treatment
        total = 0
        if not isinstance(treatment, Retain):
            values = treatment.values if isinstance(treatment, Anonymize) else None
            ent = db.entities[s.table]
            targets: list[tuple[str, list[list[Any]], str]]
            if s.table == root:
                targets = [(ent.primary_key[0], [[person]], "")]
            elif plan.clears(s.table):  # the cleared column finds nothing now: by own key
                pk = ent.primary_key[0]
                targets = [(pk, pages(keys.get(s.table, []), page_size), pk)]
            else:
                targets = [
                    (link.column, pages(keys.get(link.parent, []), page_size), link.column)
                    for link in s.via
                ]
            for column, column_pages, label in targets:
                for n, page in enumerate(column_pages):
                    where = f"{s.table}.{label}:{n:05d}" if label else s.table
                    write = writer(s.table, column, page, values)
                    total += cast("int", await step.run(f"subject:erase:{where}", write))
        report.append({"table": s.table, "rows": total, "treatment": s.treatment_name})
    return report


async def _audit(
    sink: AuditSink,
    outcome: AuditOutcome,
    ctx: JobContext,
    subject: Subject,
    suffix: str,
    error: BaseException | None,
) -> None:
    """One record: the subject's entity and the run id, never the person's key (an app may make
    it an email), and of a failure its code only (a database error's message quotes keys)."""
    code = None
    if error is not None:
        code = error.code if isinstance(error, XError) else type(error).__name__
    actor = ctx.actor
    record = AuditRecord(
        outcome=outcome,
        primitive="action",
        surface="job",
        name=ctx.name,
        input={"subject": subject.name, "run": ctx.run_id},
        idempotency_key=f"{ctx.name}:{ctx.run_id}{suffix}",
        at=ctx.clock.now(),
        tenant_id=ctx.tenant_id,
        actor=actor.id if actor is not None else None,
        error_code=code,
    )
    if error is None:
        await sink.write(record)
        return
    try:
        await sink.write(record)
    except Exception as refused:  # the erase's own failure is what the operator needs first
        error.add_note(f"the audit sink refused the failed record too: {refused!r}")


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
        sink = installed_adapter(AUDIT_SINK)
        try:
            plan = subject.plan()  # every refusal before any row is touched
            person = to_json_form(subject.key(i))
            if person is None or person == "":
                raise XError(
                    "X_INVARIANT",
                    f"subject_erase({name!r}): key(input) answered no key",
                    fix="key=lambda i: i.member_id",
                )
            report = await erase_person(step, plan, db, person, page_size)
        except Exception as exc:
            if sink is not None:
                await _audit(sink, "failed", ctx, subject, f":failed:{ctx.attempt}", exc)
            raise
        if sink is not None:  # at least once: a replayed run writes it again, the sink dedupes
            await _audit(sink, "allowed", ctx, subject, "", None)
        return {"tables": report}

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


__all__ = ["erase_person", "subject_erase"]
