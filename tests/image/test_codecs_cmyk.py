"""CMYK and YCCK JPEGs decode to RGB as tf.io does, pixel for pixel (recorded by
record_golden_cmyk.py under TensorFlow 2.21)."""

from __future__ import annotations

import io
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

import feedline as fl
from feedline import image as fli

GOLDEN = np.load(Path(__file__).with_name("golden_cmyk.npz"))
NAMES = ["cmyk_adobe", "ycck_adobe", "cmyk_plain", "cmyk_progressive"]


def encoded(name: str) -> bytes:
    return GOLDEN[f"jpeg/{name}"].tobytes()


@pytest.mark.parametrize("name", NAMES)
@pytest.mark.parametrize("channels", [0, 3])
@pytest.mark.parametrize("dct_method", ["", "INTEGER_ACCURATE"])
def test_decode_jpeg_equals_tensorflow_exactly(name, channels, dct_method):
    expected = GOLDEN[f"decode_jpeg/{name}/{channels}/{dct_method or 'default'}"]
    got = fli.decode_jpeg(encoded(name), channels=channels, dct_method=dct_method)
    assert got.dtype == np.uint8 and got.shape == expected.shape
    np.testing.assert_array_equal(got, expected)


@pytest.mark.parametrize("name", NAMES)
def test_ratio_crop_decode_image_and_shape_equal_tensorflow(name):
    data = encoded(name)
    np.testing.assert_array_equal(fli.decode_jpeg(data, ratio=2),
                                  GOLDEN[f"decode_jpeg_ratio2/{name}"])
    np.testing.assert_array_equal(fli.decode_and_crop_jpeg(data, [3, 5, 12, 9]),
                                  GOLDEN[f"decode_and_crop_jpeg/{name}"])
    np.testing.assert_array_equal(fli.decode_image(data), GOLDEN[f"decode_image/{name}"])
    np.testing.assert_array_equal(fli.decode_image(data, dtype=np.float32),
                                  GOLDEN[f"decode_image/{name}"] * np.float32(1 / 255))
    np.testing.assert_array_equal(fli.extract_jpeg_shape(data),
                                  GOLDEN[f"extract_jpeg_shape/{name}"])


@pytest.mark.parametrize("name", NAMES)
def test_grayscale_is_refused_as_tensorflow_refuses_it(name):
    assert GOLDEN[f"gray_refused/{name}"]  # libjpeg: "Unsupported color conversion request"
    with pytest.raises(fl.InvalidArgumentError, match="decodes to RGB .* not to grayscale"):
        fli.decode_jpeg(encoded(name), channels=1)
    with pytest.raises(fl.InvalidArgumentError, match="not to grayscale"):
        fli.decode_image(encoded(name), channels=1)


@pytest.mark.parametrize("name", ["cmyk_adobe", "ycck_adobe", "cmyk_plain"])
def test_the_conversion_is_tensorflows_formula_on_the_decoded_inks(name):
    # TensorFlow's jpeg_mem.cc converts libjpeg's CMYK samples itself: R = K * C / 255 for an
    # Adobe file (whose samples are inverted ink), (255 - K)(255 - C) / 255 otherwise. Pillow
    # gives the inks (it un-inverts Adobe samples), with the same accurate integer IDCT.
    data = encoded(name)
    with Image.open(io.BytesIO(data)) as picture:
        assert picture.mode == "CMYK"
        inks = np.asarray(picture).astype(np.int32)
    if name == "cmyk_plain":
        inks = 255 - inks  # no Adobe marker: Pillow reads the samples as they are
    expected = (255 - inks[..., :3]) * (255 - inks[..., 3:]) // 255
    got = fli.decode_jpeg(data, dct_method="INTEGER_ACCURATE")
    np.testing.assert_array_equal(got, expected.astype(np.uint8))


def test_a_batch_mixes_cmyk_and_rgb_jpegs():
    rgb = fli.encode_jpeg(np.zeros((40, 32, 3), np.uint8))
    batch = fli.decode_jpeg([encoded("cmyk_adobe"), rgb])
    assert batch.shape == (2, 40, 32, 3)
    np.testing.assert_array_equal(batch[0], GOLDEN["decode_jpeg/cmyk_adobe/0/default"])
