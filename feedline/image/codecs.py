"""Image codecs: tf.io's ``decode_jpeg`` / ``decode_png`` / ``decode_gif`` / ``decode_webp`` /
``decode_image``, ``decode_and_crop_jpeg``, ``extract_jpeg_shape``, ``encode_jpeg`` /
``encode_png``.

Every decoder takes one encoded image (``bytes``) or a batch of them (a sequence or a 1-D
object array, as ``Dataset.batch`` makes of ``bytes`` elements); a batch decodes into one
stacked array ``[N, H, W, C]`` when the images agree in shape, and is an
:class:`~feedline.InvalidArgumentError` naming the first disagreeing element otherwise.

The work runs in native code that releases the GIL (libjpeg-turbo through simplejpeg for JPEG,
OpenCV for PNG and BMP, Pillow for GIF and WebP), so a threaded ``Dataset.map`` decodes on
every core. Where simplejpeg or OpenCV is missing (free-threaded CPython has no wheels of
either) JPEG, PNG and BMP decode through Pillow; :func:`~feedline.image.backend` says which
library each format uses, and what that changes.

Pixels are TensorFlow's: ``decode_jpeg`` uses libjpeg-turbo with tf.io's defaults (the fast
integer IDCT, fancy upsampling) and gives the same bytes as ``tf.io.decode_jpeg`` for the
recorded images (CMYK and YCCK files included); PNG channel conversions follow libpng's as
TensorFlow calls it.

Decoders read an image's size (and an animation's frame count) from its header before
decoding and refuse one over the decode limits (:func:`set_decode_limits`): a few hundred
bytes can declare gigapixels.
"""

from __future__ import annotations

import os
import struct
from collections.abc import Callable, Iterator, Sequence
from typing import NamedTuple

import numpy as np

from feedline.core.errors import InvalidArgumentError
from feedline.image import _backend, _native

Contents = bytes | bytearray | memoryview | np.ndarray | Sequence[bytes]
"""One encoded image, or a batch of them (a sequence or 1-D array of ``bytes``)."""

_JPEG_MAGIC = b"\xff\xd8\xff"
_PNG_MAGIC = b"\x89PNG\r\n\x1a\n"
_GIF_MAGICS = (b"GIF87a", b"GIF89a")
_BMP_MAGIC = b"BM"
_RIFF_MAGIC, _WEBP_MAGIC = b"RIFF", b"WEBP"  # a WebP file: RIFF, its size, WEBP
# libpng's rgb_to_gray coefficients for (0.299, 0.587), the weights tf.io.decode_png asks for,
# in 1/32768 units; 8-bit samples truncate, 16-bit samples round (libpng's two code paths).
_GRAY_WEIGHTS = (9797, 19234, 3737)

DEFAULT_MAX_PIXELS = 89_478_485
"""Pillow's ``Image.MAX_IMAGE_PIXELS``: the default cap on one image's (one frame's) pixels."""
DEFAULT_MAX_ANIMATION_BYTES = 1 << 30
"""The default cap on an animation's decoded frames together (1 GiB)."""
_MAX_PIXELS_ENV = "FEEDLINE_IMAGE_MAX_PIXELS"
_MAX_ANIMATION_BYTES_ENV = "FEEDLINE_IMAGE_MAX_ANIMATION_BYTES"


class DecodeLimits(NamedTuple):
    """The decoders' caps on what one encoded image may decode to.

    Attributes:
        max_pixels: Most pixels (height x width) of one image, or of one frame of an animation.
        max_animation_bytes: Most bytes of all of an animation's frames decoded together
            (``frames * height * width * 3`` for a GIF, ``* 4`` for a WebP's RGBA).
    """

    max_pixels: int
    max_animation_bytes: int


def _limit_from_env(name: str, default: int) -> int:
    value = os.environ.get(name)
    if not value:
        return default
    try:
        limit = int(value)
    except ValueError:
        limit = 0
    if limit <= 0:
        raise InvalidArgumentError(f"environment variable {name} must be a positive integer; "
                                   f"got {value!r}")
    return limit


def decode_limits() -> DecodeLimits:
    """The decode limits in force: :func:`set_decode_limits`' values, else the defaults
    (:data:`DEFAULT_MAX_PIXELS`, :data:`DEFAULT_MAX_ANIMATION_BYTES`).

    Example:
        >>> decode_limits().max_pixels
        89478485
    """
    return DecodeLimits(_limit_from_env(_MAX_PIXELS_ENV, DEFAULT_MAX_PIXELS),
                        _limit_from_env(_MAX_ANIMATION_BYTES_ENV, DEFAULT_MAX_ANIMATION_BYTES))


def set_decode_limits(max_pixels: int | None = None,
                      max_animation_bytes: int | None = None) -> DecodeLimits:
    """Set the caps that keep a small crafted file (a decompression bomb) from decoding to
    gigabytes; an argument left ``None`` keeps its current value.

    Every decoder reads the size a file declares (and an animation's frame count) before
    decoding and raises :class:`~feedline.InvalidArgumentError` when it is over a cap. The
    defaults are Pillow's ``MAX_IMAGE_PIXELS`` (89,478,485 pixels, about 256 MiB of RGB) per
    image or frame and 1 GiB for all of a GIF's or WebP's frames (``expand_animations=False``
    decodes only the first). Peak memory of one decode stays within a small multiple
    of the capped result (a progressive JPEG keeps its coefficients too: up to about 9 bytes a
    pixel). The limits live in the environment (``FEEDLINE_IMAGE_MAX_PIXELS``,
    ``FEEDLINE_IMAGE_MAX_ANIMATION_BYTES``), so worker processes started afterwards inherit them;
    setting those variables before starting Python does the same. Pixels over twice Pillow's
    own ``PIL.Image.MAX_IMAGE_PIXELS`` in a GIF need that raised too.

    Args:
        max_pixels: Most pixels (height x width) of one image or animation frame.
        max_animation_bytes: Most bytes of an animation's frames decoded together.

    Returns:
        The limits in force before the call (to restore them).

    Raises:
        InvalidArgumentError: a limit that is not a positive integer.

    Example:
        >>> previous = set_decode_limits(max_pixels=16)
        >>> try:
        ...     decode_png(encode_png(np.zeros((5, 5, 1), np.uint8)))
        ... except InvalidArgumentError as error:
        ...     print(str(error)[:72])
        decode_png: the image is 5 x 5 = 25 pixels, over the decode limit of 16
        >>> _ = set_decode_limits(*previous)
    """
    previous = decode_limits()
    for name, value in ((_MAX_PIXELS_ENV, max_pixels),
                        (_MAX_ANIMATION_BYTES_ENV, max_animation_bytes)):
        if value is None:
            continue
        if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value <= 0:
            raise InvalidArgumentError(f"set_decode_limits: limits are positive integers; got "
                                       f"{value!r}")
        os.environ[name] = str(int(value))
    return previous


def _over_limit(op: str, what: str, found: int, limit: int, unit: str, setting: str) -> str:
    return (f"{op}: {what} = {found:,} {unit}, over the decode limit of {limit:,} {unit}; a "
            f"small file declaring a huge image is a decompression bomb. If the file is "
            f"trusted, raise the limit: feedline.image.set_decode_limits({setting}=...)")


def _check_pixels(op: str, height: int, width: int, what: str = "the image is") -> None:
    limit = decode_limits().max_pixels
    if height * width > limit:
        raise InvalidArgumentError(_over_limit(op, f"{what} {height:,} x {width:,}",
                                               height * width, limit, "pixels", "max_pixels"))


