"""``tf.image.adjust_jpeg_quality`` and ``stateless_random_jpeg_quality``: JPEG compression
artefacts, by encoding an image at a quality and decoding it again."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from feedline.core.errors import InvalidArgumentError
from feedline.image._philox import seed_pair, stateless_uniform_int32
from feedline.image.codecs import decode_jpeg, encode_jpeg
from feedline.image.dtype import convert_image_dtype


def adjust_jpeg_quality(image: np.ndarray, jpeg_quality: int) -> np.ndarray:
    """The image after a JPEG round trip at ``jpeg_quality``: ``tf.image.adjust_jpeg_quality``.

    The image is converted to uint8 (saturating), encoded (4:2:0 chroma, as TensorFlow
    encodes), decoded, and converted back to its dtype.

    Args:
        image: One image ``[H, W, 1]`` or ``[H, W, 3]``, any dtype ``convert_image_dtype``
            takes.
        jpeg_quality: 0 to 100.

    Raises:
        InvalidArgumentError: Not one image of 1 or 3 channels, or a quality outside 0..100.

    Example:
        >>> flat = np.full((8, 8, 3), 100, np.uint8)
        >>> adjust_jpeg_quality(flat, 90)[0, 0].tolist()  # TensorFlow's pixels too
        [99, 99, 99]
    """
    array = np.asarray(image)
    if array.ndim != 3 or array.shape[-1] not in (1, 3):
        raise InvalidArgumentError(f"adjust_jpeg_quality: image must be one image [height, "
                                   f"width, 1 or 3]; got shape {array.shape}")
    quality = int(jpeg_quality)
    if not 0 <= quality <= 100:
        raise InvalidArgumentError(f"adjust_jpeg_quality: jpeg_quality must be in [0, 100]; "
                                   f"got {jpeg_quality}")
    as_uint8 = convert_image_dtype(array, np.uint8, saturate=True)
    decoded = decode_jpeg(encode_jpeg(as_uint8, quality), channels=array.shape[-1])
    return convert_image_dtype(decoded, array.dtype, saturate=True)


def stateless_random_jpeg_quality(image: np.ndarray, min_jpeg_quality: int,
                                  max_jpeg_quality: int, seed: Sequence[int]) -> np.ndarray:
    """:func:`adjust_jpeg_quality` at a quality drawn from ``[min, max)`` as
    ``tf.image.stateless_random_jpeg_quality`` draws it for ``seed``.

    Raises:
        InvalidArgumentError: Qualities outside 0..100, ``min >= max``, or a bad seed.

    Example:
        >>> flat = np.full((8, 8, 3), 100, np.uint8)
        >>> stateless_random_jpeg_quality(flat, 70, 90, (1, 2)).shape
        (8, 8, 3)
    """
    op = "stateless_random_jpeg_quality"
    low, high = int(min_jpeg_quality), int(max_jpeg_quality)
    if not (0 <= low <= 100 and 0 <= high <= 100):
        raise InvalidArgumentError(f"{op}: jpeg encoding range must be between 0 and 100; got "
                                   f"[{min_jpeg_quality}, {max_jpeg_quality})")
    if low >= high:
        raise InvalidArgumentError(f"{op}: `min_jpeg_quality` must be less than "
                                   f"`max_jpeg_quality`; got {low} and {high}")
    quality = int(stateless_uniform_int32(seed_pair(seed, op), [], low, high)[()])
    return adjust_jpeg_quality(image, quality)
