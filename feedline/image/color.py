"""Colour operations: tf.image's ``adjust_*``, ``random_*``, grayscale and HSV conversions.

Each takes one image ``[H, W, C]`` or a batch ``[N, H, W, C]`` and follows tf.image: an image
that is not float16/float32 is converted to float32 (:func:`convert_image_dtype`), adjusted,
and converted back (brightness, contrast and gamma saturate on the way back; hue, saturation
and grayscale do not, as in TensorFlow, whose results stay in range). The HSV operations
replay TensorFlow's fused CPU kernels (``AdjustHue``, ``AdjustSaturation``) step by step in
vectorized NumPy, float32 throughout, so results agree to the last bit or ulp (the tests state
the measured differences against TensorFlow 2.21's recorded outputs).

Random operations draw their factor from :func:`feedline.image._random.generator_for`
(``seed``: an int, a pair of ints, a Generator or ``None``) and then apply the deterministic
operation. **On a batch they draw one factor per image**: ``tf.image.random_brightness`` on a
4-D tensor draws one delta for the whole batch, but a feedline batch stands for a map over its
images, so ``random_brightness(batch, d, seed)[i]`` is the same as applying
``adjust_brightness`` with the ``i``-th of ``generator_for(seed).uniform(-d, d, size=N)``; one
image draws the first of those, so it equals the first image of a batch with the same seed.
"""

from __future__ import annotations

import math
from collections.abc import Callable

import numpy as np

from feedline.core.errors import InvalidArgumentError
from feedline.image._random import Seed, generator_for
from feedline.image._shape import as_images, restore
from feedline.image.dtype import _float_to_int, convert_image_dtype

__all__ = [
    "adjust_brightness", "adjust_contrast", "adjust_gamma", "adjust_hue", "adjust_saturation",
    "grayscale_to_rgb", "hsv_to_rgb", "random_brightness", "random_contrast", "random_hue",
    "random_saturation", "rgb_to_grayscale", "rgb_to_hsv",
]

_F32 = np.float32


# ---------------------------------------------------------------------------------------------
# Shared plumbing: float32 in, the caller's dtype out, one parameter per image.


def _to_float32(batch: np.ndarray) -> np.ndarray:
    """A float32 copy the operation may overwrite (integers scaled to [0, 1])."""
    if batch.dtype.kind in "iu":
        return convert_image_dtype(batch, _F32)
    return batch.astype(_F32)  # copies float32 too: the caller's image stays as it was


def _from_float32(values: np.ndarray, dtype: np.dtype, saturate: bool) -> np.ndarray:
    """``convert_image_dtype(values, dtype, saturate)``, reusing ``values`` as scratch."""
    if dtype == _F32:
        return values
    if dtype.kind == "f":
        return values.astype(dtype)
    return _float_to_int(values, dtype, saturate, scratch=True)


def _images(image: object, op: str, channels: int | None = None) -> tuple[np.ndarray, bool]:
    batch, single = as_images(image, op)
    if channels is not None and batch.shape[-1] != channels:
        kind = "an RGB image has 3 channels" if channels == 3 else \
            "a grayscale image has 1 channel"
        raise InvalidArgumentError(f"{op}: {kind} (the last dimension); got shape "
                                   f"{np.shape(image)}")
    return batch, single


def _scalar(value: object, op: str, name: str) -> float:
    try:
        result = float(value)  # type: ignore[arg-type]
    except (TypeError, ValueError):
        raise InvalidArgumentError(f"{op}: {name} must be a number; got {value!r}") from None
    if not math.isfinite(result):
        raise InvalidArgumentError(f"{op}: {name} must be finite; got {value!r}")
    return result


def _per_image(values: np.ndarray) -> np.ndarray:
    """Per-image parameters shaped to broadcast over ``[N, H, W, C]``."""
    return np.asarray(values, _F32).reshape(-1, 1, 1, 1)


# ---------------------------------------------------------------------------------------------
# Brightness, contrast, gamma.


_Kernel = Callable[[np.ndarray, np.ndarray], np.ndarray]


