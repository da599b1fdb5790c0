"""Calling user functions the way tf.data does, and reporting their failures."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from feedline.core.errors import StopIterationError


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
    return error
