"""How the layers below the runner run a whole pipeline (iterate a dataset, infer a spec,
write records): through :func:`run`, which starts the runner served here
(:class:`feedline.pipeline.PipelineIterator` serves itself when imported, and ``import
feedline`` imports it), so that no module below the runner imports it."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Protocol, Self

from feedline.core.graph import Node


class RunningPipeline(Protocol):
    """What running a pipeline gives (:class:`feedline.pipeline.PipelineIterator`, which
    documents each member): the layers below the runner name it so, for they cannot import
    the runner (it imports them)."""

    def __iter__(self) -> Self: ...
    def __next__(self) -> Any: ...
    def __enter__(self) -> Self: ...
    def __exit__(self, *exc_info: object) -> None: ...
    def process_decision(self) -> Any: ...
    def statistics(self) -> Any: ...
    def state_dict(self) -> dict[str, Any]: ...
    def rewound_state_dict(self, count: int) -> dict[str, Any] | None: ...
    def load_state_dict(self, state: dict[str, Any]) -> None: ...
    def close(self) -> None: ...


Runner = Callable[..., RunningPipeline]
"""Called as ``runner(dataset, epoch=..., continue_epochs=...)``."""

_runner: Runner | None = None


def serve_runner(runner: Runner | None) -> Runner | None:
    """Make ``runner`` what :func:`run` starts; return what it started before.

    Example:
        >>> import feedline as fl
        >>> before = serve_runner(lambda dataset, **how: iter(["ran", how["epoch"]]))
        >>> list(run(fl.Dataset.range(3), epoch=2))
        ['ran', 2]
        >>> _ = serve_runner(before)
    """
    global _runner
    before, _runner = _runner, runner
    return before


def run(dataset: Node, *, epoch: int = 0, continue_epochs: bool = False
        ) -> RunningPipeline:
    """Start running ``dataset``: the pipeline's iterator (see ``PipelineIterator`` for the
    arguments).

    Example:
        >>> import feedline as fl
        >>> with run(fl.Dataset.range(3)) as iterator:
        ...     [int(x) for x in iterator]
        [0, 1, 2]
    """
    runner = _runner
    if runner is None:
        # Only reachable when a runner was unserved on purpose: any import of feedline
        # imports feedline.pipeline, which serves PipelineIterator.
        raise RuntimeError("no pipeline runner is served: import feedline (or serve one "
                           "with feedline.core.runner.serve_runner)")
    return runner(dataset, epoch=epoch, continue_epochs=continue_epochs)