def _image_by_image(kernel: _Kernel) -> _Kernel:
    """Run ``kernel(images, parameters)`` one image at a time.

    The kernels make temporaries the size of their input: one image's fit in the CPU caches, a
    whole batch's do not (the HSV kernels ran 2.5 times slower per image on a batch of 16).
    """
    def run(batch: np.ndarray, parameters: np.ndarray) -> np.ndarray:
        if batch.shape[0] == 1:
            return kernel(batch, parameters)
        out = np.empty(batch.shape, batch.dtype)
        for index in range(batch.shape[0]):
            out[index:index + 1] = kernel(batch[index:index + 1],
                                          parameters[index:index + 1])
        return out
    return run


@_image_by_image
def _brightness(batch: np.ndarray, deltas: np.ndarray) -> np.ndarray:
    dtype = batch.dtype
    values = _to_float32(batch)
    deltas = np.asarray(deltas, np.float64)
    if dtype == np.float16:
        deltas = deltas.astype(np.float16)  # TensorFlow adds in float16: delta rounds first
    values += _per_image(deltas)
    return _from_float32(values, dtype, saturate=True)


def adjust_brightness(image: np.ndarray, delta: float) -> np.ndarray:
    """Add ``delta`` to every value, in ``[0, 1]`` units: ``tf.image.adjust_brightness``.

    Integer images are scaled to ``[0, 1]``, shifted, and converted back with saturation, so
    ``delta=0.1`` brightens a uint8 image by about 25 levels, clipped at 255. Float images are
    not clipped. Bit-exact with TensorFlow for uint8, uint16, int32, float16/32/64.

    Args:
        image: one image ``[H, W, C]`` or a batch ``[N, H, W, C]``, any channel count.
        delta: the amount to add, in ``[0, 1]`` units (usually in ``(-1, 1)``).

    Returns:
        The adjusted image(s), same shape and dtype.

    Raises:
        InvalidArgumentError: a bad rank or a non-finite ``delta``.

    Example:
        >>> adjust_brightness(np.array([[[10, 128, 250]]], np.uint8), 0.1)
        array([[[ 35, 153, 255]]], dtype=uint8)
    """
    batch, single = _images(image, "adjust_brightness")
    delta = _scalar(delta, "adjust_brightness", "delta")
    return restore(_brightness(batch, np.full(batch.shape[0], delta)), single)


def _channel_means(values: np.ndarray) -> np.ndarray:
    """Per image and channel mean, as ``[N, 1, W*C]`` rows that broadcast over ``[N, H, W*C]``."""
    n, height, width, channels = values.shape
    # Sum rows first (the inner loop runs along W*C, not along C=3), in float64: the result is
    # the exact mean rounded once, which TensorFlow's float32 sum reaches within an ulp.
    rows = values.reshape(n, height, width * channels).sum(axis=1, dtype=np.float64)
    means = rows.reshape(n, width, channels).sum(axis=1) / max(height * width, 1)
    return np.tile(means.astype(_F32), (1, width)).reshape(n, 1, width * channels)


@_image_by_image
def _contrast(batch: np.ndarray, factors: np.ndarray) -> np.ndarray:
    dtype = batch.dtype
    values = _to_float32(batch)
    n, height, width, channels = values.shape
    means = _channel_means(values)
    rows = values.reshape(n, height, width * channels)
    rows -= means
    rows *= np.asarray(factors, _F32).reshape(-1, 1, 1)
    rows += means
    return _from_float32(values, dtype, saturate=True)


