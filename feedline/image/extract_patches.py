"""``tf.image.extract_patches``: every (strided, dilated) patch of a batch as one vector."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from feedline.core.errors import InvalidArgumentError


def _window(value: Sequence[int], name: str) -> tuple[int, int]:
    items = [int(v) for v in np.asarray(value).reshape(-1)]
    if len(items) != 4 or items[0] != 1 or items[3] != 1 or min(items) < 1:
        raise InvalidArgumentError(f"extract_patches: {name} must be [1, rows, cols, 1] with "
                                   f"positive rows and cols, as in TensorFlow; got {value!r}")
    return items[1], items[2]


def _axis(size: int, kernel: int, stride: int, rate: int,
          padding: str) -> tuple[np.ndarray, int]:
    """The padded-coordinate rows of every patch ``[out, kernel]`` and the padding before."""
    effective = kernel + (kernel - 1) * (rate - 1)
    if padding == "VALID":
        count = max(-(-(size - effective + 1) // stride), 0)
        before = 0
    else:
        count = -(-size // stride)
        before = max((count - 1) * stride + effective - size, 0) // 2
    starts = np.arange(count) * stride
    return starts[:, None] + np.arange(kernel)[None, :] * rate, before


def extract_patches(images: np.ndarray, sizes: Sequence[int], strides: Sequence[int],
                    rates: Sequence[int], padding: str) -> np.ndarray:
    """The patches of ``sizes`` every ``strides``, dilated by ``rates``, each flattened in
    (row, column, depth) order into the depth axis: ``tf.image.extract_patches``.

    Args:
        images: ``[batch, rows, cols, depth]``.
        sizes: ``[1, size_rows, size_cols, 1]``.
        strides: ``[1, stride_rows, stride_cols, 1]``.
        rates: ``[1, rate_rows, rate_cols, 1]``: the gap between sampled pixels.
        padding: ``"VALID"`` (patches inside the image) or ``"SAME"`` (zero padding, one patch
            per stride position).

    Returns:
        ``[batch, out_rows, out_cols, size_rows * size_cols * depth]``, the images' dtype.

    Raises:
        InvalidArgumentError: Another rank, malformed sizes, or an unknown padding.

    Example:
        >>> image = np.arange(16).reshape(1, 4, 4, 1)
        >>> extract_patches(image, [1, 2, 2, 1], [1, 2, 2, 1], [1, 1, 1, 1], "VALID")[0, 0]
        array([[0, 1, 4, 5],
               [2, 3, 6, 7]])
    """
    array = np.asarray(images)
    if array.ndim != 4:
        raise InvalidArgumentError(f"extract_patches: images must be 4-D [batch, rows, cols, "
                                   f"depth]; got shape {array.shape}")
    if padding not in ("VALID", "SAME"):
        raise InvalidArgumentError(f"extract_patches: padding is 'VALID' or 'SAME'; got "
                                   f"{padding!r}")
    kernel_rows, kernel_cols = _window(sizes, "sizes")
    stride_rows, stride_cols = _window(strides, "strides")
    rate_rows, rate_cols = _window(rates, "rates")
    rows, top = _axis(array.shape[1], kernel_rows, stride_rows, rate_rows, padding)
    cols, left = _axis(array.shape[2], kernel_cols, stride_cols, rate_cols, padding)
    span_rows = max(int(rows.max()) + 1 if rows.size else 0, array.shape[1] + top)
    span_cols = max(int(cols.max()) + 1 if cols.size else 0, array.shape[2] + left)
    padded = np.zeros((array.shape[0], span_rows, span_cols, array.shape[3]), array.dtype)
    padded[:, top:top + array.shape[1], left:left + array.shape[2]] = array
    patches = padded[:, rows[:, None, :, None], cols[None, :, None, :]]
    return patches.reshape(*patches.shape[:3], kernel_rows * kernel_cols * array.shape[3])
