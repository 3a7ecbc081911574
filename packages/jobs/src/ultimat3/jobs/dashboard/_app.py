"""``JobsDashboard``: the ASGI application. GET pages, POST actions, nothing else."""

from __future__ import annotations

import re
from collections.abc import Awaitable, Callable, Sequence

from ultimat3.core import CODES, XError
from ultimat3.jobs import Task
from ultimat3.jobs.adapter import JobDriver, job_driver

from . import _csrf
from ._actions import ACTIONS, run_action
from ._context import Ctx, View, introspection_of
from ._dead import dead_letter
from ._flash import set_flash, take_flash
from ._html import el
from ._http import Receive, Request, Response, Scope, Send, read_form, request_of
from ._job import job_page
from ._jobs_list import jobs_list
from ._layout import Banner, page
from ._overview import overview
from ._style import CSS
from ._tasks import tasks_page

JOB_PATH = re.compile(r"^/jobs/([^/]+)$")
ACTION_PATH = re.compile(r"^/actions/([a-z-]+)$")
STATUS = {
    # the page's answer for a code the registry gives no status (the registry's wins)
    "X_JOB_NOT_FOUND": 404,
    "X_JOB_NOT_REQUEUEABLE": 409,
    "X_JOB_NOT_CANCELLABLE": 409,
    "X_JOB_NOT_REMOVABLE": 409,
    "X_JOB_DUPLICATE": 409,
    "X_JOB_PAGE_INVALID": 400,
    "X_INVARIANT": 400,
    "X_BODY_INVALID": 400,
    "X_FORBIDDEN": 403,
    "X_NOT_IMPLEMENTED": 501,
}

Render = Callable[[Ctx], Awaitable[View]]


def status_of(exc: XError, default: int = 500) -> int:
    known = CODES.get(exc.code)
    return exc.status or (known.status if known else None) or STATUS.get(exc.code) or default


def _banner(exc: XError) -> Banner:
    return Banner(exc.message, ok=False, code=exc.code, fix=exc.fix)


