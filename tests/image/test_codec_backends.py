"""Pillow as the JPEG/PNG/BMP backend (free-threaded CPython has no simplejpeg or OpenCV wheel):
the same pixels as the GIL build's simplejpeg/OpenCV where libjpeg can be asked for the same
settings, a bounded, documented difference where it cannot (tf.io's default DCT)."""

from __future__ import annotations

import io
from pathlib import Path

import numpy as np
import pytest

from feedline import InvalidArgumentError
from feedline import image as fli
from feedline.image import _backend, _native

HERE = Path(__file__).resolve().parent
GOLDEN = np.load(HERE / "golden_codecs_geometry.npz")
GOLDEN_CMYK = np.load(HERE / "golden_cmyk.npz")
JPEGS = ["rgb_q90", "rgb40_q75", "rgb40_444", "rgb40_progressive", "gray_q90"]
CMYKS = ["cmyk_adobe", "ycck_adobe", "cmyk_plain", "cmyk_progressive"]
# tf.io's default (the fast integer IDCT with fancy upsampling) has no Pillow setting: Pillow
# decodes it with the accurate IDCT (and the accurate IDCT without fancy upsampling with the
# fast one). Largest difference measured on these files (rgb40_444, at full scale).
DEFAULT_DCT_MAX_DIFFERENCE = 8


def _have(loader) -> bool:
    try:
        loader()
    except ImportError:
        return False
    return True


HAVE_SIMPLEJPEG = _have(_native.simplejpeg)
HAVE_OPENCV = _have(_native.cv2)


@pytest.fixture
def pillow(monkeypatch):
    monkeypatch.setenv(_backend.BACKEND_ENV, "pillow")


@pytest.fixture
def native(monkeypatch):
    if not (HAVE_SIMPLEJPEG and HAVE_OPENCV):
        pytest.skip("simplejpeg and OpenCV are not installed (no free-threaded wheels)")
    monkeypatch.setenv(_backend.BACKEND_ENV, "auto")


def _jpegs() -> list[bytes]:
    """Photos from the repository, and made ones: each chroma subsampling, progressive,
    grayscale, sizes that are not multiples of the MCU."""
    files = [path.read_bytes() for path in sorted((HERE.parent / "data").rglob("*.jp*g"))]
    rng = np.random.default_rng(0)
    for height, width in [(37, 53), (64, 64), (101, 77)]:
        smooth = np.cumsum(rng.integers(0, 9, (height, width, 3)), axis=1).astype(np.uint8)
        for subsampling in (0, 1, 2):
            for progressive in (False, True):
                buffer = io.BytesIO()
                _native.pil_image().fromarray(smooth).save(
                    buffer, "JPEG", quality=85, subsampling=subsampling,
                    progressive=progressive)
                files.append(buffer.getvalue())
        buffer = io.BytesIO()
        _native.pil_image().fromarray(smooth[..., 0]).save(buffer, "JPEG", quality=90)
        files.append(buffer.getvalue())
    files += [GOLDEN[f"jpeg/{name}"].tobytes() for name in JPEGS]
    files += [GOLDEN_CMYK[f"jpeg/{name}"].tobytes() for name in CMYKS
              if f"jpeg/{name}" in GOLDEN_CMYK.files]
    return files


def test_backend_names_the_library_of_each_codec(monkeypatch):
    monkeypatch.setenv(_backend.BACKEND_ENV, "pillow")
    assert fli.backend()["jpeg"] == "pillow" and fli.backend()["png"] == "pillow"
    monkeypatch.setenv(_backend.BACKEND_ENV, "auto")
    assert fli.backend() == {
        "jpeg": "simplejpeg" if HAVE_SIMPLEJPEG else "pillow",
        "png": "opencv" if HAVE_OPENCV else "pillow",
        "resize": "opencv" if HAVE_OPENCV else "unavailable"}
    monkeypatch.setenv(_backend.BACKEND_ENV, "turbo")
    with pytest.raises(InvalidArgumentError, match="'auto' or 'pillow'; got 'turbo'"):
        fli.backend()


@pytest.mark.parametrize("name", JPEGS)
@pytest.mark.parametrize("channels", [0, 1, 3])
def test_pillow_gives_tensorflows_accurate_dct_pixels_exactly(pillow, name, channels):
    expected = GOLDEN[f"decode_jpeg/{name}/{channels}/INTEGER_ACCURATE"]
    got = fli.decode_jpeg(GOLDEN[f"jpeg/{name}"].tobytes(), channels=channels,
                          dct_method="INTEGER_ACCURATE")
    np.testing.assert_array_equal(got, expected)


