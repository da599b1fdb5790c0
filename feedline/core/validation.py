"""Shared validators for the integer arguments of every operation, and CPU counts.

tf.data takes its counts and sizes as int64 tensors, so everyday code passes NumPy values:
``Dataset.range(3).flat_map(lambda n: Dataset.from_tensors(x).repeat(n))`` hands ``repeat`` an
``np.int64``. Every integer argument therefore goes through :func:`as_int`, which accepts
Python ints, NumPy integer scalars and 0-d integer arrays (anything with ``__index__``) and
returns a plain Python ``int``: nodes store that, so states and fingerprints stay JSON-safe.
Bools and floats are a ``TypeError`` naming the argument (``True`` is not a count, and a
float count is almost always a bug); a value out of range is a ``ValueError``.
"""

from __future__ import annotations

import operator
import os
from typing import Any, Protocol

import numpy as np

from feedline.core.constants import AUTOTUNE

__all__ = [
    "as_int",
    "resolve_parallelism",
    "schedulable_cpus",
    "validate_count",
    "validate_int",
    "validate_optional_int",
    "validate_parallelism",
    "validate_seed",
]


def _shown(value: Any) -> str:
    text = repr(value)
    if len(text) > 60:
        text = text[:57] + "..."
    return f"{text} ({type(value).__name__})"


def as_int(value: Any, what: str) -> int:
    """``value`` as a plain Python ``int``; ``TypeError`` naming ``what`` if it is not an integer.

    Accepts ``int``, NumPy integer scalars, 0-d integer arrays and other integer scalars
    that implement ``__index__`` (a 0-d PyTorch or JAX integer tensor, for instance).
    Rejects ``bool`` (and ``np.bool_``), floats, strings and arrays with more than one value.

    Args:
        value: The argument as the user gave it.
        what: The argument's name as the user wrote it, e.g. ``"take(count)"``.

    Returns:
        The value as an ``int`` (never a NumPy type).

    Example:
        >>> import numpy as np
        >>> as_int(np.int32(4), "batch(batch_size)"), as_int(np.array(-1), "take(count)")
        (4, -1)
        >>> as_int(2.0, "batch(batch_size)")
        Traceback (most recent call last):
        ...
        TypeError: batch(batch_size) must be an integer (int, NumPy integer or 0-d integer array), got 2.0 (float)
    """
    if type(value) is int:  # the common case: one type check
        return value
    if isinstance(value, bool | np.bool_) or (
            isinstance(value, np.ndarray) and value.dtype.kind == "b"):
        raise TypeError(f"{what} must be an integer, not a bool: got {_shown(value)}")
    try:
        return operator.index(value)
    except TypeError:
        raise TypeError(f"{what} must be an integer (int, NumPy integer or 0-d integer array), "
                        f"got {_shown(value)}") from None


def validate_int(value: Any, what: str, *, minimum: int | None = None,
                 special: tuple[int, ...] = (), hint: str = "") -> int:
    """``value`` as an ``int`` that is ``>= minimum`` or one of ``special``.

    Args:
        value: The argument as the user gave it.
        what: The argument's name as the user wrote it, e.g. ``"batch(batch_size)"``.
        minimum: Smallest allowed value; ``None`` for no bound.
        special: Values allowed below ``minimum`` (such as ``AUTOTUNE``).
        hint: Text after "must be" in the error; built from ``minimum`` when empty.

    Raises:
        TypeError: ``value`` is not an integer.
        ValueError: ``value`` is out of range.

    Example:
        >>> import numpy as np
        >>> validate_int(np.int64(3), "batch(batch_size)", minimum=1)
        3
        >>> validate_int(0, "batch(batch_size)", minimum=1)
        Traceback (most recent call last):
        ...
        ValueError: batch(batch_size) must be >= 1, got 0
    """
    n = as_int(value, what)
    if minimum is not None and n < minimum and n not in special:
        raise ValueError(f"{what} must be {hint or f'>= {minimum}'}, got {n}")
    return n


def validate_optional_int(value: Any, what: str, *, minimum: int | None = None,
                          special: tuple[int, ...] = (), hint: str = "") -> int | None:
    """Like :func:`validate_int`, but ``None`` passes through as ``None``.

    Example:
        >>> validate_optional_int(None, "window(shift)", minimum=1) is None
        True
    """
    if value is None:
        return None
    return validate_int(value, what, minimum=minimum, special=special, hint=hint)


def validate_count(value: Any, what: str) -> int:
    """A ``take``/``skip``/``repeat`` count: any negative value means "all" and becomes -1.

    tf.data's kernels test ``count < 0``, so ``take(-2)`` takes everything, ``skip(-2)``
    skips everything and ``repeat(-2)`` repeats forever, exactly like -1. Storing -1 keeps
    the node's cardinality and fingerprint the same for every spelling of "all".

    Example:
        >>> import numpy as np
        >>> validate_count(np.int64(3), "take(count)"), validate_count(-7, "skip(count)")
        (3, -1)
    """
    n = as_int(value, what)
    return -1 if n < 0 else n


def validate_seed(seed: Any, what: str) -> int | None:
    """A seed as an ``int``, or ``None`` (meaning: draw one).

    Raises ``TypeError`` naming ``what`` for anything else, bools and floats included.

    Example:
        >>> import numpy as np
        >>> validate_seed(np.uint32(7), "shuffle(seed)"), validate_seed(None, "shuffle(seed)")
        (7, None)
    """
    if seed is None:
        return None
    try:
        return as_int(seed, what)
    except TypeError:
        raise TypeError(f"{what} must be an int or None, got {_shown(seed)}") from None


def validate_parallelism(value: Any, what: str) -> int | None:
    """``num_parallel_calls``-like arguments: ``None``, ``AUTOTUNE`` or a positive int.

    Returns:
        ``None``, :data:`~feedline.core.constants.AUTOTUNE` or the count as an ``int``.

    Raises:
        TypeError: ``value`` is not an integer (bools and floats included).
        ValueError: ``value`` is 0 or negative other than ``AUTOTUNE``.

    Example:
        >>> import numpy as np
        >>> validate_parallelism(np.int64(4), "map(num_parallel_calls)")
        4
        >>> validate_parallelism(0, "map(num_parallel_calls)")
        Traceback (most recent call last):
        ...
        ValueError: map(num_parallel_calls) must be None, AUTOTUNE or a positive int, got 0
    """
    if value is None:
        return None
    return validate_int(value, what, minimum=1, special=(AUTOTUNE,),
                        hint="None, AUTOTUNE or a positive int")


class _Budget(Protocol):
    def autotune_parallelism(self) -> int: ...


class _WithBudget(Protocol):
    """What :func:`resolve_parallelism` reads of an ``IteratorContext``: its options (this
    module is below ``core.iterator`` and ``core.options``, which import it)."""

    @property
    def options(self) -> _Budget: ...


def resolve_parallelism(value: int, ctx: _WithBudget) -> int:
    """Threads for a parallel stage: the given count, or the pipeline's budget for AUTOTUNE."""
    return ctx.options.autotune_parallelism() if value == AUTOTUNE else value


def schedulable_cpus() -> int:
    """CPUs this process may run on (tf.data's ``port::MaxParallelism``).

    Honours CPU affinity (``taskset``, container CPU sets) where the platform reports it,
    which ``os.cpu_count()`` does not.

    Example:
        >>> schedulable_cpus() >= 1
        True
    """
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except (AttributeError, OSError):  # not every platform has affinity
        return os.cpu_count() or 1
