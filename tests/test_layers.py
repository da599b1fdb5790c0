"""The layers of feedline, lowest first; no module imports from a layer above its own, at
import time or inside a function (``if TYPE_CHECKING:`` blocks left out: they run nothing).

    core < execution, profiling < formats, image < sources, transforms, snapshot
         < distribute < optimize < placement < autotune < pipeline (the runner)
         < the rest (feedline/__init__, adapters, service, datasets, cli, testing, demo)

A module may import its own layer and any below. No arrow runs up (issue 40 removed the last:
operations attach themselves to ``Dataset`` through ``core.registry``, a stage's knobs live in
``execution`` and ``feedline.pipeline`` serves placement's map runner). Should one have to, for
a while, it goes in ``ALLOWED`` with why and what removes it; an entry whose import is gone
must leave the list (the test says so), so the list only shrinks.
"""

from __future__ import annotations

import ast
import functools
import sys
from pathlib import Path

import feedline

PACKAGE = Path(feedline.__file__).parent
LAYERS: tuple[tuple[str, ...], ...] = (
    ("feedline.core",),
    ("feedline.execution", "feedline.profiling"),
    ("feedline.formats", "feedline.image"),
    ("feedline.sources", "feedline.transforms", "feedline.snapshot"),
    ("feedline.distribute",),
    ("feedline.optimize",),
    ("feedline.placement",),
    ("feedline.autotune",),
    ("feedline.pipeline",),
)
"""Lowest first; a module in none of them (the package root, adapters, service, datasets,
cli, testing, demo) is above them all."""

BELOW_THE_RUNNER = ("core", "sources", "transforms", "formats", "execution", "optimize",
                    "autotune", "placement", "snapshot", "distribute", "profiling")

ALLOWED: dict[tuple[str, str], str] = {}


def _module_name(path: Path) -> str:
    parts = list(path.relative_to(PACKAGE.parent).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


MODULES = {_module_name(path): path for path in PACKAGE.rglob("*.py")}


def _is_extension(name: str) -> bool:
    """Whether ``name`` is one of feedline's C extensions (built from a ``.c`` beside it): a
    leaf that imports nothing back, not the package that holds it."""
    folder, _, stem = name.rpartition(".")
    return (PACKAGE.parent.joinpath(*folder.split(".")) / f"{stem}.c").exists()


def _imported(module: str, path: Path, type_checking: bool = False) -> dict[str, int]:
    """The feedline modules ``module`` imports anywhere (``if TYPE_CHECKING:`` left out unless
    ``type_checking``), with the line of the first import of each."""
    found: dict[str, int] = {}
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]

    def add(name: str, line: int) -> None:
        if _is_extension(name):
            return
        while name and name not in MODULES:  # ``from m import function`` names m
            name = name.rpartition(".")[0]
        if name and name != module:
            found.setdefault(name, line)

    def visit(node: ast.AST) -> None:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, ast.If) and "TYPE_CHECKING" in ast.unparse(child.test):
                for statement in (child.body + child.orelse if type_checking else child.orelse):
                    visit_one(statement)
                continue
            visit_one(child)

    def visit_one(node: ast.AST) -> None:
        if isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name.startswith("feedline"):
                    add(alias.name, node.lineno)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")[:len(package.split(".")) - (node.level - 1)]
                source = ".".join(base + ([node.module] if node.module else []))
            else:
                source = node.module or ""
            if source.startswith("feedline"):
                for alias in node.names:
                    add(f"{source}.{alias.name}", node.lineno)
        visit(node)

    visit(ast.parse(path.read_text()))
    return found


def _layer(module: str) -> int:
    for number, prefixes in enumerate(LAYERS):
        if any(module == p or module.startswith(p + ".") for p in prefixes):
            return number
    return len(LAYERS)


@functools.cache
def _upward_imports() -> dict[tuple[str, str], str]:
    return {(module, target): f"{path.relative_to(PACKAGE.parent)}:{line}"
            for module, path in MODULES.items()
            for target, line in _imported(module, path).items()
            if _layer(target) > _layer(module)}


