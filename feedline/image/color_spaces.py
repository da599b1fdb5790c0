"""YUV and YIQ conversions of RGB images: ``tf.image.rgb_to_yuv``, ``yuv_to_rgb``,
``rgb_to_yiq`` and ``yiq_to_rgb``, with TensorFlow's matrices.

Each multiplies the last (channel) axis by a 3×3 matrix, in the image's float dtype; like
TensorFlow, they take float images only (``convert_image_dtype`` first).
"""

from __future__ import annotations

import numpy as np

from feedline.core.errors import InvalidArgumentError

# TensorFlow's kernels (image_ops_impl.py): output = image @ kernel on the channel axis.
_RGB_TO_YIQ = [[0.299, 0.59590059, 0.2115], [0.587, -0.27455667, -0.52273617],
               [0.114, -0.32134392, 0.31119955]]
_YIQ_TO_RGB = [[1, 1, 1], [0.95598634, -0.27201283, -1.10674021],
               [0.6208248, -0.64720424, 1.70423049]]
_RGB_TO_YUV = [[0.299, -0.14714119, 0.61497538], [0.587, -0.28886916, -0.51496512],
               [0.114, 0.43601035, -0.10001026]]
_YUV_TO_RGB = [[1, 1, 1], [0, -0.394642334, 2.03206185], [1.13988303, -0.58062185, 0]]


def _convert(images: object, kernel: list[list[float]], op: str) -> np.ndarray:
    array = np.asarray(images)
    if array.dtype.kind != "f":
        raise InvalidArgumentError(f"{op}: images must be floats (convert_image_dtype first), "
                                   f"as in TensorFlow; got {array.dtype}")
    if array.ndim < 1 or array.shape[-1] != 3:
        raise InvalidArgumentError(f"{op}: the last dimension holds the 3 channels; got shape "
                                   f"{array.shape}")
    return array @ np.asarray(kernel, dtype=array.dtype)


def rgb_to_yuv(images: np.ndarray) -> np.ndarray:
    """RGB (floats in ``[0, 1]``) to YUV: ``tf.image.rgb_to_yuv``.

    Args:
        images: Floats, the last dimension RGB (any leading dimensions).

    Returns:
        Y in ``[0, 1]``, U in ``[-0.436, 0.436]``, V in ``[-0.615, 0.615]``; same dtype.

    Raises:
        InvalidArgumentError: Not floats, or the last dimension is not 3.

    Example:
        >>> rgb_to_yuv(np.array([1.0, 0.0, 0.0], np.float32))
        array([ 0.299     , -0.14714119,  0.6149754 ], dtype=float32)
    """
    return _convert(images, _RGB_TO_YUV, "rgb_to_yuv")


def yuv_to_rgb(images: np.ndarray) -> np.ndarray:
    """YUV to RGB: ``tf.image.yuv_to_rgb`` (the inverse of :func:`rgb_to_yuv`).

    Example:
        >>> yuv_to_rgb(rgb_to_yuv(np.array([0.2, 0.4, 0.6]))).round(4).tolist()
        [0.2, 0.4, 0.6]
    """
    return _convert(images, _YUV_TO_RGB, "yuv_to_rgb")


def rgb_to_yiq(images: np.ndarray) -> np.ndarray:
    """RGB (floats in ``[0, 1]``) to YIQ: ``tf.image.rgb_to_yiq``.

    Example:
        >>> rgb_to_yiq(np.array([0.0, 1.0, 0.0]))
        array([ 0.587     , -0.27455667, -0.52273617])
    """
    return _convert(images, _RGB_TO_YIQ, "rgb_to_yiq")


def yiq_to_rgb(images: np.ndarray) -> np.ndarray:
    """YIQ to RGB: ``tf.image.yiq_to_rgb`` (the inverse of :func:`rgb_to_yiq`).

    Example:
        >>> yiq_to_rgb(rgb_to_yiq(np.array([0.2, 0.4, 0.6]))).round(4).tolist()
        [0.2, 0.4, 0.6]
    """
    return _convert(images, _YIQ_TO_RGB, "yiq_to_rgb")