def _one(contents: object, op: str) -> bytes | None:
    """``contents`` as one encoded image, or None if it is a batch of them."""
    if isinstance(contents, (bytes, bytearray, memoryview)):
        return bytes(contents)
    if isinstance(contents, np.ndarray) and contents.ndim == 0:
        return _one(contents.item(), op)
    if isinstance(contents, str):
        raise InvalidArgumentError(f"{op}: expected encoded image bytes, got a str "
                                   f"({contents[:20]!r}...); read the file's bytes first")
    if isinstance(contents, (Sequence, np.ndarray)):
        return None
    raise InvalidArgumentError(f"{op}: expected encoded image bytes or a batch of them; got "
                               f"{type(contents).__name__}")


def _map_contents(contents: object, op: str, decode: Callable[[bytes], np.ndarray],
                  per_item: Sequence[object] | None = None) -> np.ndarray:
    """Decode one image or each of a batch, stacking a batch into one array."""
    data = _one(contents, op)
    if data is not None:
        return decode(data)
    items = list(np.asarray(contents, dtype=object).reshape(-1)
                 if isinstance(contents, np.ndarray) else contents)
    if isinstance(contents, np.ndarray) and contents.ndim != 1:
        raise InvalidArgumentError(f"{op}: a batch of encoded images is 1-D; got shape "
                                   f"{contents.shape}")
    images = []
    for index, item in enumerate(items):
        one = _one(item, op)
        if one is None:
            raise InvalidArgumentError(f"{op}: element {index} of the batch is not encoded "
                                       f"image bytes ({type(item).__name__})")
        try:
            images.append(decode(one) if per_item is None else decode(one, per_item[index]))
        except InvalidArgumentError as error:
            raise InvalidArgumentError(f"element {index} of the batch: {error}") from error
    if not images:
        raise InvalidArgumentError(f"{op}: the batch of encoded images is empty")
    for index, image in enumerate(images):
        if image.shape != images[0].shape:
            raise InvalidArgumentError(
                f"{op}: the images of a batch decode to different shapes (element 0: "
                f"{images[0].shape}, element {index}: {image.shape}); decode before batching, "
                "or crop/resize to one size in the same map")
    return np.stack(images)


def _preview(data: bytes) -> str:
    return f"{len(data)} bytes starting with {data[:8]!r}"


def _check_channels(channels: int | None, allowed: tuple[int, ...], op: str) -> int:
    channels = 0 if channels is None else int(channels)
    if channels not in allowed:
        raise InvalidArgumentError(f"{op}: channels must be one of {allowed}; got {channels}")
    return channels


def _dct_fast(dct_method: str, op: str) -> bool:
    # tf.io's "" (its default) is libjpeg's JDCT_IFAST, as "INTEGER_FAST" is; measured equal.
    if dct_method in ("", "INTEGER_FAST"):
        return True
    if dct_method == "INTEGER_ACCURATE":
        return False
    raise InvalidArgumentError(f'{op}: dct_method is "", "INTEGER_FAST" or "INTEGER_ACCURATE"; '
                               f"got {dct_method!r}")


def is_jpeg(contents: bytes) -> bool:
    """Whether ``contents`` starts like a JPEG file, as ``tf.io.is_jpeg``.

    Example:
        >>> is_jpeg(encode_jpeg(np.zeros((2, 2, 3), np.uint8))), is_jpeg(b"GIF89a")
        (True, False)
    """
    return bytes(contents[:3]) == _JPEG_MAGIC


def extract_jpeg_shape(contents: bytes, output_type: type = np.int32) -> np.ndarray:
    """The ``[height, width, channels]`` of a JPEG from its header, without decoding it, as
    ``tf.io.extract_jpeg_shape``.

    Args:
        contents: One JPEG-encoded image.
        output_type: ``np.int32`` or ``np.int64``.

    Returns:
        A 1-D array of 3 ints.

    Raises:
        InvalidArgumentError: ``contents`` is not a JPEG header.

    Example:
        >>> extract_jpeg_shape(encode_jpeg(np.zeros((5, 7, 3), np.uint8))).tolist()
        [5, 7, 3]
    """
    data = _one(contents, "extract_jpeg_shape")
    if data is None:
        raise InvalidArgumentError("extract_jpeg_shape: expected one JPEG, got a batch")
    height, width, colorspace, _ = _jpeg_header(data, "extract_jpeg_shape")
    channels = {"Gray": 1, "CMYK": 4, "YCCK": 4}.get(colorspace, 3)
    return np.array([height, width, channels], dtype=output_type)


def _jpeg_header(data: bytes, op: str, **scaling: int) -> tuple[int, int, str, str]:
    if not data.startswith(_JPEG_MAGIC):
        raise InvalidArgumentError(f"{op}: expected JPEG data (starting with FF D8 FF); got "
                                   f"{_preview(data)}")
    if _backend.jpeg_library() == "pillow":
        header = _frame_header(data, op)
        if not _reaches_a_scan(data):  # as libjpeg's header read fails (simplejpeg's path)
            raise InvalidArgumentError(f"{op}: invalid or truncated JPEG header (it ends before "
                                       f"the first scan); got {_preview(data)}")
        return header
    try:
        return _native.simplejpeg().decode_jpeg_header(data, **scaling)
    except (ValueError, RuntimeError) as error:
        raise InvalidArgumentError(f"{op}: invalid or truncated JPEG header ({error}); got "
                                   f"{_preview(data)}") from None
    except KeyError:
        # simplejpeg names only the chroma subsamplings it knows: libjpeg-turbo's newer ones
        # (4:4:1) and unusual sampling factors are a KeyError there. Its decoder still reads
        # them; the frame header says what this needs.
        return _frame_header(data, op)


def _jpeg_segments(data: bytes) -> Iterator[tuple[int, int, int]]:
    """``(marker, payload offset, payload length)`` of a JPEG's header segments, up to the
    first scan; stops at the first byte that is not a marker (libjpeg then fails anyway)."""
    position = 2
    while position + 4 <= len(data):
        if data[position] != 0xFF:
            return
        marker = data[position + 1]
        if marker == 0xFF:  # a fill byte
            position += 1
            continue
        if marker in (0x01, 0xD8) or 0xD0 <= marker <= 0xD7:  # markers without a length
            position += 2
            continue
        if marker in (0xD9, 0xDA):  # the end, or the first scan
            return
        length = int.from_bytes(data[position + 2:position + 4], "big")
        yield marker, position + 4, length - 2
        position += 2 + length


def _reaches_a_scan(data: bytes) -> bool:
    """Whether the header segments are whole up to a start-of-scan marker (the walk of
    :func:`_jpeg_segments`)."""
    position = 2
    while position + 4 <= len(data) and data[position] == 0xFF:
        marker = data[position + 1]
        if marker == 0xDA:
            return True
        if marker == 0xD9:
            return False
        if marker == 0xFF:
            position += 1
        elif marker in (0x01, 0xD8) or 0xD0 <= marker <= 0xD7:
            position += 2
        else:
            position += 2 + int.from_bytes(data[position + 2:position + 4], "big")
    return False


