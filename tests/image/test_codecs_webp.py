"""WebP: decode_webp and decode_image against tf.io's outputs recorded by record_golden_webp.py
(TensorFlow 2.21); animations, channels, and the decode limits."""

from __future__ import annotations

import io
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

import feedline as fl
from feedline import image as fli

GOLDEN = np.load(Path(__file__).with_name("golden_webp.npz"))
NAMES = ["lossy_rgb", "lossy_rgba", "lossless_rgb", "lossless_rgba"]


def encoded(name: str) -> bytes:
    return GOLDEN[f"webp/{name}"].tobytes()


def animation(frames: int = 3, size: tuple[int, int] = (27, 21)) -> bytes:
    y, x = np.mgrid[0:size[1], 0:size[0]]
    pictures = [Image.fromarray(np.stack([x * 9, y * 11, (x + y + 20 * i) * 5], -1)
                                .astype(np.uint8)) for i in range(frames)]
    buffer = io.BytesIO()
    pictures[0].save(buffer, format="WEBP", save_all=True, append_images=pictures[1:],
                     lossless=True, duration=40)
    return buffer.getvalue()


@pytest.mark.parametrize("name", NAMES)
def test_decode_webp_and_decode_image_equal_tensorflow_exactly(name):
    data = encoded(name)
    expected = GOLDEN[f"decode_webp/{name}"]
    assert expected.shape[0] == 1 and expected.shape[-1] == (4 if "rgba" in name else 3)
    np.testing.assert_array_equal(fli.decode_webp(data), expected)
    np.testing.assert_array_equal(fli.decode_webp(data, channels=expected.shape[-1]), expected)
    np.testing.assert_array_equal(fli.decode_image(data), GOLDEN[f"decode_image/{name}"])
    np.testing.assert_array_equal(fli.decode_image(data, expand_animations=False),
                                  GOLDEN[f"decode_image_first/{name}"])
    np.testing.assert_array_equal(fli.decode_image(data, dtype=np.float32),
                                  expected * np.float32(1 / 255))


@pytest.mark.parametrize("name", NAMES)
def test_channels_other_than_the_files_are_refused_as_in_tensorflow(name):
    other = 3 if "rgba" in name else 4
    with pytest.raises(fl.InvalidArgumentError, match="channels must be 0 or"):
        fli.decode_webp(encoded(name), channels=other)
    with pytest.raises(fl.InvalidArgumentError, match="channels must be 0, 3 or 4 for a WebP"):
        fli.decode_image(encoded(name), channels=1)


def test_an_animation_decodes_to_rgba_frames():
    data = animation()
    frames = fli.decode_webp(data)
    assert frames.shape == (3, 21, 27, 4)
    with Image.open(io.BytesIO(data)) as picture:
        for index in range(3):
            picture.seek(index)
            np.testing.assert_array_equal(frames[index], np.asarray(picture.convert("RGBA")))
    np.testing.assert_array_equal(fli.decode_image(data, expand_animations=False), frames[0])
    np.testing.assert_array_equal(fli.decode_webp([data, data])[1], frames)
    with pytest.raises(fl.InvalidArgumentError, match="an animation is RGBA"):
        fli.decode_webp(data, channels=3)


def vp8x_canvas(data: bytes, height: int, width: int) -> bytes:
    """``data`` (an animation, so a VP8X file) with its canvas declared ``height x width``."""
    out = bytearray(data)
    assert out[12:16] == b"VP8X"
    out[24:27] = (width - 1).to_bytes(3, "little")
    out[27:30] = (height - 1).to_bytes(3, "little")
    return bytes(out)


def test_webp_bombs_are_refused_before_libwebp_allocates_the_canvas():
    # libwebp allocates the declared canvas (twice) when Pillow opens the file: 16,000 x
    # 16,000 would be 2 GB before any frame is read.
    bomb = vp8x_canvas(animation(), 16000, 16000)
    with pytest.raises(fl.InvalidArgumentError, match="16,000 x 16,000 = 256,000,000 pixels, "
                                                      "over the decode limit"):
        fli.decode_webp(bomb)
    with pytest.raises(fl.InvalidArgumentError, match="over the decode limit"):
        fli.decode_image(bomb, expand_animations=False)
    fli.set_decode_limits(max_animation_bytes=3 * 21 * 27 * 4 - 1)
    with pytest.raises(fl.InvalidArgumentError, match="3 frames .*max_animation_bytes"):
        fli.decode_webp(animation())
    assert fli.decode_image(animation(), expand_animations=False).shape == (21, 27, 4)
    fli.set_decode_limits(max_pixels=21 * 27 - 1)
    with pytest.raises(fl.InvalidArgumentError, match="21 x 27 = 567 pixels"):
        fli.decode_webp(encoded("lossy_rgb"))


@pytest.mark.parametrize("data", [
    b"RIFF\x00\x00\x00\x00WEBP",
    b"RIFF\x00\x00\x00\x00WEBPVP8 " + bytes(20),
    b"RIFF\x00\x00\x00\x00WEBPVP8L" + bytes(20),
    b"RIFF\x00\x00\x00\x00WEBPALPH" + bytes(20),
], ids=["short", "vp8_no_start_code", "vp8l_no_signature", "unknown_first_chunk"])
def test_bad_webp_headers_are_clear_errors(data):
    with pytest.raises(fl.InvalidArgumentError, match="decode_webp: invalid WebP header"):
        fli.decode_webp(data)


def test_damaged_webp_data_is_a_feedline_error():
    data = encoded("lossy_rgb")
    with pytest.raises(fl.InvalidArgumentError, match="decode_webp: invalid or truncated WebP"):
        fli.decode_webp(data[:len(data) - 10])
    truncated = encoded("lossless_rgba")[:60]
    with pytest.raises(fl.InvalidArgumentError, match="decode_image: invalid"):
        fli.decode_image(truncated)
    with pytest.raises(fl.InvalidArgumentError, match="expected WebP data"):
        fli.decode_webp(fli.encode_png(np.zeros((2, 2, 3), np.uint8)))
    with pytest.raises(fl.InvalidArgumentError, match="dtype is uint8"):
        fli.decode_webp(encoded("lossy_rgb"), dtype=np.uint16)