def adjust_contrast(images: np.ndarray, contrast_factor: float) -> np.ndarray:
    """``(x - mean) * contrast_factor + mean`` per channel: ``tf.image.adjust_contrast``.

    The mean is each image's, per channel, over its height and width. Integer images go through
    float32 ``[0, 1]`` and back with saturation. float16 images are computed in float32
    (TensorFlow's CPU has no float16 kernel for this).

    Args:
        images: one image ``[H, W, C]`` or a batch ``[N, H, W, C]``, any channel count.
        contrast_factor: the factor; 1 leaves the image as it is, 0 makes it its mean.

    Returns:
        The adjusted image(s), same shape and dtype.

    Raises:
        InvalidArgumentError: a bad rank or a non-finite factor.

    Example:
        >>> x = np.array([[[1.0, 2.0, 3.0], [4.0, 5.0, 6.0]],
        ...               [[7.0, 8.0, 9.0], [10.0, 11.0, 12.0]]], np.float32)
        >>> adjust_contrast(x, 2.0)[0]
        array([[-3.5, -2.5, -1.5],
               [ 2.5,  3.5,  4.5]], dtype=float32)
    """
    batch, single = _images(images, "adjust_contrast")
    factor = _scalar(contrast_factor, "adjust_contrast", "contrast_factor")
    return restore(_contrast(batch, np.full(batch.shape[0], factor)), single)


def adjust_gamma(image: np.ndarray, gamma: float = 1, gain: float = 1) -> np.ndarray:
    """``gain * x ** gamma`` in ``[0, 1]`` units: ``tf.image.adjust_gamma``.

    Integer images go through float32 ``[0, 1]`` and back with saturation. ``pow`` is NumPy's
    (correctly rounded to within an ulp), TensorFlow's is Eigen's: float results differ by at
    most a few float32 ulps, integer results by at most 1 at rare pixels.

    Args:
        image: one image ``[H, W, C]`` or a batch ``[N, H, W, C]``, any channel count.
        gamma: a non-negative exponent; below 1 brightens, above 1 darkens.
        gain: a constant multiplier.

    Returns:
        The adjusted image(s), same shape and dtype.

    Raises:
        InvalidArgumentError: a bad rank, a negative ``gamma`` or a non-finite parameter.

    Example:
        >>> adjust_gamma(np.array([[[0.25, 1.0]]], np.float32), gamma=0.5)
        array([[[0.5, 1. ]]], dtype=float32)
    """
    batch, single = _images(image, "adjust_gamma")
    gamma = _scalar(gamma, "adjust_gamma", "gamma")
    gain = _scalar(gain, "adjust_gamma", "gain")
    if gamma < 0:
        raise InvalidArgumentError(f"adjust_gamma: gamma must be a non-negative real number; "
                                   f"got {gamma}")
    dtype = batch.dtype
    values = _to_float32(batch)
    if dtype == np.float16:
        # TensorFlow computes in float16: gamma and gain round to float16, and so does pow.
        np.power(values, _F32(np.float16(gamma)), out=values)
        values = values.astype(np.float16).astype(_F32)
        values *= _F32(np.float16(gain))
    else:
        np.power(values, _F32(gamma), out=values)
        values *= _F32(gain)
    return restore(_from_float32(values, dtype, saturate=True), single)


# ---------------------------------------------------------------------------------------------
# Hue and saturation: TensorFlow's AdjustHue / AdjustSaturation CPU kernels, vectorized.

def _planes(batch: np.ndarray) -> np.ndarray:
    """``batch`` as float32 planes ``[3, N, H, W]`` (integers scaled to ``[0, 1]``), a new array.

    Contiguous planes: every later pass streams memory instead of striding by 3, and the cast
    happens in the same pass as the transposition.
    """
    planes = np.empty((3, *batch.shape[:-1]), _F32)
    np.copyto(planes, np.moveaxis(batch, -1, 0), casting="unsafe")
    if batch.dtype.kind in "iu":
        planes *= _F32(1.0 / np.iinfo(batch.dtype).max)  # convert_image_dtype's float32 scale
    return planes


def _interleave(red: np.ndarray, green: np.ndarray, blue: np.ndarray) -> np.ndarray:
    out = np.empty((*red.shape, 3), _F32)
    out[..., 0] = red
    out[..., 1] = green
    out[..., 2] = blue
    return out


_BITS = {1: np.uint8, 2: np.uint16, 4: np.uint32, 8: np.uint64}


