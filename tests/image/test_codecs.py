"""feedline.image codecs against tf.io's outputs recorded by record_golden.py (TensorFlow 2.21)."""

from __future__ import annotations

import io
from pathlib import Path

import numpy as np
import pytest

import feedline as fl
from feedline import image as fli

GOLDEN = np.load(Path(__file__).with_name("golden_codecs_geometry.npz"))
JPEGS = ["rgb_q90", "rgb40_q75", "rgb40_444", "rgb40_progressive", "gray_q90"]


def encoded(kind: str, name: str) -> bytes:
    return GOLDEN[f"{kind}/{name}"].tobytes()


@pytest.mark.parametrize("name", JPEGS)
@pytest.mark.parametrize("channels", [0, 1, 3])
@pytest.mark.parametrize("dct_method", ["", "INTEGER_FAST", "INTEGER_ACCURATE"])
def test_decode_jpeg_equals_tensorflow_exactly(name, channels, dct_method):
    recorded = dct_method.replace("INTEGER_FAST", "") or "default"  # "" and FAST are one
    expected = GOLDEN[f"decode_jpeg/{name}/{channels}/{recorded}"]
    got = fli.decode_jpeg(encoded("jpeg", name), channels=channels, dct_method=dct_method)
    assert got.dtype == np.uint8 and got.shape == expected.shape
    np.testing.assert_array_equal(got, expected)  # measured max abs difference: 0


def test_fast_upsampling_is_an_option_that_changes_pixels():
    data = encoded("jpeg", "rgb40_q75")
    rough = fli.decode_jpeg(data, fancy_upscaling=False)
    assert rough.shape == (40, 32, 3)
    assert not np.array_equal(rough, GOLDEN["decode_jpeg/rgb40_q75/3/default"])


@pytest.mark.parametrize("name", ["rgb40_q75", "rgb_q90"])
@pytest.mark.parametrize("ratio", [2, 4, 8])
def test_decode_jpeg_ratio_equals_tensorflow(name, ratio):
    expected = GOLDEN[f"decode_jpeg_ratio/{name}/{ratio}"]
    np.testing.assert_array_equal(fli.decode_jpeg(encoded("jpeg", name), ratio=ratio), expected)


def test_min_size_decodes_at_the_smallest_scale_that_covers_it():
    data = fli.encode_jpeg(np.zeros((320, 320, 3), np.uint8))
    assert fli.decode_jpeg(data, min_size=(224, 224)).shape == (240, 240, 3)  # 6/8
    assert fli.decode_jpeg(data, min_size=(100, 30)).shape == (120, 120, 3)  # 3/8
    assert fli.decode_jpeg(data, min_size=(400, 400)).shape == (320, 320, 3)  # never larger
    with pytest.raises(fl.InvalidArgumentError, match="ratio or min_size"):
        fli.decode_jpeg(data, ratio=2, min_size=(10, 10))


@pytest.mark.parametrize("name", ["rgb40_q75", "rgb40_444", "rgb40_progressive"])
@pytest.mark.parametrize("window", [(0, 0, 40, 32), (5, 7, 20, 16), (13, 3, 9, 11),
                                    (39, 31, 1, 1)])
def test_decode_and_crop_jpeg(name, window):
    data = encoded("jpeg", name)
    got = fli.decode_and_crop_jpeg(data, window)
    y, x, h, w = window
    np.testing.assert_array_equal(got, fli.decode_jpeg(data)[y:y + h, x:x + w])
    expected = GOLDEN[f"decode_and_crop_jpeg/{name}/{'_'.join(map(str, window))}"]
    difference = np.abs(got.astype(int) - expected).max()
    # TensorFlow restarts chroma upsampling at the window's MCU: at most 4 levels (measured
    # 2 and 4 on the 4:2:0 files at x=3), exact on 4:4:4 and on MCU-aligned windows.
    assert difference <= 4
    if name == "rgb40_444" or x % 16 == 0 or window == (5, 7, 20, 16):
        assert difference == 0


