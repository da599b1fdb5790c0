"""``tf.image.sample_distorted_bounding_box`` and its stateless form: a random crop window
that covers enough of the given objects (Inception-style data augmentation).

The stateless form draws TensorFlow's own stateless Philox stream, so the same seed gives the
same window as ``tf.image.stateless_sample_distorted_bounding_box``; the seeded form derives
such a seed from its ``seed`` (TensorFlow's stateful op keeps its stream inside the kernel,
which no other program can replay).
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np

from feedline.core.errors import InvalidArgumentError
from feedline.image._philox import key_and_counter, philox_words, seed_pair
from feedline.image._random import Seed, generator_for

_MIN_AREA = 1.0
_EPS = np.float32(0.0000001)


class _Words:
    """TensorFlow's ``SimplePhilox``: 32-bit words one by one from blocks of four."""

    def __init__(self, seed: tuple[int, int]) -> None:
        self._key, counter = key_and_counter(seed)
        self._counter = counter[0] | counter[1] << 32 | counter[2] << 64 | counter[3] << 96
        self._buffer: list[int] = []

    def rand32(self) -> int:
        if not self._buffer:
            self._buffer = philox_words(self._key, self._counter, 64)
            self._counter = (self._counter + 16) % (1 << 128)
        return self._buffer.pop(0)

    def rand_float(self) -> np.float32:
        bits = np.uint32((self.rand32() & 0x7FFFFF) | 0x3F800000)
        return bits.view(np.float32) - np.float32(1)

    def uniform(self, n: int) -> int:
        # ExactUniformInt: reject the low 2**32 % n values, so every residue is equally likely.
        reject = ((2**32 - 1) % n + 1) % n
        while True:
            value = self.rand32()
            if value >= reject:
                return value % n


def _lrint(value: np.float32) -> int:
    return int(np.rint(np.float32(value)))


def _random_crop(width: int, height: int, min_relative: np.float32, max_relative: np.float32,
                 aspect: np.float32, words: _Words) -> tuple[int, int, int, int] | None:
    """TensorFlow's ``GenerateRandomCrop``: ``(x, y, w, h)`` or ``None`` when it fails."""
    min_area = min_relative * np.float32(width) * np.float32(height)
    max_area = max_relative * np.float32(width) * np.float32(height)
    crop_height = _lrint(np.sqrt(min_area / aspect))
    max_height = _lrint(np.sqrt(max_area / aspect))
    if _lrint(np.float32(max_height) * aspect) > width:
        # The smallest max_height with round(max_height * aspect) <= width.
        max_height = int((width + 0.5 - float(_EPS)) / float(aspect))
        if _lrint(np.float32(max_height) * aspect) > width:
            max_height -= 1
    max_height = min(max_height, height)
    crop_height = min(crop_height, max_height)
    if crop_height < max_height:
        crop_height += words.uniform(max_height - crop_height + 1)
    crop_width = _lrint(np.float32(crop_height) * aspect)
    area = np.float32(crop_width * crop_height)
    if area < min_area:
        crop_height += 1
        crop_width = _lrint(np.float32(crop_height) * aspect)
        area = np.float32(crop_width * crop_height)
    if (area < min_area or area > max_area or crop_width > width or crop_height > height
            or crop_width <= 0 or crop_height <= 0):
        return None
    y = words.uniform(height - crop_height) if crop_height < height else 0
    x = words.uniform(width - crop_width) if crop_width < width else 0
    return x, y, crop_width, crop_height


def _covers(crop: tuple[int, int, int, int], min_covered: np.float32,
            boxes: list[tuple[int, int, int, int]]) -> bool:
    """TensorFlow's ``SatisfiesOverlapConstraints`` (boxes as ``(x0, y0, x1, y1)``)."""
    x, y, w, h = crop
    if w * h < _MIN_AREA:
        return False
    for x0, y0, x1, y1 in boxes:
        area = (x1 - x0) * (y1 - y0)
        if area < _MIN_AREA:
            continue
        overlap_w = min(x + w, x1) - max(x, x0)
        overlap_h = min(y + h, y1) - max(y, y0)
        overlap = overlap_w * overlap_h if overlap_w > 0 and overlap_h > 0 else 0
        if np.float32(overlap) / np.float32(area) >= min_covered:
            return True
    return False


def _range(value: Sequence[float], name: str) -> tuple[np.float32, np.float32]:
    items = np.asarray(value, np.float32).reshape(-1)
    if len(items) != 2:
        raise InvalidArgumentError(f"sample_distorted_bounding_box: {name} must have 2 "
                                   f"elements; got {value!r}")
    return items[0], items[1]