def _select(mask: np.ndarray, a: np.ndarray, b: np.ndarray | None = None) -> np.ndarray:
    """``np.where(mask, a, b)`` (``b`` None: zero) for contiguous arrays of one shape and dtype.

    By bit masks: NumPy's ``where`` branches per element and, on the unpredictable masks of a
    photograph, runs some 50 times slower than these five branch-free passes.
    """
    kind = _BITS[a.dtype.itemsize]
    full = mask.view(np.uint8).astype(kind)
    np.negative(full, out=full)  # 1 -> all ones
    out = np.bitwise_and(a.view(kind), full)
    if b is not None:
        np.invert(full, out=full)
        full &= b.view(kind)
        out |= full
    return out.view(a.dtype)


def _pick(first: np.ndarray, first_mask: np.ndarray, second: np.ndarray,
          second_mask: np.ndarray, rest: np.ndarray | None = None) -> np.ndarray:
    """``first`` where ``first_mask``, else ``second`` where ``second_mask``, else ``rest``."""
    return _select(first_mask, first, _select(second_mask, second, rest))


def _in(sector: np.ndarray, a: int, b: int) -> np.ndarray:
    return (sector == a) | (sector == b)


@_image_by_image
def _hue(batch: np.ndarray, deltas: np.ndarray) -> np.ndarray:
    dtype = batch.dtype
    r, g, b = _planes(batch)
    # rgb_to_hv_range: the sector of the colour around the hue circle (0: r >= g >= b,
    # 1: g > r > b, ...) by the kernel's comparison tree. Within each branch the two tests
    # exclude each other, so the tree is a sum of booleans.
    below = r < g
    sector = _select(below, 2 - (b < r).view(np.int8) + (b > g).view(np.int8),
                     5 - 5 * (b < g).view(np.int8) - (b > r).view(np.int8))
    third = sector % 3  # which channel is the middle one: 0 and 3 green, 1 and 4 red, 2 and 5 blue
    middle = _pick(g, third == 0, r, third == 1, b)
    high = np.maximum(np.maximum(r, g), b)
    low = np.minimum(np.minimum(r, g), b)
    span = high - low
    with np.errstate(divide="ignore", invalid="ignore"):
        ratio = (middle - low) / span
    odd = (sector & 1).view(bool)
    hue = _select(odd, _F32(1) - ratio, ratio)
    hue += sector
    hue = _select(span != 0, hue)  # zero for gray pixels, also replacing their 0 / 0
    hue += (np.asarray(deltas, _F32) * _F32(6)).reshape(-1, 1, 1)
    # The kernel's `while (h < 0) h += 6; while (h >= 6) h -= 6;`: a sum that rounds up to
    # exactly 12 or 6 needs the second step again.
    # Adding 0 where nothing is to change leaves those values as they are.
    while (negative := hue < 0).any():
        hue += negative.view(np.uint8) * _F32(6)
    while (over := hue >= 6).any():
        hue -= over.view(np.uint8) * _F32(6)
    # hv_range_to_rgb: each channel becomes the high, the low, or a new middle value.
    sector = hue.astype(np.int8)
    ratio = hue - sector
    odd = (sector & 1).view(bool)
    ratio = _select(odd, _F32(1) - ratio, ratio)
    ratio *= span
    ratio += low
    middle = ratio
    out = _interleave(_pick(high, _in(sector, 0, 5), low, _in(sector, 2, 3), middle),
                      _pick(high, _in(sector, 1, 2), low, _in(sector, 4, 5), middle),
                      _pick(high, _in(sector, 3, 4), low, _in(sector, 0, 1), middle))
    return _from_float32(out, dtype, saturate=False)


