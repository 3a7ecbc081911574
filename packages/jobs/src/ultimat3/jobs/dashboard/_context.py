"""What a page render has: the request, the driver and its introspection, and the form maker."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from ultimat3.core import XError
from ultimat3.jobs import Task
from ultimat3.jobs.adapter import BackfillLedger, JobDriver, JobIntrospection

from ._csrf import FIELD
from ._html import Node, Safe, el
from ._http import Request


@dataclass(frozen=True, slots=True)
class View:
    """A rendered page body and how to frame it."""

    heading: str
    section: str
    body: Node
    status: int = 200
    refresh_s: int | None = None


def introspection_of(driver: JobDriver) -> JobIntrospection | None:
    intro = getattr(driver, "introspect", None)
    return intro if isinstance(intro, JobIntrospection) else None


def backfills_of(driver: JobDriver) -> BackfillLedger | None:
    ledger = getattr(driver, "backfills", None)
    return ledger if isinstance(ledger, BackfillLedger) else None


@dataclass(frozen=True, slots=True)
class Ctx:
    request: Request
    driver: JobDriver
    intro: JobIntrospection | None
    title: str
    actions: bool
    token: str
    tasks: Sequence[Task]

    def need_intro(self) -> JobIntrospection:
        """The driver's introspection; ``X_NOT_IMPLEMENTED`` (501) for a driver without one."""
        if self.intro is None:
            raise XError(
                "X_NOT_IMPLEMENTED",
                f"the {self.driver.name} driver has no introspect: this page reads nothing else",
                fix="use a driver with introspect (memory, Postgres, Redis)",
                status=501,
            )
        return self.intro

    def url(self, path: str, params: Mapping[str, str | None] | None = None) -> str:
        return self.request.url(path, dict(params or {}))

    def form(
        self, action: str, label: str, fields: Mapping[str, str | None], *extra: Node
    ) -> Safe | None:
        """A POST form to ``actions/<action>`` with the CSRF token; nothing when read-only."""
        if not self.actions:
            return None
        hidden = [
            el("input", type="hidden", name=k, value=v) for k, v in fields.items() if v is not None
        ]
        return el(
            "form",
            el("input", type="hidden", name=FIELD, value=self.token),
            hidden,
            *extra,
            el("button", label, type="submit", data_action=action),
            method="post",
            action=self.url(f"/actions/{action}"),
            class_="inline",
        )


def state_badge(state: str, *, step: bool = False) -> Safe:
    kind = f"step-{state}" if step else state
    return el("span", state, class_=f"state state-{kind}")
