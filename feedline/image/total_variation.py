"""``tf.image.total_variation``: the summed absolute differences of neighbouring pixels."""

from __future__ import annotations

import numpy as np

from feedline.core.errors import InvalidArgumentError


def total_variation(images: np.ndarray) -> np.ndarray:
    """The total variation of one image ``[H, W, C]`` (a scalar) or of each image of a batch
    ``[N, H, W, C]`` (shape ``[N]``), as ``tf.image.total_variation`` computes it: the sum of
    the absolute differences between vertical, then horizontal, neighbours, over every
    channel, in the images' dtype.

    Raises:
        InvalidArgumentError: Another rank, or unsigned integers (TensorFlow has no absolute
            value for them: convert to a signed or float dtype first).

    Example:
        >>> total_variation(np.array([[[0.0], [1.0]], [[3.0], [3.0]]], np.float32))
        np.float32(6.0)
    """
    array = np.asarray(images)
    if array.dtype.kind not in "if":
        raise InvalidArgumentError(f"total_variation: images must be signed integers or "
                                   f"floats, as in TensorFlow; got {array.dtype}")
    if array.ndim not in (3, 4):
        raise InvalidArgumentError("total_variation: images are [height, width, channels] or "
                                   f"[batch, height, width, channels]; got shape {array.shape}")
    rows, columns = (0, 1) if array.ndim == 3 else (1, 2)
    vertical = np.abs(np.diff(array, axis=rows))
    horizontal = np.abs(np.diff(array, axis=columns))
    axes = (0, 1, 2) if array.ndim == 3 else (1, 2, 3)
    return (vertical.sum(axis=axes, dtype=array.dtype)
            + horizontal.sum(axis=axes, dtype=array.dtype))
