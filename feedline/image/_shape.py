"""Shape checks shared by the image operations: one image ``[H, W, C]`` or a batch
``[N, H, W, C]``."""

from __future__ import annotations

import numpy as np

from feedline.core.errors import InvalidArgumentError


def as_images(image: object, op: str) -> tuple[np.ndarray, bool]:
    """``image`` as a batch ``[N, H, W, C]`` and whether it was one image ``[H, W, C]``."""
    array = np.asarray(image)
    if array.dtype == object or array.dtype.kind not in "biuf":
        raise InvalidArgumentError(f"{op}: an image is a numeric array [height, width, channels] "
                                   f"or a batch [batch, height, width, channels]; got dtype "
                                   f"{array.dtype} with shape {array.shape}")
    if array.ndim == 3:
        return array[None], True
    if array.ndim == 4:
        return array, False
    raise InvalidArgumentError(f"{op}: an image has shape [height, width, channels] or a batch "
                               f"[batch, height, width, channels]; got shape {array.shape}")


def restore(batch: np.ndarray, single: bool) -> np.ndarray:
    """The result in the caller's form: one image if one image came in."""
    return batch[0] if single else batch


def size_pair(size: object, op: str) -> tuple[int, int]:
    """A ``(height, width)`` pair of non-negative ints."""
    try:
        height, width = (int(value) for value in np.asarray(size).reshape(-1))
    except (TypeError, ValueError):
        raise InvalidArgumentError(f"{op}: size is [height, width]; got {size!r}") from None
    if height < 0 or width < 0:
        raise InvalidArgumentError(f"{op}: size must be non-negative; got {size!r}")
    return height, width
