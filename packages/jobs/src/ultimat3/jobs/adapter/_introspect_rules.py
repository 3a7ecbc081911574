"""The refusals every driver's introspection shares, written once: a state that is not a job
state, an id nobody queued, an empty queue or task name."""

from __future__ import annotations

import re

from ultimat3.core import XError

from ._model import ALL_STATES, MAX_JOB_PAGE, TERMINAL_STATES, JobState


def check_state(state: object, *, what: str) -> JobState:
    """``state`` when it is a job state, else ``X_INVARIANT`` naming the call and the value."""
    if state not in ALL_STATES:
        raise XError(
            "X_INVARIANT",
            f"{what}: {state!r} is not a job state",
            fix=f"use one of {', '.join(ALL_STATES)}",
        )
    return state


def job_not_found(job_id: str) -> XError:
    """``X_JOB_NOT_FOUND`` for an id nobody queued (a long id is shortened in the message)."""
    shown = job_id if len(job_id) <= 80 else job_id[:77] + "..."
    return XError(
        "X_JOB_NOT_FOUND",
        f"no job has the id {shown!r}",
        fix="check the id with x jobs list --json",
        status=404,
    )


_UUID_TEXT = re.compile(
    r"[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}"
)


def job_id_of(job_id: object) -> str:
    """A job id as every driver stores it: a UUID in any case is lowercased (the same job);
    anything else is ``X_ID_INVALID`` naming the value, never a misleading ``X_JOB_NOT_FOUND``."""
    if isinstance(job_id, str) and _UUID_TEXT.fullmatch(job_id):
        return job_id.lower()
    shown = repr(job_id)
    if len(shown) > 80:
        shown = shown[:77] + "..."
    raise XError(
        "X_ID_INVALID",
        f"job_id must be a UUID, got {shown}",
        fix="pass the id enqueue answered (x jobs list --json shows every id)",
        meta={"name": "job_id"},
    )


def check_name(value: str, what: str) -> str:
    """A queue or task name for pause / resume: ``X_INVARIANT`` when empty."""
    if not isinstance(value, str) or not value:
        raise XError(
            "X_INVARIANT", f"pause: the {what} name {value!r} is empty", fix=f"name the {what}"
        )
    return value


def check_requeueable_state(state: object) -> JobState:
    """``requeue_many``'s state: a job state, and a finished one (``X_JOB_NOT_REQUEUEABLE``)."""
    checked = check_state(state, what="introspect.requeue_many")
    if checked not in TERMINAL_STATES:
        raise XError(
            "X_JOB_NOT_REQUEUEABLE",
            f"introspect.requeue_many: state {checked!r} — only done, failed, dead or "
            "cancelled jobs can be requeued",
            fix="pass state='dead' (or 'failed', 'done', 'cancelled')",
            meta={"state": checked},
        )
    return checked


def check_cancellable_state(state: object) -> JobState:
    """``cancel_many``'s state: a live one (``X_JOB_NOT_CANCELLABLE`` for a finished state)."""
    checked = check_state(state, what="introspect.cancel_many")
    if checked not in ("ready", "delayed", "running", "suspended"):
        raise XError(
            "X_JOB_NOT_CANCELLABLE",
            f"introspect.cancel_many: state {checked!r} — only ready, delayed, running or "
            "suspended jobs can be cancelled; a finished job has nothing to stop",
            fix="pick a live state: x jobs cancel --state ready --queue emails",
            meta={"state": checked},
        )
    return checked


def check_page(*, limit: object, after: str | None, before: str | None, state: object) -> None:
    """``list``'s arguments: one direction, a page of 1..MAX_JOB_PAGE rows, a real state."""
    if after is not None and before is not None:
        raise XError(
            "X_INVARIANT",
            "introspect.list: after and before were both given",
            fix="page forward with after=job_cursor(last_row) OR back with "
            "before=job_cursor(first_row), never both",
        )
    if isinstance(limit, bool) or not isinstance(limit, int) or not 1 <= limit <= MAX_JOB_PAGE:
        raise XError(
            "X_JOB_PAGE_INVALID",
            f"introspect.list: limit {limit!r} is not 1..{MAX_JOB_PAGE} (MAX_JOB_PAGE)",
            fix=f"ask for at most {MAX_JOB_PAGE} rows a page and page on with after=",
        )
    if state is not None:
        check_state(state, what="introspect.list")


def sample_queue_names(queues: object) -> list[str]:
    """``sample_queues``' argument as distinct names in the order first named; ``X_INVARIANT``
    naming the first that is not a non-empty str."""
    if isinstance(queues, str | bytes) or not isinstance(queues, list | tuple):
        raise XError(
            "X_INVARIANT",
            f"sample_queues takes a list of queue names, got {type(queues).__name__}",
            fix="sample_queues(['default', 'billing'])",
        )
    for queue in queues:
        if not isinstance(queue, str) or not queue:
            raise XError(
                "X_INVARIANT",
                f"sample_queues: {queue!r} is not a queue name",
                fix="name each queue as a non-empty str",
            )
    return list(dict.fromkeys(queues))
