"""Calling user functions the way tf.data does, and reporting their failures."""

from __future__ import annotations

import types
from collections.abc import Callable, Mapping
from typing import Any, TypeVar

from feedline.core.errors import StopIterationError

_F = TypeVar("_F", bound=Callable[..., Any])

_LATE = "__feedline_late_bound__"


def late_bound(fn: _F) -> _F:
    """Mark ``fn`` to read the variables of its enclosing scope when it runs, not when the
    pipeline is built (see :func:`bind_free_variables`); returns ``fn``.

    Example:
        >>> import feedline as fl
        >>> def build(late):
        ...     step = 1
        ...     fn = lambda x: x + step
        ...     ds = fl.Dataset.range(2).map(fl.late_bound(fn) if late else fn)
        ...     step = 10
        ...     return [int(x) for x in ds]
        >>> build(late=False), build(late=True)
        ([1, 2], [10, 11])
    """
    try:
        setattr(fn, _LATE, True)
    except (AttributeError, TypeError):  # a builtin or a slotted object: it has no closure
        pass
    return fn


def bind_free_variables(fn: _F) -> _F:
    """``fn`` with the variables it reads from enclosing functions bound to their values now.

    tf.data traces a function when ``map()`` (``filter()``, ``flat_map()``, ...) is called,
    so the values it reads from its enclosing scope are those of that moment: the text
    tutorial's ``for i, f in enumerate(files): ds.map(lambda x: label(x, i))`` labels with
    0, 1, 2. A Python closure reads ``i`` when it runs, after the loop: 2 every time. So each
    such stage calls this: a copy of the function whose closure cells hold the current
    values. The variables are bound, not copied: a list the function reads is the same list
    (its contents are read when it runs), and module globals are read when it runs, as
    anywhere in Python. :func:`late_bound` keeps a function as it is.

    Example:
        >>> fns = [lambda: i for i in range(3)]  # each reads i when called: 2
        >>> [f() for f in fns], [bind_free_variables(f)() for f in fns]
        ([2, 2, 2], [2, 2, 2])
        >>> def make():
        ...     bound = []
        ...     for i in range(3):
        ...         bound.append(bind_free_variables(lambda: i))
        ...     return [f() for f in bound]
        >>> make()
        [0, 1, 2]
    """
    if type(fn) is not types.FunctionType or not fn.__closure__ or getattr(fn, _LATE, False):
        return fn
    cells = []
    for cell in fn.__closure__:
        try:
            cells.append(types.CellType(cell.cell_contents))
        except ValueError:  # not assigned yet (a function that refers to itself, say)
            cells.append(cell)
    bound = types.FunctionType(fn.__code__, fn.__globals__, fn.__name__, fn.__defaults__,
                               tuple(cells))
    bound.__kwdefaults__ = fn.__kwdefaults__
    bound.__qualname__ = fn.__qualname__
    bound.__module__ = fn.__module__
    bound.__doc__ = fn.__doc__
    bound.__dict__.update(fn.__dict__)
    bound.__wrapped__ = fn  # type: ignore[attr-defined]
    return bound  # type: ignore[return-value]


def call_with_element(fn: Callable[..., Any], element: Any) -> Any:
    """Call ``fn`` on an element: a plain tuple's components become positional arguments.

    Namedtuples and dicts are passed whole, as tf.data does.

    Example:
        >>> call_with_element(lambda a, b: a + b, (1, 2))
        3
    """
    return fn(*element) if type(element) is tuple else fn(element)


def function_name(fn: Callable[..., Any]) -> str:
    """A readable name for a user function (``<lambda>`` included)."""
    name = getattr(fn, "__qualname__", None) or getattr(fn, "__name__", None)
    return name or type(fn).__name__


def annotate_error(error: BaseException, stage: str, index: int | None = None) -> BaseException:
    """The exception to raise for ``error`` from a user function: ``error`` with a note naming
    the stage (and element index), or a :class:`StopIterationError` for a ``StopIteration``.

    The exception keeps its type and original traceback; the note shows under it. A
    ``StopIteration`` must not escape: every stage would take it for the end of its input
    and the dataset would end silently (tf.data raises an error there too). Always use the
    return value: ``raise annotate_error(error, stage, index)``.

    Example:
        >>> type(annotate_error(StopIteration(), "map(f)", 3)).__name__
        'StopIterationError'
    """
    where = f" at input element {index}" if index is not None else ""
    if isinstance(error, StopIteration):
        stopped = StopIterationError(
            f"{stage} raised StopIteration{where}: a function may not end the dataset "
            "(it would silently drop the rest of the data); return a value or raise "
            "another exception")
        stopped.__cause__ = error
        stopped.__traceback__ = error.__traceback__
        return stopped
    note = f"feedline: raised in {stage}{where}"
    notes = getattr(error, "__notes__", ())
    if note not in notes:
        error.add_note(note)
        if index is not None:
            # Where, as data: a worker process running a shard of the pipeline rewrites the
            # note with the pipeline's own index (feedline.placement.worker_loop).
            error.__dict__.setdefault(RAISED_AT, []).append((stage, index))
    return error


RAISED_AT = "_feedline_raised_at"
"""Attribute of an exception :func:`annotate_error` noted: its ``(stage, input element)``
pairs, in the order noted."""


def renumber_error(error: BaseException, index_of: Mapping[str, Callable[[int], int]],
                   whose: str) -> None:
    """Rewrite the notes :func:`annotate_error` put on ``error`` with the element indices
    ``index_of[stage]`` gives (a stage it lacks: left as it is), saying ``whose`` index the
    old one was.

    Example:
        >>> error = annotate_error(ValueError("bad"), "map(f)", 3)
        >>> renumber_error(error, {"map(f)": lambda index: 2 * index + 1}, "worker 1's shard")
        >>> error.__notes__
        ["feedline: raised in map(f) at input element 7 (element 3 of worker 1's shard)"]
    """
    notes = getattr(error, "__notes__", None)
    for stage, index in error.__dict__.get(RAISED_AT, ()):
        old = f"feedline: raised in {stage} at input element {index}"
        if stage not in index_of or notes is None or old not in notes:
            continue
        notes[notes.index(old)] = (f"feedline: raised in {stage} at input element "
                                   f"{index_of[stage](index)} (element {index} of {whose})")
