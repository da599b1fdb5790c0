"""TensorFlow's stateless random numbers (Philox4x32-10), bit for bit, in NumPy.

``tf.random.stateless_uniform`` on a CPU scrambles its ``[2]`` seed into a Philox key and
counter (``StatelessRandomGetKeyCounter``), then draws blocks of four 32-bit words, one block
per counter value. tf.image's ``stateless_random_*`` operations draw from it, so the same
seed gives the same flips, factors and crops as TensorFlow.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from feedline.core.errors import InvalidArgumentError

_M0, _M1 = np.uint64(0xD2511F53), np.uint64(0xCD9E8D57)
_W0, _W1 = 0x9E3779B9, 0xBB67AE85
_LOW = np.uint64(0xFFFFFFFF)
_SHIFT = np.uint64(32)
_MASK32 = 0xFFFFFFFF


def _blocks(key: tuple[int, int], counter: tuple[int, int, int, int],
            count: int) -> np.ndarray:
    """``count`` Philox4x32-10 blocks from ``counter`` on: uint32 ``[count, 4]``."""
    start = counter[0] | counter[1] << 32 | counter[2] << 64 | counter[3] << 96
    values = [(start + i) & ((1 << 128) - 1) for i in range(count)]
    c = [np.array([(v >> (32 * w)) & _MASK32 for v in values], np.uint64) for w in range(4)]
    k0, k1 = key
    for round_ in range(10):
        p0 = _M0 * c[0]
        p1 = _M1 * c[2]
        lo0, hi0 = p0 & _LOW, p0 >> _SHIFT
        lo1, hi1 = p1 & _LOW, p1 >> _SHIFT
        c = [hi1 ^ c[1] ^ np.uint64(k0), lo1, hi0 ^ c[3] ^ np.uint64(k1), lo0]
        if round_ < 9:
            k0, k1 = (k0 + _W0) & _MASK32, (k1 + _W1) & _MASK32
    return np.stack(c, axis=1).astype(np.uint32)


def philox_words(key: tuple[int, int], counter: int, count: int) -> list[int]:
    """``count`` 32-bit words (a multiple of 4) of the stream at the 128-bit ``counter``.

    Example:
        >>> len(philox_words((1, 2), 0, 8))
        8
    """
    words = (counter & _MASK32, counter >> 32 & _MASK32, counter >> 64 & _MASK32,
             counter >> 96 & _MASK32)
    return _blocks(key, words, count // 4).reshape(-1).tolist()


def seed_pair(seed: object, op: str) -> tuple[int, int]:
    """A stateless seed as TensorFlow reads it: two ints (shape ``[2]``).

    Raises:
        InvalidArgumentError: ``seed`` is not two integers.
    """
    array = np.asarray(seed)
    if array.shape != (2,) or array.dtype.kind not in "iu":
        raise InvalidArgumentError(f"{op}: seed must be a shape [2] tensor of two integers, "
                                   f"as tf.image's stateless operations take; got {seed!r}")
    return int(array[0]), int(array[1])


def key_and_counter(seed: tuple[int, int]) -> tuple[tuple[int, int], tuple[int, int, int, int]]:
    """The Philox key and counter TensorFlow derives from a seed (``GenerateKey``).

    Example:
        >>> key_and_counter((1, 2))[0] == key_and_counter((1, 2))[0]
        True
    """
    words = [value & ((1 << 64) - 1) for value in seed]  # as the kernel casts to uint64
    counter = (words[0] & _MASK32, words[0] >> 32, words[1] & _MASK32, words[1] >> 32)
    mix = _blocks((0x3EC8F720, 0x02461E29), counter, 1)[0].tolist()
    return (mix[0], mix[1]), (0, 0, mix[2], mix[3])


def _words(seed: tuple[int, int], count: int) -> np.ndarray:
    key, counter = key_and_counter(seed)
    return _blocks(key, counter, -(-count // 4)).reshape(-1)[:count]


def stateless_uniform(seed: tuple[int, int], shape: Sequence[int], minval: float = 0.0,
                      maxval: float = 1.0) -> np.ndarray:
    """``tf.random.stateless_uniform(shape, seed, minval, maxval)`` in float32, bit for bit.

    Example:
        >>> u = stateless_uniform((1, 2), [3])
        >>> u.dtype, bool(((0 <= u) & (u < 1)).all())
        (dtype('float32'), True)
    """
    count = int(np.prod(shape, dtype=np.int64))
    mantissas = (_words(seed, count) & np.uint32(0x7FFFFF)) | np.uint32(0x3F800000)
    unit = mantissas.view(np.float32) - np.float32(1)
    low, high = np.float32(minval), np.float32(maxval)
    return (unit * (high - low) + low).reshape(tuple(shape))


def stateless_uniform_int32(seed: tuple[int, int], shape: Sequence[int], minval: int,
                            maxval: int) -> np.ndarray:
    """``tf.random.stateless_uniform(shape, seed, minval, maxval, dtype=tf.int32)``.

    Example:
        >>> v = stateless_uniform_int32((1, 2), [4], 0, 10)
        >>> v.dtype, bool(((0 <= v) & (v < 10)).all())
        (dtype('int32'), True)
    """
    count = int(np.prod(shape, dtype=np.int64))
    span = np.uint32((maxval - minval) & _MASK32)
    values = (_words(seed, count) % span).astype(np.int64) + minval
    return values.astype(np.int32).reshape(tuple(shape))