def test_decode_and_crop_jpeg_batch_windows_and_bad_windows():
    data = encoded("jpeg", "rgb40_q75")
    full = fli.decode_jpeg(data)
    batch = fli.decode_and_crop_jpeg([data, data], [[0, 0, 4, 5], [10, 11, 4, 5]])
    np.testing.assert_array_equal(batch, np.stack([full[:4, :5], full[10:14, 11:16]]))
    assert fli.decode_and_crop_jpeg([data] * 3, [1, 1, 2, 2]).shape == (3, 2, 2, 3)
    with pytest.raises(fl.InvalidArgumentError,
                       match=r"not inside the image of shape \(40, 32, 3\)"):
        fli.decode_and_crop_jpeg(data, [30, 0, 20, 5])
    with pytest.raises(fl.InvalidArgumentError, match="empty"):
        fli.decode_and_crop_jpeg(data, [0, 0, 0, 5])
    with pytest.raises(fl.InvalidArgumentError, match="2 crop windows for a batch of 3"):
        fli.decode_and_crop_jpeg([data] * 3, [[0, 0, 1, 1]] * 2)
    with pytest.raises(fl.InvalidArgumentError, match=r"crop_window is \[y, x, height, width\]"):
        fli.decode_and_crop_jpeg(data, [0, 0, 1])


@pytest.mark.parametrize("key", [key for key in GOLDEN.files if key.startswith("decode_png/")])
def test_decode_png_equals_tensorflow_exactly(key):
    _, name, channels, dtype = key.split("/")
    channels, dtype = int(channels), np.dtype(dtype)
    got = fli.decode_png(encoded("png", name), channels=channels, dtype=dtype)
    assert got.dtype == dtype
    np.testing.assert_array_equal(got, GOLDEN[key])


def test_png_gray_alpha_channels():
    from PIL import Image

    buffer = io.BytesIO()
    pixels = np.array([[[10, 200], [250, 0]]], np.uint8)
    Image.fromarray(pixels, "LA").save(buffer, format="PNG")
    data = buffer.getvalue()
    np.testing.assert_array_equal(fli.decode_png(data), pixels)
    np.testing.assert_array_equal(fli.decode_png(data, channels=1), pixels[..., :1])
    np.testing.assert_array_equal(fli.decode_png(data, channels=3)[0, 1], [250, 250, 250])
    np.testing.assert_array_equal(fli.decode_png(data, channels=4)[0, 0], [10, 10, 10, 200])


def test_gif_all_frames_and_first_frame():
    data = encoded("gif", "two_frames")
    np.testing.assert_array_equal(fli.decode_gif(data), GOLDEN["decode_gif/two_frames"])
    np.testing.assert_array_equal(fli.decode_image(data), GOLDEN["decode_gif/two_frames"])
    np.testing.assert_array_equal(fli.decode_image(data, expand_animations=False),
                                  GOLDEN["decode_image_first/two_frames"])
    with pytest.raises(fl.InvalidArgumentError, match="0 or 3 for a GIF"):
        fli.decode_image(data, channels=1)


@pytest.mark.parametrize("kind, name", [("jpeg", "rgb_q90"), ("jpeg", "gray_q90"),
                                        ("png", "rgb16"), ("png", "gray8")])
def test_decode_image_float32_equals_tensorflow(kind, name):
    got = fli.decode_image(encoded(kind, name), dtype=np.float32)
    assert got.dtype == np.float32
    np.testing.assert_array_equal(got, GOLDEN[f"decode_image_f32/{name}"])


