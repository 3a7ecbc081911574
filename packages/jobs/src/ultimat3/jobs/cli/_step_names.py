"""Duplicate step names found by reading a job's body (``x verify``), without running it.

A body's source is parsed (``ast``); every ``step.run`` / ``step.transaction`` /
``step.wait_for_event`` whose name is a string literal is a named step. Two with one name are
``X_STEP_DUPLICATE`` unless they sit in different branches of one ``if`` / ``match`` / ``try``
(a branch that ends in ``return`` or ``raise`` makes what follows it the other branch); one inside
a loop is a duplicate of itself. Computed names (f-strings), nested functions and bodies whose
source cannot be read are left to the run, which refuses a duplicate as it happens.
"""

from __future__ import annotations

import ast
import inspect
import textwrap
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any

from ultimat3.core import XError

STEP_METHODS = frozenset({"run", "transaction", "wait_for_event"})

Branch = tuple[int, int]
"""(which branching statement, which of its branches)."""


@dataclass(frozen=True, slots=True)
class NamedStep:
    name: str
    line: int
    path: tuple[Branch, ...]
    in_loop: bool


def _ends(body: Sequence[ast.stmt]) -> bool:
    return bool(body) and isinstance(body[-1], ast.Return | ast.Raise)


class _Reader:
    def __init__(self, step: str, first_line: int) -> None:
        self.step = step
        self.offset = first_line - 1
        self.found: list[NamedStep] = []
        self.ids = 0

    def block(self, body: Sequence[ast.stmt], path: tuple[Branch, ...], loop: bool) -> None:
        for stmt in body:
            path = self.stmt(stmt, path, loop)

    def stmt(self, node: ast.stmt, path: tuple[Branch, ...], loop: bool) -> tuple[Branch, ...]:
        """Reads ``node``; answers the path of the statements after it."""
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
            return path  # a nested function runs when (and as often as) it is called
        self.ids += 1
        me = self.ids
        if isinstance(node, ast.If):
            self.exprs([node.test], path, loop)
            self.block(node.body, (*path, (me, 0)), loop)
            self.block(node.orelse, (*path, (me, 1)), loop)
            if _ends(node.body) and not _ends(node.orelse):
                return (*path, (me, 1))
            if _ends(node.orelse) and not _ends(node.body):
                return (*path, (me, 0))
            return path
        if isinstance(node, ast.Match):
            self.exprs([node.subject], path, loop)
            for n, case in enumerate(node.cases):
                self.block(case.body, (*path, (me, n)), loop)
            return path
        if isinstance(node, ast.Try | ast.TryStar):
            self.block([*node.body, *node.orelse], (*path, (me, 0)), loop)
            for n, handler in enumerate(node.handlers, start=1):
                self.block(handler.body, (*path, (me, n)), loop)
            self.block(node.finalbody, path, loop)
            return path
        if isinstance(node, ast.For | ast.AsyncFor | ast.While):
            head = [node.iter] if isinstance(node, ast.For | ast.AsyncFor) else [node.test]
            self.exprs(head, path, loop)
            self.block(node.body, path, True)
            self.block(node.orelse, path, loop)
            return path
        if isinstance(node, ast.With | ast.AsyncWith):
            self.exprs([item.context_expr for item in node.items], path, loop)
            self.block(node.body, path, loop)
            return path
        self.exprs([node], path, loop)
        return path

    def exprs(self, nodes: Sequence[ast.AST], path: tuple[Branch, ...], loop: bool) -> None:
        for node in nodes:
            for sub, in_comp in _walk(node, False):
                if isinstance(sub, ast.Call):
                    self.call(sub, path, loop or in_comp)

    def call(self, node: ast.Call, path: tuple[Branch, ...], loop: bool) -> None:
        func = node.func
        if not (
            isinstance(func, ast.Attribute)
            and func.attr in STEP_METHODS
            and isinstance(func.value, ast.Name)
            and func.value.id == self.step
            and node.args
        ):
            return
        first = node.args[0]
        if isinstance(first, ast.Constant) and isinstance(first.value, str):
            self.found.append(NamedStep(first.value, node.lineno + self.offset, path, loop))


def _walk(node: ast.AST, in_comp: bool) -> Iterator[tuple[ast.AST, bool]]:
    """Every node under ``node`` (not into nested functions), and whether a comprehension or a
    lambda holds it."""
    yield node, in_comp
    for child in ast.iter_child_nodes(node):
        if isinstance(child, ast.FunctionDef | ast.AsyncFunctionDef | ast.Lambda):
            continue
        comp = in_comp or isinstance(node, ast.ListComp | ast.SetComp | ast.DictComp)
        comp = comp or isinstance(node, ast.GeneratorExp)
        yield from _walk(child, comp)


def _exclusive(a: NamedStep, b: NamedStep) -> bool:
    branches = dict(a.path)
    return any(s in branches and branches[s] != n for s, n in b.path)


def body_of(job: Any) -> Any:
    """The function a job was declared with (``run=``), unwrapped."""
    body = vars(job).get("_body")
    return None if body is None else inspect.unwrap(body)


def named_steps(fn: Any) -> list[NamedStep] | None:
    """The literal-named steps of ``fn``'s body, or ``None`` when its source cannot be read."""
    try:
        lines, first = inspect.getsourcelines(fn)
    except (OSError, TypeError):
        return None
    try:
        tree = ast.parse(textwrap.dedent("".join(lines)))
    except SyntaxError:
        return None  # a lambda inside a larger expression
    defs = [n for n in tree.body if isinstance(n, ast.FunctionDef | ast.AsyncFunctionDef)]
    if not defs:
        return None
    node = defs[0]
    params = [*node.args.posonlyargs, *node.args.args]
    if len(params) < 2:
        return []  # a body of (input) alone takes no step
    reader = _Reader(params[1].arg, first)
    reader.block(node.body, (), False)
    return reader.found


def duplicate_steps(job: Any) -> list[XError]:
    """``X_STEP_DUPLICATE`` for each literal step name ``job``'s body uses twice in one run."""
    fn = body_of(job)
    found = named_steps(fn) if fn is not None else None
    if not found:
        return []
    where = f"{inspect.getsourcefile(fn) or '?'}"
    out: list[XError] = []
    reported: set[str] = set()
    for i, a in enumerate(found):
        if a.name in reported:
            continue
        if a.in_loop:
            message = f"step {a.name!r} (line {a.line}) runs inside a loop under one name"
        else:
            twin = next(
                (b for b in found[i + 1 :] if b.name == a.name and not _exclusive(a, b)), None
            )
            if twin is None:
                continue
            message = f"step {a.name!r} is named twice (lines {a.line} and {twin.line})"
        reported.add(a.name)
        out.append(
            XError(
                "X_STEP_DUPLICATE",
                f"job {job.name!r}: {message} in {where}",
                fix="rename one step; step names are the persistence key (in a loop, name each "
                "one: f'sync:{row.id}')",
                meta={"job": job.name, "step": a.name, "line": a.line, "file": where},
            )
        )
    return out


__all__ = ["NamedStep", "body_of", "duplicate_steps", "named_steps"]