def _frame_header(data: bytes, op: str) -> tuple[int, int, str, str]:
    """``(height, width, colorspace, "unknown")`` from the first SOF segment."""
    for marker, at, length in _jpeg_segments(data):
        if 0xC0 <= marker <= 0xCF and marker not in (0xC4, 0xC8, 0xCC) and length >= 6:
            height, width = struct.unpack(">HH", data[at + 1:at + 5])
            components = data[at + 5]
            adobe = _adobe_transform(data)
            colorspace = {1: "Gray", 3: "YCbCr"}.get(
                components, "YCCK" if components == 4 and adobe == 2 else "CMYK")
            return height, width, colorspace, "unknown"
    raise InvalidArgumentError(f"{op}: invalid or truncated JPEG header (no frame header "
                               f"before the first scan); got {_preview(data)}")


def _adobe_transform(data: bytes) -> int | None:
    """The transform byte of the Adobe APP14 marker libjpeg would see (it decides how CMYK
    samples are stored: Adobe's are inverted, and 2 means YCCK), or None without one."""
    for marker, at, length in _jpeg_segments(data):
        # libjpeg's examine_app14: at least 12 bytes of data starting with "Adobe".
        if marker == 0xEE and length >= 12 and data[at:at + 5] == b"Adobe":
            return data[at + 11]
    return None