def adjust_hue(image: np.ndarray, delta: float) -> np.ndarray:
    """Rotate the hue by ``delta`` turns: ``tf.image.adjust_hue``.

    Replays TensorFlow's fused CPU kernel (RGB to hue sector and value range, rotate, back), in
    float32; integer images go through float32 ``[0, 1]`` and back. float16 images are computed
    in float32.

    Args:
        image: RGB image(s), ``[H, W, 3]`` or ``[N, H, W, 3]``.
        delta: the rotation, in ``[-1, 1]`` (1 is a full turn).

    Returns:
        The adjusted image(s), same shape and dtype.

    Raises:
        InvalidArgumentError: a bad rank, not 3 channels, or ``delta`` outside ``[-1, 1]``.

    Example:
        >>> adjust_hue(np.array([[[255, 0, 0]]], np.uint8), 1 / 3)  # red turns green
        array([[[  0, 255,   0]]], dtype=uint8)
    """
    batch, single = _images(image, "adjust_hue", channels=3)
    delta = _scalar(delta, "adjust_hue", "delta")
    if not -1 <= delta <= 1:
        raise InvalidArgumentError(f"adjust_hue: delta must be in the interval [-1, 1]; "
                                   f"got {delta}")
    return restore(_hue(batch, np.full(batch.shape[0], delta)), single)


@_image_by_image
def _saturation(batch: np.ndarray, factors: np.ndarray) -> np.ndarray:
    dtype = batch.dtype
    r, g, b = _planes(batch)
    value = np.maximum(np.maximum(r, g), b)
    span = value - np.minimum(np.minimum(r, g), b)
    red_max = r == value
    green_max = g == value
    with np.errstate(divide="ignore", invalid="ignore"):
        saturation = _select(value > 0, span / value)
        norm = _F32(6) * span
        np.divide(_F32(1), norm, out=norm)
        diff = _pick(g - b, red_max, b - r, green_max, r - g)
        diff *= norm
    # The kernel adds the double constants 2.0 / 6.0 and 4.0 / 6.0 in double and then stores
    # to float: one rounding, which a float32 sum would not reproduce. (2 * (2.0 / 6.0) is
    # 4.0 / 6.0 exactly.)
    not_red = ~red_max
    step = not_red.view(np.int8) * (1 + (not_red & ~green_max).view(np.int8))  # 0, 1 or 2
    hue = (diff + step * (2.0 / 6.0)).astype(_F32)
    hue = _select(~(span <= 0), hue)
    hue += (hue < 0).view(np.uint8)  # the kernel's hh + 1 where hh < 0
    saturation *= np.asarray(factors, _F32).reshape(-1, 1, 1)
    np.clip(saturation, 0, 1, out=saturation)
    # hsv_to_rgb (the kernel's own, not the Eigen one of tf.image.hsv_to_rgb)
    chroma = saturation * value
    base = value - chroma
    scaled = hue * _F32(6)
    sector = scaled.astype(np.int8)
    # fmod(scaled, 2) by the kernel's subtraction loop: exact, as is this subtraction.
    cycle = scaled - (sector & ~1)
    cycle -= _F32(1)
    np.abs(cycle, out=cycle)
    np.subtract(_F32(1), cycle, out=cycle)
    second = cycle
    second *= chroma
    # Per sector, which of (chroma, second, 0) each channel gets; sector 6 (h rounded up to 1)
    # is the kernel's default case: all zero.
    red = _pick(chroma, _in(sector, 0, 5), second, _in(sector, 1, 4), _F32(0))
    green = _pick(chroma, _in(sector, 1, 2), second, _in(sector, 0, 3), _F32(0))
    blue = _pick(chroma, _in(sector, 3, 4), second, _in(sector, 2, 5), _F32(0))
    red += base
    green += base
    blue += base
    return _from_float32(_interleave(red, green, blue), dtype, saturate=False)


def adjust_saturation(image: np.ndarray, saturation_factor: float) -> np.ndarray:
    """Scale the HSV saturation by ``saturation_factor``: ``tf.image.adjust_saturation``.

    Replays TensorFlow's fused CPU kernel (RGB to HSV, scale and clip the saturation to
    ``[0, 1]``, back), in float32; integer images go through float32 ``[0, 1]`` and back.
    float16 images are computed in float32.

    Args:
        image: RGB image(s), ``[H, W, 3]`` or ``[N, H, W, 3]``.
        saturation_factor: the factor; 0 gives gray, 1 the image as it is.

    Returns:
        The adjusted image(s), same shape and dtype.

    Raises:
        InvalidArgumentError: a bad rank, not 3 channels, or a non-finite factor.

    Example:
        >>> adjust_saturation(np.array([[[200, 100, 100]]], np.uint8), 0.0)
        array([[[200, 200, 200]]], dtype=uint8)
    """
    batch, single = _images(image, "adjust_saturation", channels=3)
    factor = _scalar(saturation_factor, "adjust_saturation", "saturation_factor")
    return restore(_saturation(batch, np.full(batch.shape[0], factor)), single)


