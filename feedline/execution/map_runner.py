"""Where a parallel ``map``'s calls run (inline, threads, processes) is placement's to decide,
a layer above the map: the stage asks :func:`map_runner` for its runner, and
:mod:`feedline.pipeline`, at the top of the layers, serves placement's factory
(:func:`feedline.placement.runner.map_runner`) when imported, as it serves the pipeline's
runner and tuners (``import feedline`` imports it). The stage sees the runner through
:class:`MapCallRunner` alone.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Protocol

from feedline.core.iterator import IteratorContext
from feedline.execution.executor import Executor
from feedline.execution.gate import WorkerGate
from feedline.execution.map_knobs import MapKnobs, MeasuredDecision, TuningCounters
from feedline.execution.window import PositionedWindow

MAX_FILL_SECONDS = 0.001
"""Longest a task's chunk for worker processes waits for its input: past it (or when the
input's measured time per element says it would be), the elements pulled go out as they
are. A chunk is sized from the function's time per call, for its work to outweigh its
hand-off; an input that gives elements slowly (a remote read, a generator, a stage upstream
that is behind) must not hold back the elements it gave already, nor leave the workers idle
while the consumer waits for more: with a slow input, chunks shrink to one element. Only
where chunks end changes: elements, errors and positions are the same."""


class ChunkSizing(Protocol):
    """How many elements the map's next task takes
    (:class:`feedline.placement.runner.ChunkSizer`)."""

    chunk_size: int

    def measured(self, elements: int, seconds: float, kind: str) -> None:
        """A task of ``elements`` took ``seconds`` on ``kind``."""

    def next_size(self, bounded: bool) -> int:
        """The next chunk's size; ``bounded``: shrunk for a slow input."""

    def pulled(self, elements: int, seconds: float) -> None:
        """A whole chunk of ``elements`` took ``seconds`` to pull."""


class MapCallRunner(Protocol):
    """What a parallel map stage asks of its runner
    (:class:`feedline.placement.runner.MapRunner`, which documents each member)."""

    knobs: MapKnobs
    gate: WorkerGate
    counters: TuningCounters
    sizer: ChunkSizing
    kind: str
    inline: bool
    busy_seconds: float

    @property
    def warming(self) -> bool: ...
    @property
    def decision(self) -> MeasuredDecision | None: ...
    def make_executor(self) -> Executor: ...
    def inline_now(self, window: PositionedWindow, holding: bool) -> bool: ...
    def may_submit(self, tasks_in_window: int) -> bool: ...
    def submit(self, window: PositionedWindow, items: list[int], values: list[Any]) -> None: ...
    def finished(self, items: list[int], result: Any) -> list[tuple[bool, Any]]: ...
    def called_inline(self, seconds: float) -> None: ...
    def restored(self) -> None: ...
    def release(self, window: PositionedWindow) -> None: ...


MakeMapRunner = Callable[..., MapCallRunner]
"""Called as ``make(ctx, fn, name, num_parallel_calls, executor, stage_key=node)``."""

_make: MakeMapRunner | None = None


def serve_map_runners(make: MakeMapRunner | None) -> MakeMapRunner | None:
    """Make ``make`` what :func:`map_runner` calls; return what it called before.

    Example:
        >>> before = serve_map_runners(lambda ctx, fn, name, calls, executor, stage_key: name)
        >>> map_runner(IteratorContext(), abs, "map(abs)", 2, None)
        'map(abs)'
        >>> _ = serve_map_runners(before)
    """
    global _make
    before, _make = _make, make
    return before


def map_runner(ctx: IteratorContext, fn: Callable[..., Any], name: str,
               num_parallel_calls: int, executor: str | None,
               stage_key: object = None) -> MapCallRunner:
    """The runner of a ``map(fn, num_parallel_calls, executor=executor)`` stage, made by the
    factory placement served (see :func:`feedline.placement.runner.map_runner`).

    Example:
        >>> import feedline as fl
        >>> map_runner(IteratorContext(), abs, "map(abs)", 2, "process").kind
        'process'
    """
    make = _make
    if make is None:
        # Only reachable when unserved on purpose: any import of feedline imports
        # feedline.placement.runner, which serves it.
        raise RuntimeError("no map runner is served: import feedline (or serve one with "
                           "feedline.execution.map_runner.serve_map_runners)")
    return make(ctx, fn, name, num_parallel_calls, executor, stage_key=stage_key)
