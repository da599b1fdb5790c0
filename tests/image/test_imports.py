"""feedline.image's native libraries are optional: imported on first use, named when missing."""

from __future__ import annotations

import subprocess
import sys

import numpy as np
import pytest

from feedline import image as fli
from feedline.image import _native


def test_import_feedline_imports_no_image_library():
    code = ("import sys, feedline, feedline.image; "
            "print(sorted(m for m in ('cv2', 'simplejpeg', 'PIL') if m in sys.modules))")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          timeout=120, check=True)
    assert done.stdout.strip() == "[]"


@pytest.mark.parametrize("modules, call", [
    (("cv2",), lambda: fli.resize(np.zeros((4, 4, 1)), (2, 2))),
    # Without simplejpeg, JPEG decoding falls back to Pillow: only both missing is an error.
    (("simplejpeg", "PIL"), lambda: fli.decode_jpeg(b"\xff\xd8\xff\xe0")),
    (("PIL",), lambda: fli.encode_jpeg(np.zeros((2, 2, 3), np.uint8))),
])
def test_a_missing_library_names_the_extra(monkeypatch, modules, call):
    loaders = (_native.cv2, _native.simplejpeg, _native.pil_image)
    for module in modules:
        monkeypatch.setitem(sys.modules, module, None)  # import of it raises ImportError
    for loader in loaders:
        loader.cache_clear()
    try:
        with pytest.raises(ImportError, match=r"pip install 'feedline\[image\]'"):
            call()
    finally:
        for loader in loaders:
            loader.cache_clear()


def test_without_simplejpeg_jpeg_decoding_falls_back_to_pillow(monkeypatch):
    monkeypatch.setitem(sys.modules, "simplejpeg", None)
    _native.simplejpeg.cache_clear()
    try:
        assert fli.backend()["jpeg"] == "pillow"
    finally:
        _native.simplejpeg.cache_clear()


def test_the_image_namespace_is_curated():
    public = {name for name in vars(fli) if not name.startswith("_")}
    modules = {"bounding_box", "codecs", "color", "color_spaces", "cropping", "dtype", "flips",
               "jpeg_quality", "stateless"}
    # resize, crop_and_resize, extract_patches, total_variation: the functions' names
    assert public - modules == set(fli.__all__)
    assert fli.__all__ == sorted(fli.__all__)