@pytest.mark.parametrize("name", [name for name in CMYKS
                                  if f"decode_jpeg/{name}/3/INTEGER_ACCURATE" in GOLDEN_CMYK])
def test_pillow_converts_cmyk_and_ycck_as_tensorflow(pillow, name):
    data = GOLDEN_CMYK[f"jpeg/{name}"].tobytes()
    got = fli.decode_jpeg(data, dct_method="INTEGER_ACCURATE")
    np.testing.assert_array_equal(got, GOLDEN_CMYK[f"decode_jpeg/{name}/3/INTEGER_ACCURATE"])


@pytest.mark.parametrize("name", JPEGS)
@pytest.mark.parametrize("channels", [0, 1, 3])
def test_pillow_default_dct_is_within_the_documented_difference(pillow, name, channels):
    expected = GOLDEN[f"decode_jpeg/{name}/{channels}/default"]
    got = fli.decode_jpeg(GOLDEN[f"jpeg/{name}"].tobytes(), channels=channels)
    assert got.shape == expected.shape
    assert int(np.abs(got.astype(int) - expected).max()) <= DEFAULT_DCT_MAX_DIFFERENCE


@pytest.mark.parametrize("dct_method, fancy_upscaling", [("INTEGER_ACCURATE", True), ("", False)])
@pytest.mark.parametrize("ratio", [1, 2, 4, 8])
def test_both_backends_decode_identical_pixels(monkeypatch, native, dct_method,
                                               fancy_upscaling, ratio):
    """Every setting Pillow can ask libjpeg for gives simplejpeg's pixels, byte for byte."""
    for data in _jpegs():
        for channels in (0, 1, 3):
            if channels == 1 and fli.extract_jpeg_shape(data)[2] == 4:
                continue  # CMYK refuses grayscale on both
            kwargs = {"channels": channels, "ratio": ratio, "dct_method": dct_method,
                      "fancy_upscaling": fancy_upscaling}
            monkeypatch.setenv(_backend.BACKEND_ENV, "auto")
            expected = fli.decode_jpeg(data, **kwargs)
            monkeypatch.setenv(_backend.BACKEND_ENV, "pillow")
            np.testing.assert_array_equal(fli.decode_jpeg(data, **kwargs), expected)


@pytest.mark.parametrize("dct_method, fancy_upscaling", [("", True), ("INTEGER_ACCURATE", False)])
def test_the_other_settings_differ_by_at_most_the_documented_levels(monkeypatch, native,
                                                                    dct_method, fancy_upscaling):
    worst = 0
    for data in _jpegs():
        for ratio in (1, 2, 4, 8):
            kwargs = {"ratio": ratio, "dct_method": dct_method,
                      "fancy_upscaling": fancy_upscaling}
            monkeypatch.setenv(_backend.BACKEND_ENV, "auto")
            expected = fli.decode_jpeg(data, **kwargs)
            monkeypatch.setenv(_backend.BACKEND_ENV, "pillow")
            got = fli.decode_jpeg(data, **kwargs)
            assert got.shape == expected.shape
            worst = max(worst, int(np.abs(got.astype(int) - expected).max()))
    assert 0 < worst <= DEFAULT_DCT_MAX_DIFFERENCE


def test_pillow_refuses_damaged_jpegs_clearly(pillow):
    data = GOLDEN["jpeg/rgb40_q75"].tobytes()
    with pytest.raises(InvalidArgumentError, match="invalid or truncated JPEG"):
        fli.decode_jpeg(data[:-300])
    for cut in (b"\xff\xd8\xff\xe0\x00\x10JFIF", data[:10], data[:200]):
        with pytest.raises(InvalidArgumentError, match="invalid or truncated JPEG header"):
            fli.decode_jpeg(cut)


def test_min_size_on_pillow_takes_the_smallest_power_of_two_scale_that_covers_it(pillow):
    data = fli.encode_jpeg(np.zeros((32, 48, 3), np.uint8))
    assert fli.decode_jpeg(data, min_size=(10, 10)).shape == (16, 24, 3)  # 1/2: 1/4 is 8 rows
    assert fli.decode_jpeg(data, min_size=(4, 6)).shape == (4, 6, 3)
    assert fli.decode_jpeg(data, min_size=(32, 48)).shape == (32, 48, 3)


