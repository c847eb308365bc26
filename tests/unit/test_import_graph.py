"""The layering of bot/, channels/ and store/: their imports form no circle, and the store
imports nothing above it (bot/, channels/).

Every import counts, as tests/unit/test_test_layout.py reads them: absolute and relative,
at the top, inside a function, and under TYPE_CHECKING (a type-only import is still a
dependency of the design). store/migrations/ is left out: Alembic loads its scripts by path,
never as modules of the package, and they import only the store's schema.
"""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PACKAGES = ("bot", "channels", "store")

# Every form of import, one per line (line 1 is blank), as module `pkg.sub.mod` sees them.
_SAMPLE = """
import pkg.a
from pkg import b
from pkg.c import thing
from . import d
from .e import other
from .. import f
if TYPE_CHECKING:
    from pkg.sub import g
def later():
    import pkg.h
import json
"""
_SAMPLE_MODULES = {f"pkg.{name}" for name in "abcfh"} | {"pkg", "pkg.sub", "pkg.sub.mod"}
_SAMPLE_MODULES |= {"pkg.sub.d", "pkg.sub.e", "pkg.sub.g"}


def modules() -> dict[str, Path]:
    """Every module of the packages, by dotted name (a package by its own name)."""
    found: dict[str, Path] = {}
    for package in PACKAGES:
        for path in (ROOT / package).rglob("*.py"):
            if "migrations" in path.parts or "__pycache__" in path.parts:
                continue
            parts = list(path.relative_to(ROOT).with_suffix("").parts)
            if parts[-1] == "__init__":
                parts = parts[:-1]
            found[".".join(parts)] = path
    return found


def imported(source: str, module: str, known: set[str], is_package: bool = False) -> set[str]:
    """The modules of `known` that `source`, the text of `module`, imports (the innermost
    known module each imported name falls in; `from x import y` counts x.y if it is one)."""
    package = module if is_package else module.rpartition(".")[0]
    names: list[str] = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            names += [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:  # relative: resolved against this module's package
                parts = package.split(".")
                parts = parts[: len(parts) - (node.level - 1)]
                base = ".".join([*parts, base] if base else parts)
            names += [base, *(f"{base}.{alias.name}" for alias in node.names)]
    found: set[str] = set()
    for name in names:
        while name and name not in known:
            name = name.rpartition(".")[0]
        if name and name != module:
            found.add(name)
    return found


def graph() -> dict[str, set[str]]:
    found = modules()
    known = set(found)
    return {
        name: imported(path.read_text("utf-8"), name, known, path.name == "__init__.py")
        for name, path in found.items()
    }


def circles(edges: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan's, iteratively)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []
    for root in sorted(edges):
        if root in index:
            continue
        work = [(root, iter(sorted(edges[root])))]
        index[root] = low[root] = len(index)
        stack.append(root)
        on_stack.add(root)
        while work:
            node, targets = work[-1]
            target = next(targets, None)
            if target is not None:
                if target not in index:
                    index[target] = low[target] = len(index)
                    stack.append(target)
                    on_stack.add(target)
                    work.append((target, iter(sorted(edges.get(target, ())))))
                elif target in on_stack:
                    low[node] = min(low[node], index[target])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                component = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component.append(member)
                    if member == node:
                        break
                if len(component) > 1:
                    found.append(sorted(component))
    return found


def test_the_walker_sees_every_form_of_import() -> None:
    seen = imported(_SAMPLE, "pkg.sub.mod", _SAMPLE_MODULES)
    assert seen == {"pkg", "pkg.a", "pkg.b", "pkg.c", "pkg.sub", "pkg.sub.d", "pkg.sub.e"} | {
        "pkg.f",
        "pkg.sub.g",
        "pkg.h",
    }, seen
    assert circles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]
    assert circles({"a": {"b"}, "b": set()}) == []


def test_bot_channels_and_store_import_in_no_circle() -> None:
    edges = graph()
    assert "bot.transitions" in edges and "store.repository" in edges  # the tree was read
    found = circles(edges)
    assert not found, "import circles:\n" + "\n".join(
        " <-> ".join(circle)
        + "\n"
        + "\n".join(f"    {m} -> {sorted(edges[m] & set(circle))}" for m in circle)
        for circle in found
    )


def test_the_store_imports_nothing_above_it() -> None:
    upward = sorted(
        f"{module} imports {target}"
        for module, targets in graph().items()
        if module.split(".")[0] == "store"
        for target in targets
        if target.split(".")[0] in ("bot", "channels")
    )
    assert not upward, "the store depends on nothing above it:\n" + "\n".join(upward)
