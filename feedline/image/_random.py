"""Seeds of the random image operations, in tf.image's stateless style.

A random operation given the same seed makes the same draw, so a pipeline that zips its
images with ``Dataset.random(seed).batch(2)`` (or a counter) makes the same crops again after
a restore: the seed travels with the element and the operation keeps no state of its own.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

Seed = int | Sequence[int] | np.ndarray | np.random.Generator | None
"""An int, a pair of ints (tf.image's ``stateless_random_*`` seed, shape ``[2]``), a NumPy
generator to draw from, or ``None`` for fresh entropy (not reproducible)."""

_WORD = (1 << 64) - 1


def generator_for(seed: Seed) -> np.random.Generator:
    """The generator a random image operation draws from for ``seed``.

    Equal seeds give equal draws; a generator is used as it is (and advanced).

    Example:
        >>> a, b = generator_for((1, 2)), generator_for(np.array([1, 2]))
        >>> bool(a.integers(1 << 30) == b.integers(1 << 30))
        True
        >>> generator_for("x")
        Traceback (most recent call last):
        ...
        TypeError: a seed is an int, a pair of ints, a numpy Generator or None; got str 'x'
    """
    if isinstance(seed, np.random.Generator):
        return seed
    if seed is None:
        return np.random.default_rng()
    if isinstance(seed, (str, bytes, float)) or (
            isinstance(seed, np.ndarray) and seed.dtype.kind not in "iu"):
        raise TypeError("a seed is an int, a pair of ints, a numpy Generator or None; "
                        f"got {type(seed).__name__} {seed!r}")
    try:
        words = np.asarray(seed).reshape(-1)
    except (TypeError, ValueError) as error:
        raise TypeError("a seed is an int, a pair of ints, a numpy Generator or None; "
                        f"got {type(seed).__name__} {seed!r}") from error
    if words.dtype.kind not in "iu" or words.size not in (1, 2):
        raise TypeError("a seed is an int, a pair of ints, a numpy Generator or None; "
                        f"got {type(seed).__name__} {seed!r}")
    # Philox is counter-based: keying it with the seed words is cheap and mixes them fully.
    key = [int(word) & _WORD for word in words] + [0] * (2 - words.size)
    return np.random.Generator(np.random.Philox(key=np.array(key, dtype=np.uint64)))