class JobsDashboard:
    """The jobs dashboard as a plain ASGI app: mount it where the app's auth guards it."""

    def __init__(
        self,
        *,
        driver: JobDriver | None,
        title: str,
        allow_actions: bool,
        tasks: Sequence[Task],
    ) -> None:
        self._driver = driver
        self.title = title
        self.allow_actions = allow_actions
        self.tasks = tuple(tasks)

    @property
    def driver(self) -> JobDriver:
        """The driver given, else the installed one (resolved on each request)."""
        return self._driver if self._driver is not None else job_driver()

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "lifespan":
            await _lifespan(receive, send)
            return
        if scope["type"] != "http":
            return
        request = request_of(scope)
        try:
            response = await self._respond(request, receive)
        except XError as exc:  # no driver installed, say: the page says so, with the fix
            html = page(
                request,
                title=self.title,
                heading="Unavailable",
                section="",
                body=None,
                banner=_banner(exc),
            )
            response = Response(html, status=status_of(exc, 503))
        await response.send(send, head=request.method == "HEAD")

    def _ctx(self, request: Request) -> tuple[Ctx, str | None]:
        token, cookie = _csrf.token_of(request) if self.allow_actions else ("", None)
        driver = self.driver
        ctx = Ctx(
            request=request,
            driver=driver,
            intro=introspection_of(driver),
            title=self.title,
            actions=self.allow_actions,
            token=token,
            tasks=self.tasks,
        )
        return ctx, cookie

    async def _respond(self, request: Request, receive: Receive) -> Response:
        path = request.path
        if path == "/static/dashboard.css":
            return Response(CSS, content_type="text/css; charset=utf-8")
        render = self._route(path)
        action = ACTION_PATH.match(path)
        if request.method in ("GET", "HEAD") and render is not None:
            ctx, cookie = self._ctx(request)
            banner, clear = take_flash(request)
            response = await self._page(ctx, render, banner)
            if clear is not None:
                response.headers.append(("set-cookie", clear))
        elif request.method == "POST" and action is not None and action.group(1) in ACTIONS:
            ctx, cookie = self._ctx(request)
            response = await self._post(ctx, action.group(1), receive)
        elif render is not None or (action is not None and action.group(1) in ACTIONS):
            allowed = "GET, HEAD" if render is not None else "POST"
            response = Response(f"use {allowed}", status=405, content_type="text/plain")
            response.headers.append(("allow", allowed))
            return response
        else:
            ctx, cookie = self._ctx(request)
            body = el("p", f"no page at {path}: ", el("a", "the overview", href=ctx.url("/")))
            html = page(request, title=self.title, heading="Not found", section="", body=body)
            response = Response(html, status=404)
        if cookie is not None:
            response.headers.append(("set-cookie", cookie))
        return response

    def _route(self, path: str) -> Render | None:
        fixed: dict[str, Render] = {
            "/": overview,
            "": overview,
            "/jobs": jobs_list,
            "/dead": dead_letter,
            "/tasks": tasks_page,
        }
        if path in fixed:
            return fixed[path]
        match = JOB_PATH.match(path)
        if match is None:
            return None
        job_id = match.group(1)

        async def one(ctx: Ctx) -> View:
            return await job_page(ctx, job_id)

        return one

    async def _page(
        self, ctx: Ctx, render: Render, banner: Banner | None = None, status: int | None = None
    ) -> Response:
        try:
            view = await render(ctx)
        except XError as exc:
            return self._error(ctx, exc, banner)
        html = page(
            ctx.request,
            title=self.title,
            heading=view.heading,
            section=view.section,
            body=view.body,
            banner=banner,
            refresh_s=None if banner else view.refresh_s,
        )
        return Response(html, status=status or view.status)

    def _error(self, ctx: Ctx, exc: XError, banner: Banner | None = None) -> Response:
        """The refusal as a page: the action's banner (when one led here) and this error."""
        body = el("p", el("a", "back to the overview", href=ctx.url("/")))
        html = page(
            ctx.request,
            title=self.title,
            heading="Refused",
            section="",
            body=[_banner(exc).html() if banner and banner.text != exc.message else None, body],
            banner=banner or _banner(exc),
        )
        return Response(html, status=status_of(exc))

    async def _post(self, ctx: Ctx, name: str, receive: Receive) -> Response:
        if not self.allow_actions:
            return self._error(
                ctx,
                XError(
                    "X_FORBIDDEN",
                    "this dashboard is read-only: its actions are off",
                    fix="jobs_dashboard(allow_actions=True), behind the app's own auth",
                    status=403,
                ),
            )
        try:
            ctx.request.form = await read_form(ctx.request, receive)
            _csrf.check(ctx.request)
        except XError as exc:
            return self._error(ctx, exc)
        try:
            done = await run_action(ctx, name)
        except XError as exc:
            then = _failed_next(ctx, name)
            if then is None:
                return self._error(ctx, exc)
            return await self._page(ctx, then, _banner(exc), status_of(exc))
        location = ctx.url(done.then)
        response = Response(f"see {location}", status=303, content_type="text/plain")
        response.headers += [
            ("location", location),
            ("set-cookie", set_flash(ctx.request, done.banner)),
        ]
        return response


def _failed_next(ctx: Ctx, name: str) -> Render | None:
    """Where a refused action lands: back on the job it was about, when that job exists."""
    form = ctx.request.form
    if form.get("back") == "/dead" or name == "retry-group":
        return dead_letter
    if name in ("pause", "resume"):
        return overview
    if name in ("pause-task", "resume-task"):
        return tasks_page
    job_id = form.get("id")
    if not job_id:
        return None

    async def then(c: Ctx) -> View:
        return await job_page(c, job_id)

    return then


async def _lifespan(receive: Receive, send: Send) -> None:
    while True:
        message = await receive()
        if message["type"] == "lifespan.startup":
            await send({"type": "lifespan.startup.complete"})
        elif message["type"] == "lifespan.shutdown":
            await send({"type": "lifespan.shutdown.complete"})
            return