# ---------------------------------------------------------------------------------------------
# Random forms: one draw per image, then the deterministic operation.


def _check_range(op: str, lower: float, upper: float) -> tuple[float, float]:
    lower = _scalar(lower, op, "lower")
    upper = _scalar(upper, op, "upper")
    if upper <= lower:
        raise InvalidArgumentError(f"{op}: upper must be > lower; got lower={lower}, "
                                   f"upper={upper}")
    if lower < 0:
        raise InvalidArgumentError(f"{op}: lower must be non-negative; got lower={lower}")
    return lower, upper


def _max_delta(op: str, max_delta: float, limit: float | None = None) -> float:
    max_delta = _scalar(max_delta, op, "max_delta")
    if max_delta < 0:
        raise InvalidArgumentError(f"{op}: max_delta must be non-negative; got {max_delta}")
    if limit is not None and max_delta > limit:
        raise InvalidArgumentError(f"{op}: max_delta must be <= {limit}; got {max_delta}")
    return max_delta


def random_brightness(image: np.ndarray, max_delta: float, seed: Seed = None) -> np.ndarray:
    """:func:`adjust_brightness` by a delta drawn uniformly from ``[-max_delta, max_delta)``.

    One delta per image of a batch (TensorFlow draws one for the whole batch; see the module
    notes): ``generator_for(seed).uniform(-max_delta, max_delta, size=N)``.

    Args:
        image: one image ``[H, W, C]`` or a batch ``[N, H, W, C]``.
        max_delta: a non-negative bound of the delta, in ``[0, 1]`` units.
        seed: an int, a pair of ints, a numpy Generator, or None (fresh entropy).

    Returns:
        The adjusted image(s), same shape and dtype.

    Raises:
        InvalidArgumentError: a bad rank or a negative ``max_delta``.

    Example:
        >>> image = np.full((2, 2, 3), 100, np.uint8)
        >>> a = random_brightness(image, 0.2, seed=(1, 2))
        >>> bool((a == random_brightness(image, 0.2, seed=(1, 2))).all())
        True
    """
    batch, single = _images(image, "random_brightness")
    max_delta = _max_delta("random_brightness", max_delta)
    deltas = generator_for(seed).uniform(-max_delta, max_delta, size=batch.shape[0])
    return restore(_brightness(batch, deltas), single)


def random_contrast(image: np.ndarray, lower: float, upper: float,
                    seed: Seed = None) -> np.ndarray:
    """:func:`adjust_contrast` by a factor drawn uniformly from ``[lower, upper)``, per image.

    Args:
        image: one image ``[H, W, C]`` or a batch ``[N, H, W, C]``.
        lower: the smallest factor, non-negative.
        upper: the bound of the factors, greater than ``lower``.
        seed: an int, a pair of ints, a numpy Generator, or None (fresh entropy).

    Returns:
        The adjusted image(s), same shape and dtype.

    Raises:
        InvalidArgumentError: a bad rank, ``upper <= lower`` or ``lower < 0``.

    Example:
        >>> image = np.arange(12, dtype=np.uint8).reshape(2, 2, 3) * 20
        >>> random_contrast(image, 0.5, 1.5, seed=7).shape
        (2, 2, 3)
    """
    batch, single = _images(image, "random_contrast")
    lower, upper = _check_range("random_contrast", lower, upper)
    factors = generator_for(seed).uniform(lower, upper, size=batch.shape[0])
    return restore(_contrast(batch, factors), single)