def test_decode_image_dispatches_and_converts_like_convert_image_dtype():
    jpeg = encoded("jpeg", "rgb_q90")
    np.testing.assert_array_equal(fli.decode_image(jpeg), GOLDEN["decode_jpeg/rgb_q90/0/default"])
    # uint8 -> uint16 as tf.image.convert_image_dtype widens: x256 (decode_png's own is x257).
    np.testing.assert_array_equal(fli.decode_image(jpeg, dtype=np.uint16),
                                  GOLDEN["decode_jpeg/rgb_q90/0/default"].astype(np.uint16) * 256)
    png = encoded("png", "rgb16")
    np.testing.assert_array_equal(fli.decode_image(png, dtype=np.uint16), GOLDEN["src/rgb16"])
    np.testing.assert_array_equal(fli.decode_image(png, channels=1),
                                  GOLDEN["decode_png/rgb16/1/uint8"])
    bmp = io.BytesIO()
    from PIL import Image

    Image.fromarray(GOLDEN["src/rgb"]).save(bmp, format="BMP")
    np.testing.assert_array_equal(fli.decode_image(bmp.getvalue()), GOLDEN["src/rgb"])
    with pytest.raises(fl.InvalidArgumentError, match="unknown image format"):
        fli.decode_image(b"RIFF0000WAVE")
    with pytest.raises(fl.InvalidArgumentError, match="invalid WebP header"):
        fli.decode_image(b"RIFF0000WEBP")


def test_extract_jpeg_shape_and_is_jpeg():
    assert fli.extract_jpeg_shape(encoded("jpeg", "rgb40_q75")).tolist() == [40, 32, 3]
    assert fli.extract_jpeg_shape(encoded("jpeg", "gray_q90"), np.int64).dtype == np.int64
    assert fli.extract_jpeg_shape(encoded("jpeg", "gray_q90")).tolist() == [17, 23, 1]
    assert fli.is_jpeg(encoded("jpeg", "gray_q90")) and not fli.is_jpeg(encoded("png", "gray8"))


@pytest.mark.parametrize("source, name, quality, chroma", [
    ("rgb", "rgb_q90", 90, True), ("rgb40", "rgb40_q75", 75, True),
    ("rgb40", "rgb40_444", 95, False), ("gray", "gray_q90", 90, True)])
def test_encode_jpeg_decodes_to_tensorflows_encoding(source, name, quality, chroma):
    ours = fli.encode_jpeg(GOLDEN[f"src/{source}"], quality=quality, chroma_downsampling=chroma)
    # Same quantization, DCT and subsampling as tf.io.encode_jpeg: the same decoded pixels.
    np.testing.assert_array_equal(fli.decode_jpeg(ours), fli.decode_jpeg(encoded("jpeg", name)))


@pytest.mark.parametrize("source", ["gray", "rgb", "rgba", "rgb16", "gray16"])
def test_encode_png_round_trips_and_tensorflow_reads_the_same(source):
    image = GOLDEN[f"src/{source}"]
    data = fli.encode_png(image, compression=9)
    np.testing.assert_array_equal(fli.decode_png(data, dtype=image.dtype), image)
    assert fli.decode_png(fli.encode_png(image)).shape == image.shape


def test_encode_batches_give_object_arrays_of_bytes():
    batch = np.stack([GOLDEN["src/rgb"], GOLDEN["src/rgb"][::-1]])
    jpegs = fli.encode_jpeg(batch)
    assert jpegs.dtype == object and jpegs.shape == (2,) and isinstance(jpegs[0], bytes)
    np.testing.assert_array_equal(fli.decode_png(fli.encode_png(batch)), batch)
    assert fli.decode_jpeg(jpegs).shape == (2, 17, 23, 3)


def test_encode_bad_input():
    with pytest.raises(fl.InvalidArgumentError,
                       match=r"uint8 image .* float32 with shape \(2, 2, 3\)"):
        fli.encode_jpeg(np.zeros((2, 2, 3), np.float32))
    with pytest.raises(fl.InvalidArgumentError, match=r"shape \(2, 2, 4\)"):
        fli.encode_jpeg(np.zeros((2, 2, 4), np.uint8))
    with pytest.raises(fl.InvalidArgumentError, match="quality"):
        fli.encode_jpeg(np.zeros((2, 2, 3), np.uint8), quality=101)
    with pytest.raises(fl.InvalidArgumentError, match=r"shape \(2, 2, 2\)"):
        fli.encode_png(np.zeros((2, 2, 2), np.uint8))


