"""A parallel ``map``'s tasks: chunks of elements its function runs over on a worker.

A task is a chunk of input elements (sized by :class:`~feedline.placement.runner.MapRunner`);
a :class:`ChunkRunner` calls the function on each, in a thread or in a worker process, and
never raises: each element's outcome comes back in its place. From a worker process, the
results of a chunk that are arrays of one dtype and shape come back as one array
(:class:`StackedResults`).
"""

from __future__ import annotations

import dataclasses
import pickle
import time
import traceback
from collections.abc import Callable
from typing import Any

import numpy as np

from feedline.core.structure import normalize_output
from feedline.execution.calls import caller_of
from feedline.placement.map_executor import Probe, ProbeClock, transport_cost


class ChunkRunner:
    """Runs the map function over a chunk of elements on a worker; never raises.

    Each outcome is ``(True, result)`` or ``(False, exception)`` so one bad element does not
    cost the others. In a worker process the traceback would be lost in pickling, so it is
    attached to the exception as a note. While an ``AUTOTUNE`` stage chooses its executor,
    runners with ``probe`` measure each task (:mod:`feedline.placement.map_executor`),
    and with ``transport`` also what pickling its inputs and results costs.
    """

    def __init__(self, fn: Callable[..., Any], in_subprocess: bool, probe: bool = False,
                 transport: bool = False) -> None:
        self.fn = fn
        self.call = caller_of(fn)
        self.in_subprocess = in_subprocess
        self.probe = probe
        self.transport = transport

    def __call__(self, chunk: list[Any], submitted: float = 0.0
                 ) -> tuple[list[tuple[bool, Any]] | StackedResults, float, float, Probe | None]:
        """Outcomes, seconds the task took, CPU seconds of its thread meanwhile (calls that
        wait use little: the tuner gives those threads past the cores), and its probe."""
        clock = ProbeClock(submitted) if self.probe else None
        cpu = time.thread_time()
        started = time.perf_counter()
        outcomes: list[tuple[bool, Any]] = []
        fn, call = self.fn, self.call
        for element in chunk:
            try:
                outcomes.append((True, normalize_output(call(fn, element))))
            except Exception as error:  # noqa: BLE001 - raised on the consumer's thread
                if self.in_subprocess:
                    error.add_note("worker traceback:\n"
                                   + "".join(traceback.format_exception(error)))
                    error = _sendable(error)
                outcomes.append((False, error))
        seconds = time.perf_counter() - started
        cpu = time.thread_time() - cpu
        if clock is None:
            if self.in_subprocess:
                return pack_outcomes(outcomes), seconds, cpu, None
            return outcomes, seconds, cpu, None
        probe = clock.stop(len(chunk))
        if self.transport:  # off the clock: the call's own time is measured above
            # As a process would send them back (stacked where they can be), timed warm: a
            # first pickling of a type fills pickle's and NumPy's caches (~5x slower for a
            # 1-element chunk), which made the estimate of processes flip from run to run.
            results = pack_outcomes([outcome for outcome in outcomes if outcome[0]])
            transport_cost(chunk, results)
            cost, payload = transport_cost(chunk, results)
            probe = dataclasses.replace(probe, transport=cost, payload=payload)
        return outcomes, seconds, cpu, probe

    def split_call(self, chunk: list[Any], submitted: float = 0.0) -> list[tuple[Any, ...]]:
        """A process executor whose worker died running this chunk runs it again one
        element per call, so only the element that kills its worker fails."""
        return [([element],) for element in chunk] if len(chunk) > 1 else []

    def combine_call(self, parts: list[tuple[bool, Any]]
                     ) -> tuple[list[tuple[bool, Any]], float, float, Probe | None]:
        """The chunk's result (as ``__call__`` returns it) from its one-element calls' (a
        death is its element's error)."""
        outcomes: list[tuple[bool, Any]] = []
        seconds = cpu = 0.0
        for ok, value in parts:
            if ok:
                outcomes.extend(unpack_outcomes(value[0]))
                seconds += value[1]
                cpu += value[2]
            else:
                outcomes.append((False, value))
        return outcomes, seconds, cpu, None


class StackedResults:
    """A chunk's results sent back from a worker process as one array: every element's
    result was an array of one dtype and shape (a tokenizer's ids, an image), stacked.

    Pickling a NumPy array costs a few microseconds whatever its size: a chunk of 60
    results of 256 bytes took ~270 us to pickle in the worker and ~150 us to unpickle on the
    collector thread, against ~10 us for the one array. :func:`unpack_outcomes` gives the
    results back as the rows of that array (views: they share its memory, as a chunk's
    results shared one transport buffer already), with the dtype, shape and values the
    function returned.

    Example:
        >>> packed = pack_outcomes([(True, np.arange(3)), (True, np.arange(3) + 3)])
        >>> [row.tolist() for _, row in unpack_outcomes(packed)]
        [[0, 1, 2], [3, 4, 5]]
    """

    __slots__ = ("array",)

    def __init__(self, array: np.ndarray) -> None:
        self.array = array

    def __reduce__(self) -> tuple[Any, ...]:
        return StackedResults, (self.array,)


def pack_outcomes(outcomes: list[tuple[bool, Any]]) -> list[tuple[bool, Any]] | StackedResults:
    """``outcomes`` as one :class:`StackedResults` when they are two or more results, each a
    C-contiguous array (no subclass, no Python objects) of one dtype and shape; else as
    they are."""
    if len(outcomes) < 2:
        return outcomes
    ok, first = outcomes[0]
    if not ok or type(first) is not np.ndarray or first.dtype.hasobject or not first.ndim \
            or not first.flags.c_contiguous:
        return outcomes
    dtype, shape = first.dtype, first.shape
    values = []
    for ok, value in outcomes:
        if not ok or type(value) is not np.ndarray or value.dtype != dtype \
                or value.shape != shape or not value.flags.c_contiguous:
            return outcomes
        values.append(value)
    return StackedResults(np.stack(values))


def unpack_outcomes(outcomes: list[tuple[bool, Any]] | StackedResults
                    ) -> list[tuple[bool, Any]]:
    """A chunk's ``(ok, result or error)`` pairs, from what its runner returned.

    Example:
        >>> unpack_outcomes([(True, 1)])
        [(True, 1)]
    """
    if type(outcomes) is StackedResults:
        return [(True, row) for row in outcomes.array]
    return outcomes  # type: ignore[return-value]


def _sendable(error: Exception) -> Exception:
    """``error``, or a ``RuntimeError`` with its text if it does not pickle: one
    unpicklable exception must not cost the other elements of its chunk their results."""
    try:
        pickle.dumps(error, protocol=5)
    except Exception as failure:  # noqa: BLE001 - whatever pickling raises
        replacement = RuntimeError(
            f"{type(error).__name__}: {error} (the exception raised in a worker process "
            f"cannot be sent back: {type(failure).__name__}: {failure})")
        for note in getattr(error, "__notes__", ()):
            replacement.add_note(note)
        return replacement
    return error