def random_saturation(image: np.ndarray, lower: float, upper: float,
                      seed: Seed = None) -> np.ndarray:
    """:func:`adjust_saturation` by a factor drawn uniformly from ``[lower, upper)``, per image.

    Args:
        image: RGB image(s), ``[H, W, 3]`` or ``[N, H, W, 3]``.
        lower: the smallest factor, non-negative.
        upper: the bound of the factors, greater than ``lower``.
        seed: an int, a pair of ints, a numpy Generator, or None (fresh entropy).

    Returns:
        The adjusted image(s), same shape and dtype.

    Raises:
        InvalidArgumentError: a bad rank, not 3 channels, ``upper <= lower`` or ``lower < 0``.

    Example:
        >>> image = np.array([[[200, 100, 50]]], np.uint8)
        >>> random_saturation(image, 0.0, 1e-9, seed=0)  # a factor of about 0: gray
        array([[[200, 200, 200]]], dtype=uint8)
    """
    batch, single = _images(image, "random_saturation", channels=3)
    lower, upper = _check_range("random_saturation", lower, upper)
    factors = generator_for(seed).uniform(lower, upper, size=batch.shape[0])
    return restore(_saturation(batch, factors), single)


def random_hue(image: np.ndarray, max_delta: float, seed: Seed = None) -> np.ndarray:
    """:func:`adjust_hue` by a delta drawn uniformly from ``[-max_delta, max_delta)``, per image.

    Args:
        image: RGB image(s), ``[H, W, 3]`` or ``[N, H, W, 3]``.
        max_delta: the bound of the rotation, in ``[0, 0.5]`` turns.
        seed: an int, a pair of ints, a numpy Generator, or None (fresh entropy).

    Returns:
        The adjusted image(s), same shape and dtype.

    Raises:
        InvalidArgumentError: a bad rank, not 3 channels, or ``max_delta`` outside ``[0, 0.5]``.

    Example:
        >>> gray = np.full((1, 2, 3), 90, np.uint8)
        >>> random_hue(gray, 0.5, seed=3)  # gray has no hue to rotate
        array([[[90, 90, 90],
                [90, 90, 90]]], dtype=uint8)
    """
    batch, single = _images(image, "random_hue", channels=3)
    max_delta = _max_delta("random_hue", max_delta, limit=0.5)
    deltas = generator_for(seed).uniform(-max_delta, max_delta, size=batch.shape[0])
    return restore(_hue(batch, deltas), single)


# ---------------------------------------------------------------------------------------------
# Colour space conversions.

_GRAY = np.array([0.2989, 0.5870, 0.1140], _F32)


def rgb_to_grayscale(images: np.ndarray) -> np.ndarray:
    """Luma ``0.2989 R + 0.5870 G + 0.1140 B``: ``tf.image.rgb_to_grayscale``.

    Computed on float32 ``[0, 1]`` values and converted back to the input's dtype (without
    saturation, as TensorFlow: the weights sum to less than 1).

    Args:
        images: RGB image(s), ``[H, W, 3]`` or ``[N, H, W, 3]``.

    Returns:
        Grayscale image(s) ``[..., 1]`` of the input's dtype.

    Raises:
        InvalidArgumentError: a bad rank or not 3 channels.

    Example:
        >>> rgb_to_grayscale(np.array([[[255, 255, 255], [255, 0, 0]]], np.uint8))
        array([[[255],
                [ 76]]], dtype=uint8)
    """
    batch, single = _images(images, "rgb_to_grayscale", channels=3)
    dtype = batch.dtype
    values = batch if batch.dtype == _F32 else convert_image_dtype(batch, _F32)
    gray = values[..., 0] * _GRAY[0]
    gray += values[..., 1] * _GRAY[1]
    gray += values[..., 2] * _GRAY[2]
    return restore(_from_float32(gray[..., None], dtype, saturate=False), single)


def grayscale_to_rgb(images: np.ndarray) -> np.ndarray:
    """Repeat the one channel three times: ``tf.image.grayscale_to_rgb``.

    Args:
        images: grayscale image(s), ``[H, W, 1]`` or ``[N, H, W, 1]``.

    Returns:
        RGB image(s) ``[..., 3]`` of the input's dtype (a new array).

    Raises:
        InvalidArgumentError: a bad rank or not 1 channel.

    Example:
        >>> grayscale_to_rgb(np.array([[[7], [9]]], np.uint8))
        array([[[7, 7, 7],
                [9, 9, 9]]], dtype=uint8)
    """
    batch, single = _images(images, "grayscale_to_rgb", channels=1)
    return restore(np.repeat(batch, 3, axis=-1), single)


