"""The actions, one POST each: retry (optionally from a step), cancel, promote, pause and
resume a queue or a task, and retry a whole dead-letter group. Each calls ONE introspection
member (a group: one ``requeue`` per job of it) and answers a banner and the page to show next;
a refusal is the member's own ``XError``, shown with its code."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass

from ultimat3.core import XError, log_event
from ultimat3.jobs.adapter import JobIntrospection

from ._context import Ctx
from ._dead import dead_groups
from ._html import when
from ._layout import Banner


@dataclass(frozen=True, slots=True)
class Done:
    banner: Banner
    then: str
    """The page to show next (a path under the mount): the browser is redirected there."""


def _field(form: dict[str, str], name: str, action: str) -> str:
    value = form.get(name, "").strip()
    if not value:
        raise XError(
            "X_BODY_INVALID",
            f"the {action} action needs the form field {name!r}",
            fix="submit the dashboard's own form",
            status=400,
        )
    return value


def _job_next(ctx: Ctx, job_id: str) -> str:
    return "/dead" if ctx.request.form.get("back") == "/dead" else f"/jobs/{job_id}"


async def _retry(ctx: Ctx, intro: JobIntrospection) -> Done:
    job_id = _field(ctx.request.form, "id", "retry")
    from_step = ctx.request.form.get("from_step") or None
    row = await intro.requeue(job_id, from_step=from_step)
    rerun = f"; steps from {from_step!r} on run again" if from_step else ""
    text = f"job {row.id} requeued: {row.state}, due {when(row.run_at)}{rerun}"
    return Done(
        Banner(text + "; completed steps replay from storage", ok=True), _job_next(ctx, job_id)
    )


async def _cancel(ctx: Ctx, intro: JobIntrospection) -> Done:
    job_id = _field(ctx.request.form, "id", "cancel")
    row = await intro.cancel(job_id, ctx.request.form.get("reason") or None)
    return Done(Banner(f"job {row.id} cancelled", ok=True), _job_next(ctx, job_id))


async def _promote(ctx: Ctx, intro: JobIntrospection) -> Done:
    job_id = _field(ctx.request.form, "id", "promote")
    row = await intro.promote(job_id)
    return Done(
        Banner(f"job {row.id} promoted: {row.state}, due now", ok=True), _job_next(ctx, job_id)
    )


async def _pause(ctx: Ctx, intro: JobIntrospection) -> Done:
    queue = _field(ctx.request.form, "queue", "pause")
    await intro.pause_queue(queue)
    return Done(
        Banner(f"queue {queue} paused: no worker claims from it until it is resumed", ok=True),
        "/",
    )


async def _resume(ctx: Ctx, intro: JobIntrospection) -> Done:
    queue = _field(ctx.request.form, "queue", "resume")
    await intro.resume_queue(queue)
    return Done(Banner(f"queue {queue} resumed", ok=True), "/")


async def _pause_task(ctx: Ctx, intro: JobIntrospection) -> Done:
    task = _field(ctx.request.form, "task", "pause-task")
    await intro.pause_task(task)
    return Done(Banner(f"task {task} paused: it does not fire until resumed", ok=True), "/tasks")


async def _resume_task(ctx: Ctx, intro: JobIntrospection) -> Done:
    task = _field(ctx.request.form, "task", "resume-task")
    await intro.resume_task(task)
    return Done(
        Banner(f"task {task} resumed: its catch_up decides what it missed", ok=True), "/tasks"
    )


async def _retry_group(ctx: Ctx, intro: JobIntrospection) -> Done:
    name = _field(ctx.request.form, "name", "retry-group")
    code = _field(ctx.request.form, "code", "retry-group")
    groups, _ = await dead_groups(intro)
    group = next((g for g in groups if g.name == name and g.code == code), None)
    if group is None:
        return Done(Banner(f"no dead {name} jobs with {code} are left", ok=True), "/dead")
    moved = 0
    refused: list[XError] = []
    for row in group.rows:
        try:
            await intro.requeue(row.id)
            moved += 1
        except XError as exc:
            refused.append(exc)
    text = f"requeued {moved} of {len(group.rows)} dead {name} jobs ({code})"
    if refused:
        first = refused[0]
        return Done(
            Banner(
                f"{text}; {len(refused)} refused, the first: {first.message}",
                ok=False,
                code=first.code,
                fix=first.fix,
            ),
            "/dead",
        )
    return Done(Banner(text, ok=True), "/dead")


ACTIONS: dict[str, Callable[[Ctx, JobIntrospection], Awaitable[Done]]] = {
    "retry": _retry,
    "cancel": _cancel,
    "promote": _promote,
    "pause": _pause,
    "resume": _resume,
    "pause-task": _pause_task,
    "resume-task": _resume_task,
    "retry-group": _retry_group,
}


async def run_action(ctx: Ctx, name: str) -> Done:
    """Run the action ``name`` (its refusal propagates as the member's ``XError``)."""
    handler = ACTIONS[name]
    fields = {"id": "job_id", "queue": "queue", "task": "task", "name": "job", "code": "code"}
    target = {fields[k]: v for k, v in ctx.request.form.items() if k in fields}
    try:
        done = await handler(ctx, ctx.need_intro())
    except XError as exc:
        log_event("jobs.dashboard.action", action=name, outcome=exc.code, **target)
        raise
    log_event("jobs.dashboard.action", action=name, outcome="ok", **target)
    return done
