"""The runner sits at the top of the layers: no module below it imports it at import time
(a function that runs a whole pipeline imports it inside, naming why)."""

from __future__ import annotations

import ast
from pathlib import Path

import feedline

PACKAGE = Path(feedline.__file__).parent
BELOW_THE_RUNNER = ("core", "sources", "transforms", "formats", "execution", "optimize",
                    "autotune", "placement", "snapshot", "distribute", "profiling")


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