def test_batch_of_bytes_decodes_to_a_stacked_array():
    data = [encoded("jpeg", "rgb40_q75"), encoded("jpeg", "rgb40_444")]
    as_array = np.array(data, dtype=object)
    expected = np.stack([GOLDEN["decode_jpeg/rgb40_q75/0/default"],
                         GOLDEN["decode_jpeg/rgb40_444/0/default"]])
    np.testing.assert_array_equal(fli.decode_jpeg(data), expected)
    np.testing.assert_array_equal(fli.decode_jpeg(as_array), expected)
    batched = next(iter(fl.Dataset.from_tensor_slices(data).batch(2).map(fli.decode_jpeg)))
    np.testing.assert_array_equal(batched, expected)
    with pytest.raises(fl.InvalidArgumentError,
                       match=r"element 1: \(17, 23, 3\)\); decode before batching"):
        fli.decode_jpeg([data[0], encoded("jpeg", "rgb_q90")])


TRUNCATED_JPEG = encoded("jpeg", "rgb40_q75")[:-300]  # the header whole, the scan cut


@pytest.mark.parametrize("decode, data, expected", [
    (fli.decode_jpeg, TRUNCATED_JPEG, "invalid or truncated JPEG data"),
    (fli.decode_jpeg, encoded("jpeg", "rgb40_q75")[:10], "invalid or truncated JPEG header"),
    (fli.decode_jpeg, encoded("jpeg", "rgb40_q75")[:200], "invalid or truncated JPEG header"),
    (fli.decode_jpeg, b"not an image at all", r"expected JPEG data \(starting with FF D8 FF\); "
                                              r"got 19 bytes starting with b'not an i'"),
    (fli.decode_jpeg, b"", "expected JPEG data"),
    (fli.decode_png, encoded("png", "rgb8")[:60], "invalid or truncated PNG data"),
    (fli.decode_png, encoded("jpeg", "rgb_q90"), "expected PNG data"),
    (fli.decode_gif, encoded("gif", "two_frames")[:40], "invalid or truncated GIF data"),
    (fli.decode_image, encoded("png", "rgb8")[:60], "invalid or truncated PNG data"),
    (fli.decode_image, TRUNCATED_JPEG, "invalid or truncated JPEG data"),
    (fli.decode_image, b"\x00" * 30, "unknown image format"),
])
def test_bad_bytes_are_clear_errors_never_crashes(decode, data, expected):
    with pytest.raises(fl.InvalidArgumentError, match=expected):
        decode(data)


def test_bad_arguments():
    data = encoded("jpeg", "rgb_q90")
    with pytest.raises(fl.InvalidArgumentError,
                       match=r"channels must be one of \(0, 1, 3\); got 4"):
        fli.decode_jpeg(data, channels=4)
    with pytest.raises(fl.InvalidArgumentError, match="dct_method"):
        fli.decode_jpeg(data, dct_method="FLOAT")
    with pytest.raises(fl.InvalidArgumentError, match="ratio is 1, 2, 4 or 8"):
        fli.decode_jpeg(data, ratio=3)
    with pytest.raises(fl.InvalidArgumentError, match="got a str"):
        fli.decode_jpeg("image.jpg")
    with pytest.raises(fl.InvalidArgumentError, match="dtype is uint8 or uint16"):
        fli.decode_png(encoded("png", "rgb8"), dtype=np.float32)
    with pytest.raises(fl.InvalidArgumentError,
                       match="element 1 of the batch: decode_jpeg: invalid"):
        fli.decode_jpeg([data, TRUNCATED_JPEG])
    with pytest.raises(fl.InvalidArgumentError, match="is 1-D"):
        fli.decode_jpeg(np.array([[data]], dtype=object))


def test_a_truncated_jpeg_in_a_pipeline_names_the_element():
    good = encoded("jpeg", "rgb_q90")
    ds = fl.Dataset.from_tensor_slices([good, good, TRUNCATED_JPEG]).map(fli.decode_jpeg)
    iterator = iter(ds)
    assert next(iterator).shape == (17, 23, 3)
    assert next(iterator).shape == (17, 23, 3)
    with pytest.raises(fl.InvalidArgumentError, match="truncated JPEG") as caught:
        next(iterator)
    assert "element 2" in str(caught.value) or "element 2" in " ".join(
        getattr(caught.value, "__notes__", []))
