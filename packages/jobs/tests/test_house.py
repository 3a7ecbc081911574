"""The house's rules that import-linter does not see: no import cycle among the imports that run
(function-local ones included), and the old import paths answering. (Which room may import which
is import-linter's: the contracts in the root pyproject.toml, run by .ci/run.)"""

from __future__ import annotations

import ast
from pathlib import Path

SRC = Path(__file__).resolve().parents[1] / "src"
PACKAGE = "ultimat3.jobs"


def _modules() -> dict[str, Path]:
    found: dict[str, Path] = {}
    for path in (SRC / "ultimat3" / "jobs").rglob("*.py"):
        parts = list(path.relative_to(SRC).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts = parts[:-1]
        found[".".join(parts)] = path
    return found


def _runtime_imports(path: Path, modules: dict[str, Path], me: str) -> set[str]:
    """Every ``ultimat3.jobs`` module ``path`` imports where it runs: top level and inside
    functions alike; only ``if TYPE_CHECKING:`` blocks (which never run) are left out."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    typing_only: set[int] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test):
            typing_only.update(id(sub) for sub in ast.walk(node))
    package = me if path.name == "__init__.py" else me.rpartition(".")[0]
    out: set[str] = set()
    for node in ast.walk(tree):
        if id(node) in typing_only:
            continue
        names: list[str] = []
        if isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                parent = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join([*parent, base] if base else parent)
            names = [f"{base}.{a.name}" for a in node.names]
        elif isinstance(node, ast.Import):
            names = [a.name for a in node.names]
        for name in names:
            while name and name not in modules:
                name = name.rpartition(".")[0]
            if name and name != me and name.startswith(PACKAGE):
                out.add(name)
    return out


def _cycles(edges: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components of more than one module (Tarjan, iteratively)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []
    counter = 0
    for root in sorted(edges):
        if root in index:
            continue
        work: list[tuple[str, list[str]]] = [(root, sorted(edges[root]))]
        index[root] = low[root] = counter
        counter += 1
        stack.append(root)
        on_stack.add(root)
        while work:
            node, todo = work[-1]
            if todo:
                nxt = todo.pop()
                if nxt not in index:
                    index[nxt] = low[nxt] = counter
                    counter += 1
                    stack.append(nxt)
                    on_stack.add(nxt)
                    work.append((nxt, sorted(edges.get(nxt, ()))))
                elif nxt in on_stack:
                    low[node] = min(low[node], index[nxt])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                component: list[str] = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component.append(member)
                    if member == node:
                        break
                if len(component) > 1:
                    found.append(sorted(component))
    return found


def test_no_import_cycle_counting_function_local_imports() -> None:
    modules = _modules()
    edges = {m: _runtime_imports(p, modules, m) for m, p in modules.items()}
    assert sum(len(e) for e in edges.values()) > 100, "the walk found the package's imports"
    assert _cycles(edges) == []


def test_the_cycle_finder_finds_a_cycle() -> None:
    """The finder itself can fail: a two-module and a three-module loop are both reported."""
    edges = {"a": {"b"}, "b": {"a"}, "c": {"d"}, "d": {"e"}, "e": {"c"}, "f": {"a"}}
    assert sorted(_cycles(edges)) == [["a", "b"], ["c", "d", "e"]]


def test_the_old_memory_paths_answer_lazily() -> None:
    from ultimat3.jobs.adapter import MemoryJobDriver, memory_job_driver
    from ultimat3.jobs.drivers.memory import memory_job_driver as old
    from ultimat3.jobs.drivers.memory_outbox import memory_outbox_store
    from ultimat3.jobs.memory import memory_job_driver as new
    from ultimat3.jobs.memory import memory_outbox_store as new_store

    assert memory_job_driver is old is new
    assert memory_outbox_store is new_store
    assert isinstance(memory_job_driver(), MemoryJobDriver)