def stateless_sample_distorted_bounding_box(
        image_size: Sequence[int], bounding_boxes: np.ndarray, seed: Sequence[int],
        min_object_covered: float = 0.1, aspect_ratio_range: Sequence[float] = (0.75, 1.33),
        area_range: Sequence[float] = (0.05, 1.0), max_attempts: int = 100,
        use_image_if_no_bounding_boxes: bool = False,
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """A random crop window covering at least ``min_object_covered`` of one of the boxes,
    drawn as ``tf.image.stateless_sample_distorted_bounding_box`` draws it for ``seed``.

    Args:
        image_size: ``[height, width, channels]``.
        bounding_boxes: float ``[batch, N, 4]`` (or any shape ending in 4) of
            ``[ymin, xmin, ymax, xmax]`` in ``[0, 1]``.
        seed: Two integers.
        min_object_covered: The fraction of some box the crop must cover.
        aspect_ratio_range: Allowed width / height of the crop.
        area_range: Allowed crop area, as a fraction of the image's.
        max_attempts: Draws before giving up and returning the whole image.
        use_image_if_no_bounding_boxes: Without boxes, use the whole image as the box.

    Returns:
        ``(begin, size, bboxes)``: ``begin = [y, x, 0]`` and ``size = [h, w, -1]`` (the dtype
        of ``image_size``) for ``tf.slice``-style cropping (``image[y:y + h, x:x + w]``), and
        the window as a float32 box ``[1, 1, 4]``.

    Raises:
        InvalidArgumentError: A box outside ``[0, 1]``, no boxes without
            ``use_image_if_no_bounding_boxes``, bad ranges or image size.

    Example:
        >>> begin, size, box = stateless_sample_distorted_bounding_box(
        ...     [100, 200, 3], [[[0.1, 0.1, 0.9, 0.9]]], seed=(1, 2))
        >>> begin.tolist(), size.tolist()
        ([56, 120, 0], [38, 47, -1])
    """
    op = "sample_distorted_bounding_box"
    sizes = np.asarray(image_size)
    if sizes.shape != (3,) or sizes.dtype.kind not in "iu":
        raise InvalidArgumentError(f"{op}: image_size must be 1-D [height, width, channels] "
                                   f"integers; got {image_size!r}")
    height, width = int(sizes[0]), int(sizes[1])
    if height <= 0 or width <= 0:
        raise InvalidArgumentError(f"{op}: image height and width must be positive; got "
                                   f"{sizes.tolist()}")
    boxes = np.asarray(bounding_boxes, np.float32)
    if boxes.size and boxes.shape[-1] != 4:
        raise InvalidArgumentError(f"{op}: bounding_boxes must end in 4 coordinates; got "
                                   f"shape {boxes.shape}")
    boxes = boxes.reshape(-1, 4)
    if np.any((boxes < 0) | (boxes > 1)):
        bad = boxes[(boxes < 0) | (boxes > 1)][0]
        raise InvalidArgumentError(f"{op}: All bounding box coordinates must be in [0.0, 1.0]: "
                                   f"{bad}")
    rects = [(int(x0 * np.float32(width)), int(y0 * np.float32(height)),
              int(x1 * np.float32(width)), int(y1 * np.float32(height)))
             for y0, x0, y1, x1 in boxes]
    if not rects:
        if not use_image_if_no_bounding_boxes:
            raise InvalidArgumentError(
                f"{op}: No bounding boxes provided as input. One must enable "
                "use_image_if_no_bounding_boxes if you wish to not provide any bounding boxes.")
        rects = [(0, 0, width, height)]
    low_aspect, high_aspect = _range(aspect_ratio_range, "aspect_ratio_range")
    low_area, high_area = _range(area_range, "area_range")
    if not (0 < low_aspect <= high_aspect) or not (0 < low_area <= high_area <= 1):
        raise InvalidArgumentError(f"{op}: aspect_ratio_range must be positive and area_range "
                                   f"in (0, 1], each [low, high]; got {aspect_ratio_range!r} "
                                   f"and {area_range!r}")
    if max_attempts <= 0:
        raise InvalidArgumentError(f"{op}: max_attempts must be positive; got {max_attempts}")
    covered = np.float32(min_object_covered)
    if not covered >= 0 or math.isinf(covered):
        raise InvalidArgumentError(f"{op}: min_object_covered must be >= 0; got "
                                   f"{min_object_covered}")
    words = _Words(seed_pair(seed, op))
    crop = (0, 0, width, height)
    for _ in range(int(max_attempts)):
        aspect = words.rand_float() * (high_aspect - low_aspect) + low_aspect
        drawn = _random_crop(width, height, low_area, high_area, aspect, words)
        if drawn is not None and _covers(drawn, covered, rects):
            crop = drawn
            break
    x, y, w, h = crop
    begin = np.array([y, x, 0], sizes.dtype)
    size = np.array([h, w, -1], sizes.dtype)
    box = np.array([[[y / np.float32(height), x / np.float32(width),
                      (y + h) / np.float32(height), (x + w) / np.float32(width)]]], np.float32)
    return begin, size, box


def sample_distorted_bounding_box(
        image_size: Sequence[int], bounding_boxes: np.ndarray, seed: Seed = None,
        min_object_covered: float = 0.1, aspect_ratio_range: Sequence[float] = (0.75, 1.33),
        area_range: Sequence[float] = (0.05, 1.0), max_attempts: int = 100,
        use_image_if_no_bounding_boxes: bool = False,
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """``tf.image.sample_distorted_bounding_box``: as
    :func:`stateless_sample_distorted_bounding_box`, its seed drawn from ``seed`` (an int,
    a pair, a NumPy generator, or ``None`` for fresh entropy), so the same seed gives the
    same window.

    Example:
        >>> a = sample_distorted_bounding_box([64, 64, 3], [[[0, 0, 1, 1]]], seed=5)
        >>> b = sample_distorted_bounding_box([64, 64, 3], [[[0, 0, 1, 1]]], seed=5)
        >>> all((x == y).all() for x, y in zip(a, b))
        True
    """
    draw = generator_for(seed).integers(-(2**63), 2**63 - 1, size=2, endpoint=True)
    return stateless_sample_distorted_bounding_box(
        image_size, bounding_boxes, (int(draw[0]), int(draw[1])), min_object_covered,
        aspect_ratio_range, area_range, max_attempts, use_image_if_no_bounding_boxes)