def import_circles(type_checking: bool = False) -> list[list[str]]:
    """The modules that import one another in a circle, directly or through others (the
    strongly connected components of the import graph, largest first; imports inside
    functions count, ``if TYPE_CHECKING:`` ones only with ``type_checking``)."""
    graph = {module: set(_imported(module, path, type_checking))
             for module, path in MODULES.items()}
    order: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    circles: list[list[str]] = []
    for start in graph:
        if start in order:
            continue
        # Tarjan's algorithm, with an explicit stack of (module, its remaining imports).
        work = [(start, iter(graph[start]))]
        order[start] = low[start] = len(order)
        stack.append(start)
        while work:
            module, targets = work[-1]
            target = next(targets, None)
            if target is not None:
                if target not in order:
                    order[target] = low[target] = len(order)
                    stack.append(target)
                    work.append((target, iter(graph.get(target, ()))))
                elif target in stack:
                    low[module] = min(low[module], order[target])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[module])
            if low[module] == order[module]:
                circle = []
                while True:
                    member = stack.pop()
                    circle.append(member)
                    if member == module:
                        break
                if len(circle) > 1:
                    circles.append(sorted(circle))
    return sorted(circles, key=len, reverse=True)


def test_no_module_imports_from_a_layer_above_its_own():
    upward = _upward_imports()
    unlisted = sorted(f"{where}: {module} -> {target}"
                      for (module, target), where in upward.items()
                      if (module, target) not in ALLOWED)
    assert unlisted == []


def test_every_allowed_upward_import_still_exists():
    gone = sorted(f"{module} -> {target}" for module, target in ALLOWED
                  if (module, target) not in _upward_imports())
    assert gone == [], "these imports are gone: take them off ALLOWED"


def test_the_import_walk_sees_imports_inside_functions_and_not_type_checking_blocks():
    imported = _imported("feedline.pipeline", MODULES["feedline.pipeline"])
    assert "feedline.autotune.tuner" in imported  # inside _make_tuner
    assert "feedline.core.dataset" not in imported  # under TYPE_CHECKING only


def test_no_modules_import_one_another_in_a_circle():
    # Annotations count too: a reader follows them as it follows imports (issue 40 took
    # apart the 52-module circle the fluent API, the knobs and the annotations had made).
    assert import_circles(type_checking=True) == []


def test_the_circle_walk_sees_a_circle_that_only_annotations_close(tmp_path, monkeypatch):
    first, second = tmp_path / "first.py", tmp_path / "second.py"
    first.write_text("from feedline.second import B\n")
    second.write_text("from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n"
                      "    from feedline.first import A\n")
    monkeypatch.setattr(sys.modules[__name__], "MODULES",
                        {"feedline.first": first, "feedline.second": second})
    assert import_circles() == []
    assert import_circles(type_checking=True) == [["feedline.first", "feedline.second"]]


def _module_level_imports(path: Path) -> set[str]:
    """Modules imported when ``path`` is imported (``if TYPE_CHECKING:`` blocks left out)."""
    names: set[str] = set()
    for node in ast.parse(path.read_text()).body:
        if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test):
            continue
        for inner in ast.walk(node) if isinstance(node, ast.If | ast.Try) else [node]:
            if isinstance(inner, ast.ImportFrom) and inner.module:
                names.add(inner.module)
            elif isinstance(inner, ast.Import):
                names.update(alias.name for alias in inner.names)
    return names


def test_no_layer_below_the_runner_imports_it_at_import_time():
    offenders = [str(path.relative_to(PACKAGE))
                 for layer in BELOW_THE_RUNNER for path in (PACKAGE / layer).rglob("*.py")
                 if "feedline.pipeline" in _module_level_imports(path)]
    assert offenders == []


def test_the_runner_is_not_in_the_iterator_protocols_module():
    import feedline.core.iterator as protocol

    assert not hasattr(protocol, "PipelineIterator")
    assert feedline.PipelineIterator.__module__ == "feedline.pipeline"


if __name__ == "__main__":
    # python tests/test_layers.py: the import circles, largest first (annotations counted).
    for circle in import_circles(type_checking=True):
        print(len(circle), " ".join(circle))