def _cmyk_to_rgb(cmyk: np.ndarray, adobe: bool) -> np.ndarray:
    """TensorFlow's conversion of libjpeg's CMYK output (tensorflow/core/lib/jpeg/jpeg_mem.cc):
    Adobe files store inverted CMYK, so ``R = K * C / 255``; others ``(255 - K)(255 - C) / 255``,
    in integers (truncated)."""
    wide = cmyk.astype(np.uint16)
    if not adobe:
        wide = np.uint16(255) - wide
    return (wide[..., :3] * wide[..., 3:4] // np.uint16(255)).astype(np.uint8)


def _decode_jpeg_one(data: bytes, channels: int, fast: bool, fancy_upscaling: bool, op: str,
                     ratio: int = 1, min_size: tuple[int, int] | None = None) -> np.ndarray:
    height, width, colorspace, _ = _jpeg_header(data, op)
    # libjpeg allocates the whole image (and, for a progressive file, its coefficients) from
    # the header's size before reading any scan: check it first.
    _check_pixels(op, height, width)
    cmyk = colorspace in ("CMYK", "YCCK")
    if cmyk and channels == 1:
        # As TensorFlow: libjpeg has no CMYK -> grayscale conversion ("Unsupported color
        # conversion request").
        raise InvalidArgumentError(f"{op}: a {colorspace} JPEG decodes to RGB (channels 0 or "
                                   f"3), not to grayscale (channels=1), as in TensorFlow; "
                                   f"got {_preview(data)}")
    if channels == 0:
        channels = 1 if colorspace == "Gray" else 3
    scaling = {}
    if ratio != 1:
        # The smallest libjpeg scale M/8 with both sides >= ceil(side / ratio) and at least
        # ratio-fold is 1/ratio: tf.io's ratio exactly.
        scaling = {"min_height": -(-height // ratio), "min_width": -(-width // ratio),
                   "min_factor": ratio}
    elif min_size is not None:
        scaling = {"min_height": int(min_size[0]), "min_width": int(min_size[1])}
    target = "CMYK" if cmyk else "GRAY" if channels == 1 else "RGB"
    if _backend.jpeg_library() == "pillow":
        image = _decode_jpeg_pillow(data, op, target, fast, fancy_upscaling,
                                    _pillow_scale(height, width, ratio, min_size))
    else:
        try:
            image = _native.simplejpeg().decode_jpeg(
                data, colorspace=target, fastdct=fast, fastupsample=not fancy_upscaling,
                strict=True, **scaling)
        except (ValueError, RuntimeError) as error:
            raise InvalidArgumentError(f"{op}: invalid or truncated JPEG data ({error}); got "
                                       f"{_preview(data)}") from None
    if cmyk:
        # libjpeg gives CMYK (YCCK converted to it); TensorFlow turns that into RGB itself.
        return _cmyk_to_rgb(image, _adobe_transform(data) is not None)
    return image.reshape(image.shape[0], image.shape[1], channels)


def _pillow_scale(height: int, width: int, ratio: int, min_size: tuple[int, int] | None) -> int:
    """The denominator of the 1/N libjpeg scale Pillow decodes at: ``ratio``, or for
    ``min_size`` the smallest of 1/8, 1/4, 1/2 and 1 that keeps both sides at least that
    (Pillow asks libjpeg for no M/8 scale, as simplejpeg does)."""
    if min_size is None:
        return ratio
    for scale in (8, 4, 2):
        if -(-height // scale) >= int(min_size[0]) and -(-width // scale) >= int(min_size[1]):
            return scale
    return 1


def _decode_jpeg_pillow(data: bytes, op: str, target: str, fast: bool, fancy_upscaling: bool,
                        scale: int) -> np.ndarray:
    """libjpeg-turbo through Pillow, with simplejpeg's settings where Pillow can ask for them.

    Pillow's decoder takes ``(scale, draft)``: libjpeg's 1/scale output, and draft's fast
    integer IDCT *with* fancy upsampling off. So the accurate IDCT with fancy upsampling
    (Pillow's default) and the fast IDCT without it (draft) are simplejpeg's pixels exactly;
    tf.io's default (fast IDCT, fancy upsampling) has no Pillow setting and decodes with the
    accurate IDCT, and the accurate IDCT without fancy upsampling with the fast one: the IDCT
    moves pixels by a few levels, fancy upsampling by tens (:func:`~feedline.image.backend`).
    """
    import io

    pil = _native.pil_image()
    try:
        with pil.open(io.BytesIO(data), formats=["JPEG"]) as image:
            width, height = image.size
            codec, _, offset, args = image.tile[0]
            if target == "GRAY" and args[0] != "L":
                # libjpeg's YCbCr -> grayscale output (the luma plane), as Pillow's draft("L").
                args = ("L", "")
                image._mode = "L"
            extents = (0, 0, -(-width // scale), -(-height // scale))
            tile = (codec, extents, offset, args)
            image.tile = [type(image.tile[0])(*tile) if hasattr(image.tile[0], "_fields")
                          else tile]
            image._size = extents[2:]
            image.decoderconfig = (scale, 0 if fancy_upscaling else 1)
            image.load()
            mode = image.mode
            pixels = np.array(image)
    except (InvalidArgumentError, MemoryError):
        raise
    except Exception as error:  # noqa: BLE001 - Pillow's errors on crafted bytes vary by type
        raise InvalidArgumentError(f"{op}: invalid or truncated JPEG data "
                                   f"({type(error).__name__}: {error}); got "
                                   f"{_preview(data)}") from None
    if mode == "CMYK":
        # Pillow inverts every CMYK file's samples on reading ("CMYK;I", Adobe's convention
        # assumed); the conversion below takes them as libjpeg gives them.
        pixels = np.uint8(255) - pixels
    if pixels.ndim == 2:
        pixels = pixels[..., None]
    if target == "RGB" and pixels.shape[-1] == 1:  # libjpeg's gray -> RGB repeats the sample
        pixels = np.repeat(pixels, 3, axis=-1)
    return pixels


def decode_jpeg(contents: Contents, channels: int = 0, ratio: int = 1,
                fancy_upscaling: bool = True, dct_method: str = "", *,
                min_size: tuple[int, int] | None = None) -> np.ndarray:
    """Decode JPEG images to ``uint8`` arrays ``[H, W, channels]``, as ``tf.io.decode_jpeg``.

    The exact path (the default) gives ``tf.io.decode_jpeg``'s pixels (libjpeg-turbo's fast
    integer IDCT, which is TensorFlow's ``dct_method=""``, and fancy upsampling). Through
    Pillow (where simplejpeg is missing: free-threaded CPython; :func:`~feedline.image.backend`)
    ``dct_method="INTEGER_ACCURATE"`` gives the same pixels and the default differs by a few
    levels.

    Args:
        contents: One JPEG-encoded image, or a batch of them (a sequence or 1-D array of bytes).
        channels: 0 for the file's own (1 for grayscale, 3 otherwise), 1 for grayscale, 3 for RGB.
            CMYK and YCCK files decode to RGB as TensorFlow converts them (``R = K * C / 255`` on
            an Adobe file's inverted samples); like TensorFlow, not to grayscale.
        ratio: Downscale by 1, 2, 4 or 8 while decoding (in the DCT domain), as tf.io's ``ratio``:
            the result is ``ceil(H / ratio) x ceil(W / ratio)``, with TensorFlow's pixels.
        fancy_upscaling: Smooth (True, tf.io's default) or replicate chroma when upsampling.
        dct_method: ``""`` or ``"INTEGER_FAST"`` (the same, tf.io's default) or
            ``"INTEGER_ACCURATE"``.
        min_size: Opt-in DCT-domain downscale to the smallest libjpeg scale (a multiple of 1/8)
            whose result is at least ``(min_height, min_width)``: far less work when the image
            will be resized smaller anyway. The result's size and pixels differ from the exact
            path (it is a different resampling); resize it to the final size afterwards.
            Only scales of 1/2 and below save time: libjpeg-turbo's 3/8..7/8 scales run
            without SIMD and were slower than the full decode (320x320 to min_size 224,
            which is 6/8: about 1,050 vs 1,590 images/s on one thread, measured).

    Returns:
        ``[H, W, channels]`` uint8 for one image; ``[N, H, W, channels]`` for a batch.

    Raises:
        InvalidArgumentError: ``contents`` is not a JPEG, is truncated or damaged, is larger
            than :func:`set_decode_limits` allows, or a batch's images differ in shape.

    Example:
        >>> image = np.zeros((32, 48, 3), np.uint8)
        >>> decode_jpeg(encode_jpeg(image)).shape
        (32, 48, 3)
        >>> decode_jpeg([encode_jpeg(image)] * 2, channels=1).shape
        (2, 32, 48, 1)
        >>> decode_jpeg(encode_jpeg(image), min_size=(10, 10)).shape  # 3/8 of each side
        (12, 18, 3)
    """
    op = "decode_jpeg"
    channels = _check_channels(channels, (0, 1, 3), op)
    fast = _dct_fast(dct_method, op)
    if ratio not in (1, 2, 4, 8):
        raise InvalidArgumentError(f"{op}: ratio is 1, 2, 4 or 8; got {ratio}")
    if min_size is not None and ratio != 1:
        raise InvalidArgumentError(f"{op}: give ratio or min_size, not both")
    return _map_contents(contents, op, lambda data: _decode_jpeg_one(
        data, channels, fast, fancy_upscaling, op, ratio, min_size))


def decode_and_crop_jpeg(contents: Contents, crop_window: Sequence[int] | np.ndarray,
                         channels: int = 0, ratio: int = 1, fancy_upscaling: bool = True,
                         dct_method: str = "") -> np.ndarray:
    """Decode the window ``[y, x, height, width]`` of JPEG images, as
    ``tf.io.decode_and_crop_jpeg``.

    The result equals ``decode_jpeg`` then cropping, exactly. TensorFlow decodes only the
    window's rows and MCU columns (libjpeg-turbo's ``jpeg_crop_scanline``), which restarts the
    chroma upsampling at the window's left MCU edge: its pixels differ from decode-then-crop by
    up to 4 levels (measured) when ``x`` is not a multiple of the MCU width (16 for 4:2:0
    files), and are equal otherwise. simplejpeg exposes no partial decode, so this decodes the
    whole image; to save work on a large image, pair :func:`decode_jpeg`'s ``min_size`` with a
    window in the reduced image.

    Args:
        contents: One JPEG-encoded image, or a batch of them.
        crop_window: ``[y, x, height, width]``; for a batch, one window for all or one per image
            (shape ``[N, 4]``).
        channels: As :func:`decode_jpeg`.
        ratio: As :func:`decode_jpeg`; the window is in the downscaled image's pixels.
        fancy_upscaling: As :func:`decode_jpeg`.
        dct_method: As :func:`decode_jpeg`.

    Returns:
        ``[height, width, channels]`` uint8 (``[N, height, width, channels]`` for a batch).

    Raises:
        InvalidArgumentError: bad JPEG data, an image over the decode limits, or a window
            that is empty or not inside the image.

    Example:
        >>> data = encode_jpeg(np.zeros((32, 48, 3), np.uint8))
        >>> decode_and_crop_jpeg(data, [4, 8, 10, 20]).shape
        (10, 20, 3)
    """
    op = "decode_and_crop_jpeg"
    channels = _check_channels(channels, (0, 1, 3), op)
    fast = _dct_fast(dct_method, op)
    if ratio not in (1, 2, 4, 8):
        raise InvalidArgumentError(f"{op}: ratio is 1, 2, 4 or 8; got {ratio}")
    windows = np.asarray(crop_window)
    if windows.dtype.kind not in "iu" or windows.shape[-1:] != (4,) or windows.ndim > 2:
        raise InvalidArgumentError(f"{op}: crop_window is [y, x, height, width] ints (or [N, 4] "
                                   f"for a batch); got {windows.dtype} shape {windows.shape}")

    def decode(data: bytes, window: np.ndarray = windows) -> np.ndarray:
        if window.ndim != 1:
            raise InvalidArgumentError(f"{op}: one image takes one window [4]; got shape "
                                       f"{window.shape}")
        image = _decode_jpeg_one(data, channels, fast, fancy_upscaling, op, ratio)
        y, x, height, width = (int(value) for value in window)
        if (height <= 0 or width <= 0 or y < 0 or x < 0 or y + height > image.shape[0]
                or x + width > image.shape[1]):
            raise InvalidArgumentError(
                f"{op}: crop window [y={y}, x={x}, height={height}, width={width}] is empty or "
                f"not inside the image of shape {image.shape}")
        return np.ascontiguousarray(image[y:y + height, x:x + width])

    per_item = None
    if windows.ndim == 2 and _one(contents, op) is None:
        count = len(contents)
        if len(windows) != count:
            raise InvalidArgumentError(f"{op}: {len(windows)} crop windows for a batch of "
                                       f"{count} images")
        per_item = list(windows)
    return _map_contents(contents, op, decode, per_item)


def _png_color_type(data: bytes) -> tuple[int, int]:
    # IHDR is the first chunk: 8 signature + 4 length + 4 type + 8 size, then depth, color type.
    return data[24], data[25]


def _to_gray(rgb: np.ndarray) -> np.ndarray:
    wide = rgb.astype(np.uint32)
    gray = (_GRAY_WEIGHTS[0] * wide[..., 0] + _GRAY_WEIGHTS[1] * wide[..., 1]
            + _GRAY_WEIGHTS[2] * wide[..., 2])
    if rgb.dtype == np.uint16:
        gray += 16384
    return (gray >> 15).astype(rgb.dtype)[..., None]


def _convert_channels(image: np.ndarray, native: int, channels: int) -> np.ndarray:
    """libpng's conversions as tf.io.decode_png asks for them: ``image`` is ``[H, W, native]``
    in gray / gray+alpha / RGB / RGBA order."""
    if channels == 0 or channels == native:
        return image
    top = np.iinfo(image.dtype).max
    color = image[..., :3] if native >= 3 else np.repeat(image[..., :1], 3, axis=-1)
    alpha = image[..., native - 1:] if native in (2, 4) else np.full_like(image[..., :1], top)
    if channels == 1:
        return image[..., :1] if native <= 2 else _to_gray(color)
    if channels == 3:
        return np.ascontiguousarray(color)
    return np.concatenate([color, alpha], axis=-1)  # channels == 4


def _header_size(data: bytes, kind: str) -> tuple[int, int] | None:
    """The ``(height, width)`` a PNG's IHDR or a BMP's info header declares, or None when the
    header is too short to say (the decoder then refuses the file before allocating)."""
    if kind == "PNG":
        # IHDR is the first chunk: 8 signature + 4 length + 4 type, then width and height.
        if len(data) < 24 or data[12:16] != b"IHDR":
            return None
        width, height = struct.unpack(">II", data[16:24])
        return height, width
    # BMP: a 14-byte file header, then the info header, whose first field is its size; the
    # 12-byte OS/2 header has 16-bit sides, the others signed 32-bit (negative: top-down).
    if len(data) < 26:
        return None
    if int.from_bytes(data[14:18], "little") == 12:
        width, height = struct.unpack("<HH", data[18:22])
    else:
        width, height = struct.unpack("<ii", data[18:26])
    return abs(height), abs(width)


def _decode_pillow(data: bytes, op: str, kind: str) -> np.ndarray:
    """A PNG or BMP through Pillow, laid out as :func:`_decode_cv2` gives it (gray, gray and
    alpha, RGB or RGBA; 16-bit gray as uint16)."""
    import io

    pil = _native.pil_image()
    try:
        with pil.open(io.BytesIO(data), formats=[kind]) as image:
            image.load()
            mode = image.mode
            if mode == "1":
                image, mode = image.convert("L"), "L"
            elif mode == "P":
                # libpng (and OpenCV's BMP reader for a gray palette) expand a palette.
                palette = np.asarray(image.getpalette() or [], np.uint8).reshape(-1, 3)
                transparent = "transparency" in image.info
                if kind == "BMP" and not transparent and len(palette) and \
                        (palette == palette[:, :1]).all():
                    mode = "L"
                else:
                    mode = "RGBA" if transparent else "RGB"
                image = image.convert(mode)
            elif mode not in ("L", "LA", "RGB", "RGBA", "I;16", "I;16B", "I"):
                image, mode = image.convert("RGB"), "RGB"
            pixels = np.array(image)
    except (InvalidArgumentError, MemoryError):
        raise
    except Exception as error:  # noqa: BLE001 - Pillow's errors on crafted bytes vary by type
        raise InvalidArgumentError(f"{op}: invalid or truncated {kind} data "
                                   f"({type(error).__name__}: {error}); got "
                                   f"{_preview(data)}") from None
    if mode in ("I;16", "I;16B", "I"):
        pixels = pixels.astype(np.uint16)
    return pixels[..., None] if pixels.ndim == 2 else pixels


def _decode_cv2(data: bytes, op: str, kind: str) -> np.ndarray:
    size = _header_size(data, kind)
    if size is not None:
        _check_pixels(op, *size)
    if _backend.png_library() == "pillow":
        return _decode_pillow(data, op, kind)
    cv2 = _native.cv2()
    try:
        image = cv2.imdecode(np.frombuffer(data, np.uint8), cv2.IMREAD_UNCHANGED)
    except cv2.error as error:
        # OpenCV raises (rather than returning None) for what its own checks refuse, such as
        # sizes over its CV_IO_MAX_IMAGE_PIXELS.
        reason = str(error).strip().split("error: ", 1)[-1] or "an OpenCV error"
        raise InvalidArgumentError(f"{op}: invalid {kind} data ({reason}); got "
                                   f"{_preview(data)}") from None
    if image is None:
        raise InvalidArgumentError(f"{op}: invalid or truncated {kind} data; got "
                                   f"{_preview(data)}")
    if image.ndim == 2:
        return image[..., None]
    if image.shape[-1] == 3:
        return image[..., ::-1]
    if image.shape[-1] == 4:
        return image[..., [2, 1, 0, 3]]
    raise InvalidArgumentError(f"{op}: {kind} data decoded to {image.shape[-1]} channels, "
                               f"expected 1, 3 or 4; got {_preview(data)}")


def _check_png_chunks(data: bytes, op: str) -> None:
    """Refuse a chunk that declares more bytes than the file holds: OpenCV's PNG reader
    allocates (and fills) a chunk's declared length before reading it, so a 92-byte file
    declaring a 600 MB ``tEXt`` chunk took 600 MB (measured); libpng refuses such a file
    anyway, after the fact."""
    position = len(_PNG_MAGIC)
    while position + 8 <= len(data):
        length = int.from_bytes(data[position:position + 4], "big")
        kind = data[position + 4:position + 8]
        end = position + 12 + length  # length, type, data, CRC
        if end > len(data):
            raise InvalidArgumentError(
                f"{op}: invalid or truncated PNG data: chunk {kind!r} at offset {position} "
                f"declares {length:,} bytes of data, and {max(len(data) - position - 12, 0):,} "
                f"remain; got {_preview(data)}")
        if kind == b"IEND":
            return
        position = end


def _decode_png_one(data: bytes, channels: int, dtype: np.dtype, op: str) -> np.ndarray:
    if not data.startswith(_PNG_MAGIC) or len(data) < 26:
        raise InvalidArgumentError(f"{op}: expected PNG data (starting with 89 50 4E 47); got "
                                   f"{_preview(data)}")
    _check_png_chunks(data, op)
    depth, color_type = _png_color_type(data)
    # Pillow reads 16-bit color (and gray with alpha) as their top bytes: right for uint8, but
    # not for uint16, nor for gray from color (libpng weighs the 16-bit samples).
    if depth == 16 and color_type in (2, 4, 6) and _backend.png_library() == "pillow" and (
            dtype == np.uint16 or (channels == 1 and color_type != 4)):
        raise InvalidArgumentError(
            f"{op}: this PNG has 16-bit color samples, which Pillow (the PNG decoder here: "
            f"{_backend.backend()}) reads only as 8-bit; decode it to uint8 with 0, 3 or 4 "
            "channels, or install opencv-python-headless (no free-threaded wheel)")
    image = _decode_cv2(data, op, "PNG")
    native = image.shape[-1]
    if color_type == 4 and native == 4:  # gray + alpha: OpenCV expands it to BGRA
        image, native = image[..., [0, 3]], 2
    image = _convert_channels(image, native, channels)
    if dtype == np.uint16 and image.dtype == np.uint8:
        image = image.astype(np.uint16) * np.uint16(257)
    elif dtype == np.uint8 and image.dtype == np.uint16:
        image = (image >> 8).astype(np.uint8)
    return np.ascontiguousarray(image)


def decode_png(contents: Contents, channels: int = 0, dtype: type = np.uint8) -> np.ndarray:
    """Decode PNG images, as ``tf.io.decode_png``.

    Args:
        contents: One PNG-encoded image, or a batch of them.
        channels: 0 for the file's own (1 gray, 2 gray+alpha, 3 RGB, 4 RGBA), or 1, 3, 4:
            converted as libpng does for TensorFlow (gray = ``(9797 R + 19234 G + 3737 B) >> 15``,
            rounded for 16-bit; alpha dropped or added opaque).
        dtype: ``np.uint8`` or ``np.uint16``. 8-bit files widen by x257, 16-bit ones keep the
            top byte for uint8 (libpng's ``png_set_strip_16``).

    Returns:
        ``[H, W, C]`` of ``dtype`` for one image; ``[N, H, W, C]`` for a batch.

    Raises:
        InvalidArgumentError: ``contents`` is not a PNG, is truncated, or is larger than
            :func:`set_decode_limits` allows.

    Example:
        >>> data = encode_png(np.full((2, 3, 3), 200, np.uint8))
        >>> decode_png(data, channels=4)[0, 0].tolist()
        [200, 200, 200, 255]
        >>> decode_png(data, dtype=np.uint16)[0, 0].tolist()
        [51400, 51400, 51400]
    """
    op = "decode_png"
    channels = _check_channels(channels, (0, 1, 3, 4), op)
    dtype = np.dtype(dtype)
    if dtype not in (np.uint8, np.uint16):
        raise InvalidArgumentError(f"{op}: dtype is uint8 or uint16; got {dtype}")
    return _map_contents(contents, op, lambda data: _decode_png_one(data, channels, dtype, op))


def _gif_layout(data: bytes) -> tuple[int, int, int]:
    """``(frames, height, width)`` of a GIF from its blocks, without decoding any: the frames'
    canvas is the logical screen, grown to hold a frame that reaches past it (as Pillow does).

    Walks the blocks as Pillow's GIF reader does, skipping unknown bytes one at a time, so
    the count is the number of frames it would decode.
    """
    size = len(data)
    width, height = struct.unpack("<HH", data[6:10]) if size >= 10 else (0, 0)
    position = 13
    if size > 10 and data[10] & 0x80:  # a global color table
        position += 3 << ((data[10] & 7) + 1)

    def skip_sub_blocks(at: int) -> int:
        while at < size:
            length = data[at]
            at += 1 + length
            if length == 0:
                break
        return at

    frames = 0
    while position < size:
        tag = data[position]
        position += 1
        if tag == 0x3B:  # the trailer
            break
        if tag == 0x21:  # an extension: its label, then sub-blocks
            position = skip_sub_blocks(position + 1)
        elif tag == 0x2C:  # an image descriptor: a frame
            if position + 9 > size:
                break
            left, top, frame_width, frame_height, flags = struct.unpack(
                "<HHHHB", data[position:position + 9])
            position += 9
            if flags & 0x80:  # a local color table
                position += 3 << ((flags & 7) + 1)
            frames += 1
            width, height = max(width, left + frame_width), max(height, top + frame_height)
            position = skip_sub_blocks(position + 1)  # the LZW code size, then the data
    return frames, height, width


def _decode_gif_one(data: bytes, op: str, first_only: bool = False) -> np.ndarray:
    """Every frame ``[frames, H, W, 3]``, or only the first ``[H, W, 3]`` (decoding no other)."""
    if not data.startswith(_GIF_MAGICS):
        raise InvalidArgumentError(f"{op}: expected GIF data (starting with GIF87a or GIF89a); "
                                   f"got {_preview(data)}")
    frames, height, width = _gif_layout(data)
    _check_pixels(op, height, width, "the GIF's frames are each")
    limits = decode_limits()
    frame_bytes = height * width * 3
    if not first_only and frames * frame_bytes > limits.max_animation_bytes:
        raise InvalidArgumentError(_over_limit(
            op, f"the GIF's {frames:,} frames of {height:,} x {width:,} pixels decode to "
            f"{frames:,} x {frame_bytes:,} bytes", frames * frame_bytes,
            limits.max_animation_bytes, "bytes", "max_animation_bytes"))
    import io

    pil = _native.pil_image()
    decoded: list[np.ndarray] = []
    try:
        with pil.open(io.BytesIO(data)) as image:
            count = 1 if first_only else getattr(image, "n_frames", 1)
            for index in range(count):
                image.seek(index)
                # The walk above bounds what Pillow's own walk finds; this bounds what it
                # decodes should the two ever disagree.
                total = (len(decoded) + 1) * image.size[0] * image.size[1] * 3
                if image.size[0] * image.size[1] > limits.max_pixels or (
                        not first_only and total > limits.max_animation_bytes):
                    raise InvalidArgumentError(
                        f"{op}: the GIF's frame {index} ({image.size[1]:,} x "
                        f"{image.size[0]:,} pixels) goes over the decode limits {limits}; "
                        "raise them with feedline.image.set_decode_limits if it is trusted")
                # convert() composes the frame over the previous ones (GIF disposal), as
                # tf.io.decode_gif does.
                decoded.append(np.asarray(image.convert("RGB")))
    except InvalidArgumentError:
        raise
    except MemoryError:
        raise
    except Exception as error:  # noqa: BLE001 - Pillow's errors on crafted bytes vary by type
        # (OSError, SyntaxError, IndexError, DecompressionBombError...): all mean bad data.
        raise InvalidArgumentError(f"{op}: invalid or truncated GIF data "
                                   f"({type(error).__name__}: {error}); got "
                                   f"{_preview(data)}") from None
    if first_only:
        return decoded[0]
    # A frame that reaches past the screen grows the canvas from that frame on: the earlier,
    # smaller frames are padded with black to the final size, so all stack.
    rows = max(frame.shape[0] for frame in decoded)
    columns = max(frame.shape[1] for frame in decoded)
    stacked = np.zeros((len(decoded), rows, columns, 3), np.uint8)
    for index, frame in enumerate(decoded):
        stacked[index, :frame.shape[0], :frame.shape[1]] = frame
    return stacked


def decode_gif(contents: Contents) -> np.ndarray:
    """Decode every frame of GIF images to RGB, as ``tf.io.decode_gif``.

    Args:
        contents: One GIF-encoded image, or a batch of them.

    Returns:
        ``[frames, H, W, 3]`` uint8; ``[N, frames, H, W, 3]`` for a batch.

    Raises:
        InvalidArgumentError: ``contents`` is not a GIF, is damaged, or its frames are larger
            than :func:`set_decode_limits` allows (checked before decoding any).

    Example:
        >>> import io
        >>> from PIL import Image
        >>> buffer = io.BytesIO()
        >>> Image.new("RGB", (4, 2), (255, 0, 0)).save(buffer, format="GIF")
        >>> decode_gif(buffer.getvalue()).shape
        (1, 2, 4, 3)
    """
    return _map_contents(contents, "decode_gif", lambda data: _decode_gif_one(data, "decode_gif"))


def _is_webp(data: bytes) -> bool:
    return data.startswith(_RIFF_MAGIC) and data[8:12] == _WEBP_MAGIC


def _webp_layout(data: bytes, op: str) -> tuple[int, int, int, bool]:
    """``(frames, height, width, animated)`` of a WebP from its RIFF chunks, decoding nothing.

    The first chunk is the image (``VP8 `` lossy, ``VP8L`` lossless) or the extended header
    (``VP8X``, with the canvas size and flags); an animation's frames are its ``ANMF`` chunks.
    """
    def bad(what: str) -> InvalidArgumentError:
        return InvalidArgumentError(f"{op}: invalid WebP header ({what}); got {_preview(data)}")

    if len(data) < 30:
        raise bad("shorter than a WebP header")
    kind, payload = data[12:16], 20
    if kind == b"VP8 ":  # a key frame: 3 bytes of tag, the start code, 14-bit sides
        if data[payload + 3:payload + 6] != b"\x9d\x01\x2a":
            raise bad("no VP8 start code")
        width, height = struct.unpack("<HH", data[payload + 6:payload + 10])
        return 1, height & 0x3FFF, width & 0x3FFF, False
    if kind == b"VP8L":  # a signature byte, then 14-bit sides minus one
        if data[payload] != 0x2F:
            raise bad("no VP8L signature")
        bits = int.from_bytes(data[payload + 1:payload + 5], "little")
        return 1, ((bits >> 14) & 0x3FFF) + 1, (bits & 0x3FFF) + 1, False
    if kind != b"VP8X":
        raise bad(f"first chunk {kind!r}, expected VP8, VP8L or VP8X")
    animated = bool(data[payload] & 0x02)
    width = int.from_bytes(data[payload + 4:payload + 7], "little") + 1
    height = int.from_bytes(data[payload + 7:payload + 10], "little") + 1
    frames, position = 0, 12
    while animated and position + 8 <= len(data):
        size = int.from_bytes(data[position + 4:position + 8], "little")
        frames += data[position:position + 4] == b"ANMF"
        position += 8 + size + (size & 1)  # chunks are padded to an even size
    return max(frames, 1), height, width, animated


def _decode_webp_one(data: bytes, channels: int, op: str, first_only: bool = False
                     ) -> np.ndarray:
    """``[frames, H, W, C]``, or the first frame ``[H, W, C]`` (decoding no other)."""
    if not _is_webp(data):
        raise InvalidArgumentError(f"{op}: expected WebP data (RIFF....WEBP); got "
                                   f"{_preview(data)}")
    frames, height, width, animated = _webp_layout(data, op)
    # libwebp allocates the whole canvas (twice, for an animation) when the file is opened.
    _check_pixels(op, height, width)
    limits = decode_limits()
    if animated and not first_only and frames * height * width * 4 > \
            limits.max_animation_bytes:
        raise InvalidArgumentError(_over_limit(
            op, f"the WebP's {frames:,} frames of {height:,} x {width:,} pixels decode to "
            f"{frames:,} x {height * width * 4:,} bytes", frames * height * width * 4,
            limits.max_animation_bytes, "bytes", "max_animation_bytes"))
    import io

    decoded: list[np.ndarray] = []
    try:
        with _native.pil_image().open(io.BytesIO(data)) as image:
            # TensorFlow decodes an animation to RGBA; a still image to RGB or RGBA, as stored.
            mode = "RGBA" if animated or image.mode in ("RGBA", "LA", "PA") else "RGB"
            for index in range(1 if first_only or not animated else image.n_frames):
                image.seek(index)
                if image.size != (width, height):
                    raise InvalidArgumentError(
                        f"{op}: invalid WebP data (frame {index} is {image.size[1]} x "
                        f"{image.size[0]}, the header says {height} x {width}); got "
                        f"{_preview(data)}")
                decoded.append(np.asarray(image.convert(mode)))
    except InvalidArgumentError:
        raise
    except MemoryError:
        raise
    except Exception as error:  # noqa: BLE001 - Pillow's errors on crafted bytes vary by type
        raise InvalidArgumentError(f"{op}: invalid or truncated WebP data "
                                   f"({type(error).__name__}: {error}); got "
                                   f"{_preview(data)}") from None
    native = decoded[0].shape[-1]
    if channels not in (0, native):
        why = "an animation is RGBA" if animated else "as stored"
        raise InvalidArgumentError(
            f"{op}: this WebP decodes to {native} channels ({why}); channels must be 0 or "
            f"{native}, as in TensorFlow; got {channels}")
    return decoded[0] if first_only else np.stack(decoded)


def decode_webp(contents: Contents, channels: int = 0, dtype: type = np.uint8) -> np.ndarray:
    """Decode WebP images (libwebp through Pillow), as ``tf.io.decode_webp``.

    A still image decodes to its own channels (RGB, or RGBA with alpha) with the pixels
    TensorFlow gives; an animation to RGBA frames, composed on its canvas, as TensorFlow's
    documentation says (TensorFlow 2.21's own animated output has 3 channels of misplaced
    RGBA bytes, measured).

    Args:
        contents: One WebP-encoded image, or a batch of them.
        channels: 0 for the file's own; 3 or 4 must be the file's own (as in TensorFlow).
        dtype: ``np.uint8`` (the only one TensorFlow takes).

    Returns:
        ``[frames, H, W, C]`` uint8 (one frame for a still image); ``[N, frames, H, W, C]``
        for a batch.

    Raises:
        InvalidArgumentError: ``contents`` is not a WebP, is damaged, asks for channels the
            file lacks, or is larger than :func:`set_decode_limits` allows.

    Example:
        >>> import io
        >>> from PIL import Image
        >>> buffer = io.BytesIO()
        >>> Image.new("RGB", (4, 2), (255, 0, 0)).save(buffer, format="WEBP", lossless=True)
        >>> decode_webp(buffer.getvalue()).shape
        (1, 2, 4, 3)
    """
    op = "decode_webp"
    channels = _check_channels(channels, (0, 3, 4), op)
    if np.dtype(dtype) != np.uint8:
        raise InvalidArgumentError(f"{op}: dtype is uint8; got {np.dtype(dtype)}")
    return _map_contents(contents, op, lambda data: _decode_webp_one(data, channels, op))


def _convert_dtype(image: np.ndarray, dtype: np.dtype) -> np.ndarray:
    """tf.image.convert_image_dtype from an unsigned integer image."""
    if image.dtype == dtype:
        return image
    if dtype.kind == "f":
        scale = np.float32(1.0 / np.iinfo(image.dtype).max)
        return (image.astype(np.float32) * scale).astype(dtype)
    # uint8 -> uint16 as convert_image_dtype widens: x (65535 + 1) // (255 + 1), i.e. x256.
    return image.astype(np.uint16) << np.uint16(8)


def decode_image(contents: Contents, channels: int | None = None, dtype: type = np.uint8,
                 expand_animations: bool = True) -> np.ndarray:
    """Decode a JPEG, PNG, GIF, BMP or WebP image by its first bytes, as
    ``tf.io.decode_image``.

    Args:
        contents: One encoded image, or a batch of them.
        channels: None or 0 for the file's own, else 1, 3 or 4 (0 or 3 for GIF; for WebP 0
            or the file's own, as :func:`decode_webp`).
        dtype: ``np.uint8``, ``np.uint16`` or ``np.float32``, converted as
            ``tf.image.convert_image_dtype`` (float in ``[0, 1]``; a PNG asked for uint16 or
            float is decoded at 16 bits, as TensorFlow does).
        expand_animations: For a GIF or a WebP, True gives every frame ``[frames, H, W, C]``
            (a still WebP too: one frame, as TensorFlow gives); False the first frame
            ``[H, W, C]``, as for the other formats (decoding no other frame).

    Returns:
        The decoded image (a batch stacks them).

    Raises:
        InvalidArgumentError: unknown format, damaged data, channels the format lacks, or an
            image over :func:`set_decode_limits`.

    Example:
        >>> data = encode_png(np.full((2, 2, 1), 255, np.uint8))
        >>> decode_image(data, dtype=np.float32)[..., 0].tolist()
        [[1.0, 1.0], [1.0, 1.0]]
    """
    op = "decode_image"
    channels = _check_channels(channels, (0, 1, 3, 4), op)
    dtype = np.dtype(dtype)
    if dtype not in (np.uint8, np.uint16, np.float32):
        raise InvalidArgumentError(f"{op}: dtype is uint8, uint16 or float32; got {dtype}")

    def decode(data: bytes) -> np.ndarray:
        if data.startswith(_JPEG_MAGIC):
            if channels == 4:
                raise InvalidArgumentError(f"{op}: channels must be 0, 1 or 3 for a JPEG; got 4")
            image = _decode_jpeg_one(data, channels, True, True, op)
        elif data.startswith(_PNG_MAGIC):
            image = _decode_png_one(data, channels, np.dtype(
                np.uint8 if dtype == np.uint8 else np.uint16), op)
        elif data.startswith(_GIF_MAGICS):
            if channels not in (0, 3):
                raise InvalidArgumentError(f"{op}: channels must be 0 or 3 for a GIF; got "
                                           f"{channels}")
            # Only the first frame is decoded when only it is wanted, as in TensorFlow.
            image = _decode_gif_one(data, op, first_only=not expand_animations)
        elif _is_webp(data):
            if channels not in (0, 3, 4):
                raise InvalidArgumentError(f"{op}: channels must be 0, 3 or 4 for a WebP; got "
                                           f"{channels}")
            image = _decode_webp_one(data, channels, op, first_only=not expand_animations)
        elif data.startswith(_BMP_MAGIC):
            image = _decode_cv2(data, op, "BMP")
            image = _convert_channels(image, image.shape[-1], channels)
        else:
            raise InvalidArgumentError(f"{op}: unknown image format, expected JPEG, PNG, GIF, "
                                       f"BMP or WebP data; got {_preview(data)}")
        return _convert_dtype(np.ascontiguousarray(image), dtype)

    return _map_contents(contents, op, decode)


def encode_jpeg(image: np.ndarray, quality: int = 95, chroma_downsampling: bool = True) -> bytes:
    """Encode a uint8 image ``[H, W, 1]`` (grayscale) or ``[H, W, 3]`` (RGB) as JPEG, as
    ``tf.io.encode_jpeg`` (libjpeg through Pillow, accurate integer DCT; 4:2:0 chroma unless
    ``chroma_downsampling=False``). Decoding it gives the pixels TensorFlow's encoding of the
    same image decodes to (the header's density fields differ).

    Args:
        image: ``[H, W, 1]`` or ``[H, W, 3]`` uint8; a batch ``[N, H, W, C]`` gives a 1-D object
            array of ``bytes``.
        quality: 0 to 100.
        chroma_downsampling: 4:2:0 (True) or 4:4:4 chroma.

    Returns:
        The JPEG file's bytes.

    Raises:
        InvalidArgumentError: not uint8, or not 1 or 3 channels.

    Example:
        >>> encode_jpeg(np.zeros((8, 8, 3), np.uint8), quality=90)[:3]
        b'\\xff\\xd8\\xff'
    """
    op = "encode_jpeg"
    array = np.asarray(image)
    if array.ndim == 4:
        out = np.empty(len(array), dtype=object)
        out[:] = [encode_jpeg(one, quality, chroma_downsampling) for one in array]
        return out
    if array.dtype != np.uint8 or array.ndim != 3 or array.shape[-1] not in (1, 3):
        raise InvalidArgumentError(f"{op}: expected a uint8 image [height, width, 1 or 3]; got "
                                   f"{array.dtype} with shape {array.shape}")
    if not 0 <= quality <= 100:
        raise InvalidArgumentError(f"{op}: quality is in [0, 100]; got {quality}")
    if array.shape[0] == 0 or array.shape[1] == 0:
        raise InvalidArgumentError(f"{op}: cannot encode an empty image of shape {array.shape}")
    # Pillow, not simplejpeg: Pillow drives libjpeg's standard API with TensorFlow's settings
    # (its RGB->YCbCr and chroma downsampling); simplejpeg's TurboJPEG API downsamples chroma
    # differently (decoded pixels up to 11 levels apart from tf.io.encode_jpeg's, measured).
    import io

    buffer = io.BytesIO()
    picture = _native.pil_image().fromarray(
        np.ascontiguousarray(array[..., 0] if array.shape[-1] == 1 else array))
    picture.save(buffer, format="JPEG", quality=int(quality),
                 subsampling=2 if chroma_downsampling else 0)
    return buffer.getvalue()


def encode_png(image: np.ndarray, compression: int = -1) -> bytes:
    """Encode a uint8 or uint16 image ``[H, W, 1 | 3 | 4]`` as PNG, as ``tf.io.encode_png``.

    Args:
        image: Gray, RGB or RGBA, uint8 or uint16 (a batch gives a 1-D object array of bytes).
        compression: zlib level 0 to 9; -1 for zlib's default (6).

    Returns:
        The PNG file's bytes; decoding them gives ``image`` back exactly.

    Raises:
        InvalidArgumentError: another dtype or channel count (gray+alpha is not supported).

    Example:
        >>> image = np.arange(12, dtype=np.uint16).reshape(2, 2, 3)
        >>> bool((decode_png(encode_png(image), dtype=np.uint16) == image).all())
        True
    """
    op = "encode_png"
    array = np.asarray(image)
    if array.ndim == 4:
        out = np.empty(len(array), dtype=object)
        out[:] = [encode_png(one, compression) for one in array]
        return out
    if array.dtype not in (np.uint8, np.uint16) or array.ndim != 3 or array.shape[-1] not in (
            1, 3, 4):
        raise InvalidArgumentError(f"{op}: expected a uint8 or uint16 image [height, width, 1, 3 "
                                   f"or 4]; got {array.dtype} with shape {array.shape}")
    if not -1 <= compression <= 9:
        raise InvalidArgumentError(f"{op}: compression is in [-1, 9]; got {compression}")
    if _backend.png_library() == "pillow":
        return _encode_png_pillow(array, 6 if compression < 0 else compression, op)
    cv2 = _native.cv2()
    if array.shape[-1] == 3:
        array = array[..., ::-1]
    elif array.shape[-1] == 4:
        array = array[..., [2, 1, 0, 3]]
    ok, encoded = cv2.imencode(".png", np.ascontiguousarray(array),
                               [cv2.IMWRITE_PNG_COMPRESSION, 6 if compression < 0 else compression])
    if not ok:
        raise InvalidArgumentError(f"{op}: OpenCV could not encode an image of shape "
                                   f"{array.shape}")
    return encoded.tobytes()


def _encode_png_pillow(array: np.ndarray, level: int, op: str) -> bytes:
    """PNG through Pillow (where OpenCV is missing): the same pixels decode back; Pillow writes
    16-bit gray but no 16-bit color."""
    import io

    if array.dtype == np.uint16 and array.shape[-1] != 1:
        raise InvalidArgumentError(
            f"{op}: Pillow (the PNG encoder here: {_backend.backend()}) writes 16-bit gray "
            "but not 16-bit color; encode uint8, or install opencv-python-headless (no "
            "free-threaded wheel)")
    plane = np.ascontiguousarray(array[..., 0] if array.shape[-1] == 1 else array)
    picture = _native.pil_image().fromarray(plane)
    buffer = io.BytesIO()
    picture.save(buffer, format="PNG", compress_level=int(level))
    return buffer.getvalue()