def _float_images(images: object, op: str) -> tuple[np.ndarray, bool, np.dtype]:
    batch, single = _images(images, op, channels=3)
    if batch.dtype.kind != "f":
        raise InvalidArgumentError(f"{op}: images must be floating point (values in [0, 1]); "
                                   f"got {batch.dtype}: convert with "
                                   f"convert_image_dtype(images, np.float32) first")
    # Computed in the input's dtype, as TensorFlow's functor is: float16 rounds every step.
    return batch, single, batch.dtype


def rgb_to_hsv(images: np.ndarray) -> np.ndarray:
    """RGB to HSV, every component in ``[0, 1]``: ``tf.image.rgb_to_hsv``.

    Hue is in turns (``0`` red, ``1/3`` green, ``2/3`` blue); a gray pixel has hue and
    saturation 0. The formulas are TensorFlow's (its ``RGBToHSV`` functor).

    Args:
        images: float RGB image(s) in ``[0, 1]``, ``[H, W, 3]`` or ``[N, H, W, 3]``.

    Returns:
        HSV image(s) of the same shape and dtype.

    Raises:
        InvalidArgumentError: a bad rank, not 3 channels, or an integer dtype.

    Example:
        >>> rgb_to_hsv(np.array([[[0.0, 0.5, 0.0]]], np.float32))
        array([[[0.33333334, 1.        , 0.5       ]]], dtype=float32)
    """
    batch, single, dtype = _float_images(images, "rgb_to_hsv")
    scalar = batch.dtype.type
    r, g, b = np.moveaxis(batch, -1, 0).copy()
    value = np.maximum(np.maximum(r, g), b)
    span = value - np.minimum(np.minimum(r, g), b)
    with np.errstate(divide="ignore", invalid="ignore"):
        saturation = _select(value > 0, span / value)
        norm = (scalar(1) / span) * (scalar(1) / scalar(6))
        hue = _pick(norm * (g - b), r == value, norm * (b - r) + scalar(2) / scalar(6),
                    g == value, norm * (r - g) + scalar(4) / scalar(6))
    hue = _select(span > 0, hue)
    hue = _select(hue < 0, hue + scalar(1), hue)
    out = np.stack([hue, saturation, value], axis=-1).astype(dtype, copy=False)
    return restore(out, single)


def hsv_to_rgb(images: np.ndarray) -> np.ndarray:
    """HSV to RGB, the inverse of :func:`rgb_to_hsv`: ``tf.image.hsv_to_rgb``.

    Args:
        images: float HSV image(s), components in ``[0, 1]``, ``[H, W, 3]`` or ``[N, H, W, 3]``.

    Returns:
        RGB image(s) of the same shape and dtype.

    Raises:
        InvalidArgumentError: a bad rank, not 3 channels, or an integer dtype.

    Example:
        >>> hsv_to_rgb(np.array([[[2 / 3, 1.0, 1.0]]], np.float32))
        array([[[0., 0., 1.]]], dtype=float32)
    """
    batch, single, dtype = _float_images(images, "hsv_to_rgb")
    scalar = batch.dtype.type
    hue, saturation, value = np.moveaxis(batch, -1, 0).copy()
    scaled = hue * scalar(6)
    one, two = scalar(1), scalar(2)
    red = np.clip(np.abs(scaled - scalar(3)) - one, 0, 1)
    green = np.clip(two - np.abs(scaled - two), 0, 1)
    blue = np.clip(two - np.abs(scaled - scalar(4)), 0, 1)
    rest = one - saturation
    out = np.empty(batch.shape, batch.dtype)
    for channel, weight in enumerate((red, green, blue)):
        out[..., channel] = (rest + saturation * weight) * value
    return restore(out.astype(dtype, copy=False), single)
