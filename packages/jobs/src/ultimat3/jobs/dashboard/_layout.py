"""The frame around every page: header, navigation, the message banner, the stylesheet."""

from __future__ import annotations

from dataclasses import dataclass

from ._html import Node, Safe, el, render
from ._http import Request

NAV = (
    ("/", "Overview"),
    ("/jobs", "Jobs"),
    ("/dead", "Dead letter"),
    ("/tasks", "Tasks"),
)


@dataclass(frozen=True, slots=True)
class Banner:
    """A message at the top of a page: what an action did, or why it was refused."""

    text: str
    ok: bool
    code: str | None = None
    fix: str | None = None

    def html(self) -> Safe:
        parts: list[Node] = []
        if self.code:
            parts += [el("code", self.code), ": "]
        parts.append(self.text)
        if self.fix:
            parts += [el("br"), el("span", "fix: ", self.fix, class_="muted")]
        return el("div", parts, class_=f"banner {'ok' if self.ok else 'bad'}", role="status")


def page(
    request: Request,
    *,
    title: str,
    heading: str,
    section: str,
    body: Node,
    banner: Banner | None = None,
    refresh_s: int | None = None,
) -> str:
    """A whole HTML document. ``refresh_s`` reloads it on its own (``<meta refresh>``: works
    with JavaScript off, and no script runs on any page)."""
    links = [
        el(
            "a",
            label,
            href=request.url(path),
            aria_current="page" if path == section else None,
        )
        for path, label in NAV
    ]
    head = el(
        "head",
        el("meta", charset="utf-8"),
        el("meta", name="viewport", content="width=device-width, initial-scale=1"),
        el("meta", http_equiv="refresh", content=str(refresh_s)) if refresh_s else None,
        el("title", f"{heading} · {title}"),
        el("link", rel="stylesheet", href=request.url("/static/dashboard.css")),
    )
    top = el("header", el("h1", title), el("nav", links))
    main = el("main", banner.html() if banner else None, el("h2", heading), body)
    return "<!doctype html>\n" + render(el("html", head, el("body", top, main), lang="en"))
