"""Exceptions raised by feedline pipelines."""

from __future__ import annotations


class FeedlineError(Exception):
    """Base class of every error feedline raises on its own behalf."""


class DataLossError(FeedlineError, IOError):
    """Stored data is damaged: a bad checksum, a truncated record, an unreadable block.

    Attributes:
        path: The file the damage was found in.
        offset: Byte offset of the damaged record within the (decompressed) file.
        record_index: Index of the damaged record within the file.
    """

    def __init__(self, message: str, *, path: str | None = None, offset: int | None = None,
                 record_index: int | None = None) -> None:
        super().__init__(message)
        self.path = path
        self.offset = offset
        self.record_index = record_index


class InvalidArgumentError(FeedlineError, ValueError):
    """A value an operation was given, or met while running, is invalid for it: tf.data's
    ``tf.errors.InvalidArgumentError``.

    tf.data raises this category for elements that do not fit an operation (batching
    elements of different shapes), a user function that raised ``StopIteration``, a pattern
    that matched no file, or a fixed-length record file whose size is not ``header + k *
    record + footer``. It is a ``ValueError``, so code that catches ``ValueError`` for bad
    input catches it too.

    Attributes:
        path: The file the error is about, if any.
        offset: Byte offset in that file where the problem was found, if known.
        record_index: Index of the record concerned in that file, if known.

    Example:
        >>> error = InvalidArgumentError("No files matched pattern: data/*.csv")
        >>> isinstance(error, ValueError), error.path
        (True, None)
    """

    def __init__(self, message: str, *, path: str | None = None, offset: int | None = None,
                 record_index: int | None = None) -> None:
        super().__init__(message)
        self.path = path
        self.offset = offset
        self.record_index = record_index


class StructureError(InvalidArgumentError):
    """Two elements, or an element and a spec, do not have the same nested structure or shape.

    An :class:`InvalidArgumentError`, as tf.data's "Cannot batch tensors with different
    shapes" is.
    """


class CheckpointError(FeedlineError, ValueError):
    """An iterator state cannot be saved or restored (wrong pipeline, wrong version, unrestorable source)."""


class OutOfRangeError(FeedlineError, IndexError):
    """A reduction or lookup needed an element the dataset does not have."""


class StopIterationError(InvalidArgumentError, RuntimeError):
    """A user function (of ``map``, ``filter``, ``scan``, ``flat_map``, ...) raised
    ``StopIteration``.

    Left alone it would look like the end of the data and silently shorten the dataset;
    tf.data raises ``InvalidArgumentError`` ("Function invocation produced OutOfRangeError"),
    and this is one (so a ``ValueError``). It stays a ``RuntimeError`` too, as Python makes
    a ``StopIteration`` that escapes a generator (PEP 479). The original ``StopIteration``
    is the ``__cause__``.
    """


class WorkerProcessError(FeedlineError, RuntimeError):
    """A worker process of a ``multiprocess()`` stage died (killed, crashed, out of memory)
    or could not run its shard of the pipeline.

    Errors of the pipeline itself (a failing user function, a corrupt record) are not this
    error: they are raised as themselves, in their place, with the worker's traceback as a
    note.

    Attributes:
        worker: Index of the worker process.
        exitcode: Its exit code (negative: killed by that signal), ``None`` if it is alive.
    """

    def __init__(self, message: str, *, worker: int | None = None,
                 exitcode: int | None = None) -> None:
        super().__init__(message)
        self.worker = worker
        self.exitcode = exitcode


class ServiceError(FeedlineError, RuntimeError):
    """The distributed service (:mod:`feedline.service`) cannot go on: its cluster is gone,
    a worker cannot run the pipeline at all, or a job's state is not what a client expects.

    Errors of the pipeline itself (a failing user function, a corrupt record) are not this
    error: they are raised as themselves, in their place, with the worker's traceback as a
    note. A worker that dies is not either: its work is redone elsewhere.
    """
