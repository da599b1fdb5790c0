"""``tf.image.crop_and_resize``: crops of a batch at normalized boxes, resized by sampling."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from feedline.core.errors import InvalidArgumentError
from feedline.image._shape import size_pair

_METHODS = ("bilinear", "nearest")


def _coordinates(start: np.float32, end: np.float32, size: int, count: int) -> np.ndarray:
    """Where TensorFlow's kernel samples along one axis, in its float32 arithmetic."""
    last = np.float32(size - 1)
    if count > 1:
        scale = (end - start) * last / np.float32(count - 1)
        return start * last + np.arange(count, dtype=np.float32) * scale
    # One sample: the box's centre, computed in double by the kernel (a double literal 0.5).
    return np.array([0.5 * float(start + end) * (size - 1)], np.float32)


def _round_half_away(values: np.ndarray) -> np.ndarray:
    """C's ``roundf`` for the non-negative coordinates it is given here."""
    floor = np.floor(values)
    return np.where(values - floor >= 0.5, floor + 1, floor)


def crop_and_resize(image: np.ndarray, boxes: np.ndarray, box_indices: Sequence[int],
                    crop_size: Sequence[int], method: str = "bilinear",
                    extrapolation_value: float = 0.0) -> np.ndarray:
    """Crop box ``i`` of ``image[box_indices[i]]`` and resize it to ``crop_size``, as
    ``tf.image.crop_and_resize`` does, value for value.

    A box is ``[y1, x1, y2, x2]`` in normalized coordinates (``0`` and ``1`` are the first and
    last pixel centres); ``y1 > y2`` flips the crop, and samples that fall outside the image
    take ``extrapolation_value``.

    Args:
        image: A batch ``[batch, height, width, depth]`` of any real dtype.
        boxes: float ``[num_boxes, 4]``.
        box_indices: ``[num_boxes]`` ints in ``[0, batch)``: the image of each box.
        crop_size: ``(crop_height, crop_width)``, both positive.
        method: ``"bilinear"`` or ``"nearest"``.
        extrapolation_value: The value of samples outside the image.

    Returns:
        float32 ``[num_boxes, crop_height, crop_width, depth]``.

    Raises:
        InvalidArgumentError: Bad shapes, sizes, method, or a box index out of range.

    Example:
        >>> image = np.arange(9, dtype=np.float32).reshape(1, 3, 3, 1)
        >>> crop_and_resize(image, [[0, 0, 1, 1]], [0], (2, 2))[0, ..., 0].tolist()
        [[0.0, 2.0], [6.0, 8.0]]
    """
    op = "crop_and_resize"
    images = np.asarray(image)
    if images.ndim != 4 or images.dtype.kind not in "biuf":
        raise InvalidArgumentError(f"{op}: image must be a 4-D numeric batch [batch, height, "
                                   f"width, depth]; got {images.dtype} {images.shape}")
    box_array = np.asarray(boxes, dtype=np.float32)
    indices = np.asarray(box_indices).reshape(-1)
    if box_array.ndim != 2 or box_array.shape[1] != 4:
        raise InvalidArgumentError(f"{op}: boxes must be 2-D [num_boxes, 4]; got shape "
                                   f"{box_array.shape}")
    if indices.shape != (box_array.shape[0],) or indices.dtype.kind not in "iu":
        raise InvalidArgumentError(f"{op}: box_indices must hold {box_array.shape[0]} ints (one "
                                   f"per box); got {np.asarray(box_indices)!r}")
    if np.any((indices < 0) | (indices >= images.shape[0])):
        raise InvalidArgumentError(f"{op}: box_indices has values outside [0, batch_size) "
                                   f"(batch_size {images.shape[0]})")
    crop_height, crop_width = size_pair(crop_size, op)
    if crop_height == 0 or crop_width == 0:
        raise InvalidArgumentError(f"{op}: crop dimensions must be positive; got {crop_size!r}")
    if method not in _METHODS:
        raise InvalidArgumentError(f"{op}: method must be one of {_METHODS}; got {method!r}")
    _, height, width, depth = images.shape
    fill = np.float32(extrapolation_value)
    out = np.empty((len(indices), crop_height, crop_width, depth), np.float32)
    for b, (y1, x1, y2, x2) in enumerate(box_array):
        ys = _coordinates(y1, y2, height, crop_height)
        xs = _coordinates(x1, x2, width, crop_width)
        rows_in = (ys >= 0) & (ys <= height - 1)
        cols_in = (xs >= 0) & (xs <= width - 1)
        safe_y = np.where(rows_in, ys, 0).astype(np.float32)
        safe_x = np.where(cols_in, xs, 0).astype(np.float32)
        one = images[int(indices[b])].astype(np.float32)
        if method == "bilinear":
            top, bottom = np.floor(safe_y).astype(np.intp), np.ceil(safe_y).astype(np.intp)
            left, right = np.floor(safe_x).astype(np.intp), np.ceil(safe_x).astype(np.intp)
            y_lerp = (safe_y - top.astype(np.float32))[:, None, None]
            x_lerp = (safe_x - left.astype(np.float32))[None, :, None]
            top_left, top_right = one[top][:, left], one[top][:, right]
            bottom_left, bottom_right = one[bottom][:, left], one[bottom][:, right]
            upper = top_left + (top_right - top_left) * x_lerp
            lower = bottom_left + (bottom_right - bottom_left) * x_lerp
            crop = upper + (lower - upper) * y_lerp
        else:
            rows = _round_half_away(safe_y).astype(np.intp)
            cols = _round_half_away(safe_x).astype(np.intp)
            crop = one[rows][:, cols]
        crop[~rows_in] = fill
        crop[:, ~cols_in] = fill
        out[b] = crop
    return out
