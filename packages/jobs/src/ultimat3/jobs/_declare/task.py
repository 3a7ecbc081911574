"""``task()``: a cron schedule that ENQUEUES jobs — never a handler body.

A task names what each occurrence queues (``enqueue=``: a job, or a function of the occurrence
answering ``(job, input)`` pairs); the scheduler (``task_scheduler``) fires it, one leader
fleet-wide, each occurrence's jobs and its watermark in one driver operation. ``catch_up`` decides
what a paused task, or a scheduler that was down, missed:

- ``'latest'`` (the default): one fire, of the latest missed occurrence;
- ``'all'``: every missed occurrence, oldest first, at most ``MAX_CATCH_UP`` (the latest ones);
- ``'none'``: nothing missed fires; the next occurrence does.

The declaration is checked whole: every cause is named in one ``X_CONFIG_INVALID``.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Final, Literal
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from ultimat3.core import XError, current_clock, to_epoch_ms
from ultimat3.jobs._declare.cron import hour_is_wild, in_zone, next_after, parse_cron
from ultimat3.jobs._declare.enqueue import enqueue_requests, task_requests
from ultimat3.jobs._declare.job import Job
from ultimat3.jobs._declare.policy import MAX_JOB_NAME
from ultimat3.jobs.adapter import MAX_ENQUEUE_BATCH, EnqueueRequest, EnqueueResult

CatchUp = Literal["none", "latest", "all"]
CATCH_UPS: Final[tuple[CatchUp, ...]] = ("none", "latest", "all")
MAX_CATCH_UP: Final = 100
"""``catch_up='all'`` fires at most this many missed occurrences (the latest ones); older ones
are skipped, as ``'none'`` would."""


@dataclass(frozen=True, slots=True)
class TaskOccurrence:
    """What ``enqueue=`` receives: the task's name and the occurrence being fired."""

    task: str
    at: datetime
    """The occurrence, an aware datetime in the task's zone."""
    occurrence_ms: int
    """The same instant, epoch milliseconds (the watermark's unit)."""


JobCall = tuple[Job[Any, Any], object]
"""One job to queue: ``(job, input)``."""
EnqueueSpec = Job[Any, Any] | Callable[[TaskOccurrence], JobCall | Iterable[JobCall]]


class Task:
    """A declared task. Never built directly — use ``task()``."""

    kind: Final[Literal["task"]] = "task"

    def __init__(
        self,
        *,
        name: str,
        cron: str,
        tz: str,
        zone: ZoneInfo,
        enqueue: EnqueueSpec,
        catch_up: CatchUp,
    ) -> None:
        self.name: Final = name
        self.cron: Final = cron
        self.tz: Final = tz
        self.zone: Final = zone
        self.catch_up: Final = catch_up
        self._enqueue = enqueue

    def __repr__(self) -> str:
        return f"<Task {self.name!r} cron={self.cron!r} tz={self.tz!r}>"

    def next_run(self, from_: datetime | int) -> datetime:
        """The next occurrence strictly after ``from_``, in the task's zone."""
        return next_task_run(self, from_)

    def calls(self, occurrence_ms: int) -> list[JobCall]:
        """The ``(job, input)`` pairs one occurrence queues (``enqueue=`` applied)."""
        spec = self._enqueue
        if isinstance(spec, Job):
            return [(spec, {})]
        fired = TaskOccurrence(self.name, in_zone(occurrence_ms, self.zone), occurrence_ms)
        answer: Any = spec(fired)
        pairs: list[Any] = [answer] if _is_call(answer) else list(answer)
        for pair in pairs:
            if not _is_call(pair):
                raise XError(
                    "X_CONFIG_INVALID",
                    f"task {self.name!r}: enqueue= answered {pair!r}, not a (job, input) pair",
                    fix="answer (job, input) or a list of them: enqueue=lambda at: "
                    "(report, {'day': at.at.date().isoformat()})",
                    meta={"task": self.name},
                )
        if len(pairs) > MAX_ENQUEUE_BATCH:
            raise XError(
                "X_JOB_ENQUEUE_BATCH_TOO_LARGE",
                f"task {self.name!r}: one occurrence answered {len(pairs)} jobs, over "
                f"MAX_ENQUEUE_BATCH ({MAX_ENQUEUE_BATCH})",
                fix="enqueue one job that pages the work (backfill()) instead",
                meta={"task": self.name},
            )
        return pairs

    def requests(self, occurrence_ms: int) -> list[EnqueueRequest]:
        """The occurrence's jobs as enqueue requests, built by the facade's own path
        (validation, idempotency keys, tenant checks) — what the scheduler fires."""
        return task_requests(self.calls(occurrence_ms))

    async def enqueue(self, at: datetime | int | None = None) -> list[EnqueueResult]:
        """Queue what the occurrence at ``at`` (default: now) would, through the ambient facade,
        outside the schedule: no watermark moves, so it is not a fire."""
        when = current_clock().now_ms() if at is None else to_epoch_ms(at, name="at")
        return await enqueue_requests(self.requests(when))

    def describe(self) -> dict[str, Any]:
        return {"name": self.name, "cron": self.cron, "tz": self.tz, "catch_up": self.catch_up}


