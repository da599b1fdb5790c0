"""Which library decodes each format: the fast native ones where installed, else Pillow.

simplejpeg and OpenCV have no wheels for free-threaded CPython (3.13t); there JPEG, PNG and BMP
decode through Pillow (the same libjpeg-turbo and libpng underneath). :func:`backend` says which
is in use, so that a change of pixels is never silent.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from types import ModuleType

from feedline.core.errors import InvalidArgumentError
from feedline.image import _native

BACKEND_ENV = "FEEDLINE_IMAGE_CODECS"
"""``"pillow"`` makes every codec use Pillow even where simplejpeg and OpenCV are installed
(the same pixels as a free-threaded build); unset or ``"auto"``: the fastest installed."""


def _forced() -> str:
    value = os.environ.get(BACKEND_ENV, "auto").strip().lower() or "auto"
    if value not in ("auto", "pillow"):
        raise InvalidArgumentError(f"environment variable {BACKEND_ENV} is 'auto' or 'pillow'; "
                                   f"got {value!r}")
    return value


def _available(loader: Callable[[], ModuleType]) -> bool:
    try:
        loader()
    except ImportError:
        return False
    return True


def jpeg_library() -> str:
    """``"simplejpeg"`` or ``"pillow"``: the library :func:`~feedline.image.decode_jpeg` uses."""
    if _forced() == "auto" and _available(_native.simplejpeg):
        return "simplejpeg"
    if _available(_native.pil_image):
        return "pillow"
    _native.simplejpeg()  # neither: raises ImportError naming the extra
    return "simplejpeg"


def png_library() -> str:
    """``"opencv"`` or ``"pillow"``: the library PNG and BMP decode and PNG encode use."""
    if _forced() == "auto" and _available(_native.cv2):
        return "opencv"
    if _available(_native.pil_image):
        return "pillow"
    _native.cv2()
    return "opencv"


def backend() -> dict[str, str]:
    """The libraries feedline.image's codecs and resize use in this interpreter.

    ``"jpeg"``: ``"simplejpeg"`` (libjpeg-turbo's TurboJPEG API) or ``"pillow"`` (libjpeg-turbo
    through Pillow: where simplejpeg is missing, as on free-threaded CPython, or with
    ``FEEDLINE_IMAGE_CODECS=pillow``). Both give the same pixels, byte for byte, for
    ``dct_method="INTEGER_ACCURATE"`` with fancy upsampling and for the fast IDCT without it,
    at every ``ratio``. Pillow cannot ask libjpeg for tf.io's default (the fast integer IDCT
    *with* fancy upsampling): there it decodes with the accurate IDCT, up to 8 levels apart
    on the test images (0 at ratio 4 and 8), and the accurate IDCT without fancy upsampling
    with the fast one. For the same pixels on both, pass ``dct_method="INTEGER_ACCURATE"``.
    ``min_size`` scales by 1/2, 1/4 or 1/8 only (simplejpeg also by M/8).
    ``"png"``: ``"opencv"`` or ``"pillow"`` (PNG and BMP; the same pixels, except that
    Pillow has no 16-bit color: such a PNG decodes to uint8 only). ``"resize"``:
    ``"opencv"`` or ``"unavailable"`` (bilinear and area resize need OpenCV). A library
    that neither has is ``"missing"``.

    Example:
        >>> sorted(backend())
        ['jpeg', 'png', 'resize']
    """
    def name(pick: Callable[[], str]) -> str:
        try:
            return pick()
        except ImportError:
            return "missing"

    return {"jpeg": name(jpeg_library), "png": name(png_library),
            "resize": "opencv" if _available(_native.cv2) else "unavailable"}
