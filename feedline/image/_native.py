"""The native libraries feedline.image runs on, imported on first use.

``import feedline`` never imports them: an image operation does, and says which extra installs
them when one is missing.
"""

from __future__ import annotations

import functools
from types import ModuleType


def _missing(library: str, error: ImportError) -> ImportError:
    return ImportError(f"feedline.image needs {library}: pip install 'feedline[image]' "
                       f"({error})")


@functools.cache
def simplejpeg() -> ModuleType:
    """libjpeg-turbo through simplejpeg: JPEG decode and encode, with the GIL released."""
    try:
        import simplejpeg as module
    except ImportError as error:
        raise _missing("simplejpeg", error) from error
    return module


@functools.cache
def cv2() -> ModuleType:
    """OpenCV: PNG/BMP codecs, bilinear and area resize, with the GIL released."""
    try:
        import cv2 as module
    except ImportError as error:
        raise _missing("opencv-python-headless", error) from error
    # Each call stays on the calling thread: a threaded Dataset.map is the parallelism, and
    # OpenCV's own pool on top of it would oversubscribe the cores.
    module.setNumThreads(1)
    return module


@functools.cache
def pil_image() -> ModuleType:
    """Pillow's Image module: GIF frames (OpenCV keeps only the first), JPEG encoding."""
    try:
        from PIL import Image as module
    except ImportError as error:
        raise _missing("pillow", error) from error
    return module
