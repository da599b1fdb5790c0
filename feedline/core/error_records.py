"""Errors inside iterator states: a failure a stage had buffered is part of its checkpoint.

A prefetch buffer or an interleave slot may hold an error that the consumer has not reached
yet; tf.data raises it in its place after a restore, so feedline stores it too. States are
data that travel between machines and users: they must stay JSON-safe, and restoring one
must never import, look up or construct a class the state names. So an error is stored as
a plain record (its type's name, its message, its notes) and restored as a
:class:`RestoredError`. When the original type is, or derives from, one of a fixed list of
builtin and feedline exception types, the restored error is an instance of that type too,
so ``except ValueError`` (or ``ignore_errors()``) treats it as it treated the original.

An error may also be *fatal* (:func:`mark_fatal`): raised by a stage that cannot go on (its
worker processes cannot start, a worker keeps dying at the same element), not by one
element. ``ignore_errors()`` drops an element's error but re-raises a fatal one, so a
broken stream never looks like a normal end; the mark survives a checkpoint's record.

Example:
    >>> error = restore_error(error_record(KeyError("missing")))
    >>> isinstance(error, KeyError), isinstance(error, RestoredError), str(error)
    (True, True, "'missing'")
"""

from __future__ import annotations

from typing import Any

from feedline.core.errors import (
    CheckpointError,
    DataLossError,
    FeedlineError,
    InvalidArgumentError,
    OutOfRangeError,
    StopIterationError,
    StructureError,
)


class RestoredError(FeedlineError):
    """An error restored from a checkpoint, raised where the original would have been.

    ``str(error)`` is the original message; a note names the original type. Restored
    errors of allow-listed types are also instances of that type (see the module doc).

    Attributes:
        original_type: The original exception's ``module.QualifiedName``.
        message: The original ``str(error)``.
    """

    original_type: str = ""
    message: str = ""

    def __str__(self) -> str:
        # The original's text: KeyError and OSError would otherwise format the argument.
        return self.message


# Fixed in code, never extended from a state. Each gets a RestoredError subclass; an error
# whose type is not listed is restored as the closest listed base class in its MRO.
_RESTORABLE_TYPES: tuple[type[BaseException], ...] = (
    Exception, ArithmeticError, AssertionError, AttributeError, BufferError, EOFError,
    FloatingPointError, ImportError, IndexError, KeyError, LookupError, MemoryError,
    NameError, NotImplementedError, OSError, ConnectionError, FileExistsError,
    FileNotFoundError, InterruptedError, IsADirectoryError, NotADirectoryError,
    PermissionError, TimeoutError, OverflowError, RecursionError, RuntimeError,
    TypeError, UnicodeError, ValueError, ZeroDivisionError,
    FeedlineError, CheckpointError, DataLossError, OutOfRangeError, StopIterationError,
    StructureError, InvalidArgumentError,
)


def _restored_class(base: type[BaseException]) -> type[RestoredError]:
    if base is Exception or base is FeedlineError:
        return RestoredError
    return type(f"Restored{base.__name__}", (RestoredError, base), {
        "__module__": __name__,
        "__doc__": f"A restored error that was a {base.__name__} when it was raised.",
    })


_RESTORED: dict[str, type[RestoredError]] = {
    base.__name__: _restored_class(base) for base in _RESTORABLE_TYPES}
_BY_TYPE: dict[type[BaseException], str] = {base: base.__name__ for base in _RESTORABLE_TYPES}


_FATAL = "feedline_fatal"  # the instance attribute that marks an error as fatal


def mark_fatal(error: BaseException) -> BaseException:
    """Mark ``error`` as the end of its stream, and return it.

    Use it for an error that says the stage raising it cannot go on (not that one element
    failed): ``ignore_errors()`` re-raises such an error instead of dropping an element,
    and stages that buffer errors keep the mark (it is an attribute of the exception).

    Example:
        >>> is_fatal(mark_fatal(RuntimeError("the workers cannot start"))), is_fatal(KeyError())
        (True, False)
    """
    setattr(error, _FATAL, True)
    return error


def is_fatal(error: BaseException) -> bool:
    """Whether ``error`` was marked by :func:`mark_fatal` (the stream cannot go on).

    Example:
        >>> is_fatal(ValueError("one bad element"))
        False
    """
    return getattr(error, _FATAL, False) is True


def _qualified_name(cls: type) -> str:
    return f"{cls.__module__}.{cls.__qualname__}"


def error_record(error: BaseException) -> dict[str, Any]:
    """A JSON-safe record of ``error`` for a state; :func:`restore_error` raises it later.

    Args:
        error: The buffered error.

    Returns:
        ``{"type", "kind", "message", "notes"}``: the original type's name, the closest
        allow-listed type it derives from, ``str(error)`` and its notes; and
        ``"fatal": True`` for an error marked by :func:`mark_fatal`.
    """
    if isinstance(error, RestoredError):  # saved again: keep what it was originally
        original = error.original_type
    else:
        original = _qualified_name(type(error))
    kind = next((_BY_TYPE[cls] for cls in type(error).__mro__ if cls in _BY_TYPE), "Exception")
    record = {"type": original, "kind": kind, "message": str(error),
              "notes": [str(note) for note in getattr(error, "__notes__", ())]}
    if is_fatal(error):
        record["fatal"] = True
    return record


_RESTORED_NOTE = "feedline: restored from a checkpoint; raised originally as {}"


def restore_error(record: Any, note: str | None = None) -> RestoredError:
    """The error :func:`error_record` recorded, as a :class:`RestoredError`.

    Only the fixed classes of this module are ever built; the record's names are data.

    Args:
        record: From :func:`error_record`.
        note: Added last instead of "restored from a checkpoint" (used for errors that
            crossed from a worker process, which were not restored but moved).

    Raises:
        CheckpointError: ``record`` is not such a record.
    """
    if not isinstance(record, dict) or not all(
            isinstance(record.get(key), str) for key in ("type", "kind", "message")) \
            or not isinstance(record.get("notes", []), list):
        raise CheckpointError(f"damaged error record in a state: {record!r:.200}")
    cls = _RESTORED.get(record["kind"], RestoredError)
    error = cls(record["message"])
    error.original_type = record["type"]
    error.message = record["message"]
    restored_note = _RESTORED_NOTE.format(record["type"])
    for recorded in record.get("notes", []):
        if recorded != restored_note:
            error.add_note(str(recorded))
    error.add_note(restored_note if note is None else note)
    if record.get("fatal") is True:
        mark_fatal(error)
    return error