def _is_call(value: object) -> bool:
    return isinstance(value, tuple) and len(value) == 2 and isinstance(value[0], Job)


def next_task_run(task: Task, from_: datetime | int) -> datetime:
    """The next occurrence of ``task`` strictly after ``from_`` (an aware datetime or epoch ms),
    in the task's own zone — the scheduler's own resolver; no running scheduler needed."""
    if not isinstance(task, Task):
        raise XError(
            "X_INVARIANT",
            f"next_task_run: {task!r} is not a task",
            fix="pass the Task that task(...) answered",
        )
    if isinstance(from_, datetime) and from_.tzinfo is None:
        raise XError(
            "X_INVARIANT",
            f"next_task_run({task.name!r}): from_ {from_.isoformat()} has no zone",
            fix="pass an aware datetime, e.g. datetime.now(timezone.utc)",
            meta={"task": task.name},
        )
    after = to_epoch_ms(from_, name="from_")
    return in_zone(next_after(task.cron, task.zone, after), task.zone)


def task(
    *,
    name: str,
    cron: str,
    enqueue: EnqueueSpec,
    tz: str = "UTC",
    catch_up: CatchUp = "latest",
) -> Task:
    """Declare a scheduled task: at each occurrence of ``cron`` (five fields, or an alias such
    as ``@daily``, read in the IANA zone ``tz``) the scheduler queues what ``enqueue`` names.
    A refusal is ``X_CONFIG_INVALID`` naming every cause."""
    causes: list[tuple[str, str]] = []
    label = f"task {name!r}" if isinstance(name, str) and name.strip() else "task()"
    if not isinstance(name, str) or not name.strip() or len(name) > MAX_JOB_NAME:
        causes.append(
            (
                f"name {name!r} is not a non-empty str of at most {MAX_JOB_NAME} characters",
                "name='reports.nightly' — the key its watermark and pause are stored under",
            )
        )
    _check_cron(cron, causes)
    zone = _check_zone(tz, causes)
    if catch_up not in CATCH_UPS:
        causes.append(
            (
                f"catch_up {catch_up!r} is not one of {', '.join(CATCH_UPS)}",
                "catch_up='latest' (one fire for what was missed), 'all' or 'none'",
            )
        )
    if not isinstance(enqueue, Job) and not callable(enqueue):  # type: ignore[redundant-expr,unused-ignore]
        causes.append(  # type: ignore[unreachable,unused-ignore]
            (
                f"enqueue is a {type(enqueue).__name__}, neither a job nor a function",
                "enqueue=<a job>, or enqueue=lambda at: (job, input)",
            )
        )
    if causes:
        raise XError(
            "X_CONFIG_INVALID",
            f"{label} is invalid: " + "; ".join(c for c, _ in causes),
            fix="; ".join(dict.fromkeys(f for _, f in causes)),
            meta={"task": name, "causes": [c for c, _ in causes]},
        )
    assert zone is not None
    return Task(name=name, cron=cron, tz=tz, zone=zone, enqueue=enqueue, catch_up=catch_up)


def _check_cron(cron: object, causes: list[tuple[str, str]]) -> None:
    fix = "cron='17 3 * * *' — minute hour day-of-month month day-of-week, or '@daily'"
    if not isinstance(cron, str) or not cron.strip():
        causes.append((f"cron {cron!r} is not a cron expression", fix))
        return
    fields = cron.split()
    if not (len(fields) == 5 or (len(fields) == 1 and cron.strip().startswith("@"))):
        causes.append((f"cron {cron!r} has {len(fields)} fields, not five", fix))
        return
    try:
        parse_cron(cron)
        hour_is_wild(cron)
        next_after(cron, ZoneInfo("UTC"), 0)  # one that never matches (Feb 30) is refused
    except (ValueError, KeyError, TypeError) as exc:
        causes.append((f"cron {cron!r} is not a valid cron expression ({exc})", fix))


def _check_zone(tz: object, causes: list[tuple[str, str]]) -> ZoneInfo | None:
    fix = "tz='UTC' or an IANA zone name such as 'Europe/Berlin'"
    if not isinstance(tz, str) or not tz:
        causes.append((f"tz {tz!r} is not an IANA zone name", fix))
        return None
    try:
        return ZoneInfo(tz)
    except (ZoneInfoNotFoundError, ValueError) as exc:
        causes.append((f"tz {tz!r} is not an IANA zone ({type(exc).__name__})", fix))
        return None


def tasks_of(items: Sequence[object]) -> list[Task]:
    """The tasks among ``items`` (an app's list may hold jobs and tasks)."""
    return [item for item in items if isinstance(item, Task)]
