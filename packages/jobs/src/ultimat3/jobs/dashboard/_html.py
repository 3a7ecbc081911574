"""HTML built so that escaping cannot be forgotten: every value is text unless it is ``Safe``.

``el("td", row.name)`` escapes ``row.name``; attribute values are escaped as well. Only this
module makes ``Safe`` out of raw strings, and only for markup written here, never for a value.
"""

from __future__ import annotations

import html
import json
from collections.abc import Iterable, Mapping
from datetime import UTC, datetime
from typing import Any

VOID = frozenset({"input", "meta", "link", "br", "hr", "img"})

AttrValue = str | int | bool | None


class Safe(str):
    """Markup already escaped (or written here): inserted as is."""

    __slots__ = ()


Node = Safe | str | int | None | Iterable["Node"]


def esc(value: object) -> Safe:
    """``value`` as HTML text: ``&``, ``<``, ``>``, ``"`` and ``'`` escaped."""
    if isinstance(value, Safe):
        return value
    return Safe(html.escape(str(value), quote=True))


def render(node: Node) -> Safe:
    """Flatten a tree of nodes: strings are escaped, ``Safe`` kept, ``None`` dropped."""
    if node is None:
        return Safe("")
    if isinstance(node, str | int):
        return esc(node)
    return Safe("".join(render(child) for child in node))


def _attrs(attrs: Mapping[str, AttrValue]) -> str:
    out = []
    for key, value in attrs.items():
        if value is None or value is False:
            continue
        name = key.rstrip("_").replace("_", "-")
        if value is True:
            out.append(f" {name}")
        else:
            out.append(f' {name}="{esc(value)}"')
    return "".join(out)


def el(tag: str, *children: Node, **attrs: AttrValue) -> Safe:
    """``<tag attrs>children</tag>``; ``class_="x"`` is ``class="x"``, ``data_id`` is
    ``data-id``; ``True`` is a bare attribute, ``None`` / ``False`` leave it out."""
    opening = f"<{tag}{_attrs(attrs)}>"
    if tag in VOID:
        return Safe(opening)
    return Safe(f"{opening}{render(children)}</{tag}>")


def when(value: datetime | None) -> str:
    """A time as ``2026-01-02 03:04:05Z``; ``-`` for none."""
    if value is None:
        return "-"
    return value.astimezone(UTC).strftime("%Y-%m-%d %H:%M:%SZ")


def _fallback(value: object) -> Any:
    if isinstance(value, datetime):
        return value.isoformat()
    if isinstance(value, bytes):
        return value.hex()
    if isinstance(value, set | frozenset):
        return sorted(value, key=str)
    return repr(value)


def as_json(value: object) -> str:
    """A stored value as indented JSON text (escaped when it is rendered)."""
    return json.dumps(value, indent=2, ensure_ascii=False, default=_fallback, sort_keys=False)


def clip(value: object, width: int = 60) -> str:
    """One cell: ``-`` for None, compact JSON for structures, cut to ``width``."""
    if value is None:
        return "-"
    text = value if isinstance(value, str) else json.dumps(value, default=_fallback)
    text = " ".join(text.split())
    return text if len(text) <= width else text[: width - 1] + "…"


def table(headers: Iterable[str], rows: Iterable[Iterable[Node]], **attrs: AttrValue) -> Safe:
    head = el("thead", el("tr", [el("th", h, scope="col") for h in headers]))
    body = el("tbody", [el("tr", [el("td", cell) for cell in row]) for row in rows])
    return el("table", head, body, **attrs)