def _pngs() -> dict[str, tuple[np.ndarray, bytes]]:
    rng = np.random.default_rng(3)
    pil = _native.pil_image()
    out = {}
    for name, array in [("gray", rng.integers(0, 256, (9, 7, 1), dtype=np.uint8)),
                        ("rgb", rng.integers(0, 256, (9, 7, 3), dtype=np.uint8)),
                        ("rgba", rng.integers(0, 256, (9, 7, 4), dtype=np.uint8)),
                        ("gray16", rng.integers(0, 65536, (9, 7, 1), dtype=np.uint16))]:
        plane = array[..., 0] if array.shape[-1] == 1 else array
        buffer = io.BytesIO()
        pil.fromarray(plane).save(buffer, "PNG")
        out[name] = (array, buffer.getvalue())
    palette = pil.fromarray(out["rgb"][0]).quantize(5)
    buffer = io.BytesIO()
    palette.save(buffer, "PNG")
    out["palette"] = (np.asarray(palette.convert("RGB")), buffer.getvalue())
    gray_alpha = pil.fromarray(out["rgba"][0][..., :2], "LA")
    buffer = io.BytesIO()
    gray_alpha.save(buffer, "PNG")
    out["gray_alpha"] = (out["rgba"][0][..., :2], buffer.getvalue())
    return out


@pytest.mark.parametrize("name", ["gray", "rgb", "rgba", "gray16", "palette", "gray_alpha"])
@pytest.mark.parametrize("channels", [0, 1, 3, 4])
@pytest.mark.parametrize("dtype", [np.uint8, np.uint16])
def test_png_decodes_the_same_on_pillow(monkeypatch, name, channels, dtype):
    array, data = _pngs()[name]
    monkeypatch.setenv(_backend.BACKEND_ENV, "pillow")
    got = fli.decode_png(data, channels=channels, dtype=dtype)
    if channels == 0:  # the file's own samples, exactly
        wide = array.astype(np.uint16) * 257 if array.dtype == np.uint8 else array
        expected = (wide if dtype == np.uint16 else (wide >> 8).astype(np.uint8))
        np.testing.assert_array_equal(got, expected.astype(dtype))
    if HAVE_OPENCV:
        monkeypatch.setenv(_backend.BACKEND_ENV, "auto")
        np.testing.assert_array_equal(got, fli.decode_png(data, channels=channels, dtype=dtype))


def test_png_with_16_bit_color_is_a_clear_error_for_uint16_on_pillow(pillow):
    image = np.arange(2 * 3 * 3, dtype=np.uint16).reshape(2, 3, 3) * 3000
    with pytest.raises(InvalidArgumentError, match="writes 16-bit gray but not 16-bit color"):
        fli.encode_png(image)
    data = GOLDEN["png/rgb16"].tobytes() if "png/rgb16" in GOLDEN.files else None
    if data is None:
        pytest.skip("no recorded 16-bit color PNG")
    with pytest.raises(InvalidArgumentError, match="16-bit color samples"):
        fli.decode_png(data, dtype=np.uint16)
    with pytest.raises(InvalidArgumentError, match="16-bit color samples"):
        fli.decode_png(data, channels=1)  # libpng weighs the 16-bit samples
    for channels in (0, 3, 4):  # libpng's strip_16 keeps the top byte, as Pillow does
        np.testing.assert_array_equal(fli.decode_png(data, channels=channels),
                                      GOLDEN[f"decode_png/rgb16/{channels}/uint8"])


@pytest.mark.parametrize("shape, dtype", [((5, 4, 1), np.uint8), ((5, 4, 3), np.uint8),
                                          ((5, 4, 4), np.uint8), ((5, 4, 1), np.uint16)])
def test_png_encoded_by_pillow_decodes_back_exactly(pillow, shape, dtype):
    image = np.random.default_rng(1).integers(0, np.iinfo(dtype).max, shape, dtype=dtype)
    assert fli.decode_png(fli.encode_png(image), dtype=dtype).tolist() == image.tolist()


def test_bmp_decodes_the_same_on_pillow(monkeypatch):
    image = np.random.default_rng(2).integers(0, 256, (6, 5, 3), dtype=np.uint8)
    buffer = io.BytesIO()
    _native.pil_image().fromarray(image).save(buffer, "BMP")
    monkeypatch.setenv(_backend.BACKEND_ENV, "pillow")
    np.testing.assert_array_equal(fli.decode_image(buffer.getvalue()), image)
    if HAVE_OPENCV:
        monkeypatch.setenv(_backend.BACKEND_ENV, "auto")
        np.testing.assert_array_equal(fli.decode_image(buffer.getvalue()), image)
