"""Decompression bombs and crafted input: the decoders refuse what decodes too large, before
allocating it, and raise only feedline errors on damaged bytes."""

from __future__ import annotations

import io
import json
import struct
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

import feedline as fl
from feedline import image as fli

DATA_LIMIT_MIB = 1024
"""The children's RLIMIT_DATA: an unbounded decode fails there instead of taking the machine."""


def bmp_bomb(width: int, height: int) -> bytes:
    """A 24-bit BMP declaring ``width x height`` with 64 bytes of pixels."""
    pixels = b"\x00" * 64
    info = struct.pack("<IiiHHIIiiII", 40, width, height, 1, 24, 0, 0, 2835, 2835, 0, 0)
    header = struct.pack("<2sIHHI", b"BM", 14 + len(info) + len(pixels), 0, 0, 14 + len(info))
    return header + info + pixels


def progressive_jpeg_bomb(height: int, width: int) -> bytes:
    """A progressive JPEG's first 200 bytes after its SOF2, which declares ``height x width``."""
    buffer = io.BytesIO()
    Image.fromarray(np.full((16, 16, 3), 99, np.uint8)).save(buffer, "JPEG", progressive=True)
    data = bytearray(buffer.getvalue())
    at = data.find(b"\xff\xc2")
    data[at + 5:at + 9] = struct.pack(">HH", height, width)
    return bytes(data[:at + 200])


def png_bomb(height: int, width: int) -> bytes:
    """A valid 2x2 PNG whose IHDR then claims ``height x width`` (its CRC left stale)."""
    data = bytearray(fli.encode_png(np.zeros((2, 2, 3), np.uint8)))
    data[16:24] = struct.pack(">II", width, height)
    return bytes(data)


def gif_bomb(width: int, height: int, frames: int) -> bytes:
    """A ``width x height`` logical screen holding ``frames`` 1x1 frames (14 bytes each)."""
    out = bytearray(b"GIF89a" + struct.pack("<HHBBB", width, height, 0x80, 0, 0))
    out += b"\x00\x00\x00\xff\xff\xff"
    for _ in range(frames):
        out += b"\x2c" + struct.pack("<HHHHB", 0, 0, 1, 1, 0) + b"\x02\x02\x44\x01\x00"
    return bytes(out + b"\x3b")


def decode_in_child(call: str, data: bytes, folder: Path) -> dict:
    """Run ``call`` (an expression of ``fli`` and ``data``) in a child capped at
    DATA_LIMIT_MIB; returns what it raised (or the result's shape) and its peak RSS."""
    path = folder / "input.bin"
    path.write_bytes(data)
    script = textwrap.dedent(f"""
        import json, resource, sys
        cap = {DATA_LIMIT_MIB} << 20
        resource.setrlimit(resource.RLIMIT_DATA, (cap, cap))
        from feedline import image as fli
        data = open({str(path)!r}, "rb").read()
        try:
            result = {{"shape": list(({call}).shape)}}
        except BaseException as error:
            result = {{"kind": type(error).__module__ + "." + type(error).__name__,
                       "message": str(error)}}
        # VmHWM: this process's own peak (ru_maxrss starts at the parent's when it is larger)
        with open("/proc/self/status") as status:
            result["peak_mib"] = next(int(line.split()[1]) for line in status
                                      if line.startswith("VmHWM")) / 1024
        print(json.dumps(result))
    """)
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                          timeout=120, cwd=folder)
    assert done.returncode == 0, done.stderr[-2000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


BOMBS = {
    # (bytes, the call, the number the error names)
    "bmp": (bmp_bomb(30000, 30000), "fli.decode_image(data)", "900,000,000 pixels"),
    "bmp_top_down": (bmp_bomb(20000, -20000), "fli.decode_image(data)",
                         "400,000,000 pixels"),
    "progressive_jpeg": (progressive_jpeg_bomb(60000, 60000), "fli.decode_jpeg(data)",
                         "3,600,000,000 pixels"),
    "progressive_jpeg_image": (progressive_jpeg_bomb(20000, 20000), "fli.decode_image(data)",
                               "400,000,000 pixels"),
    "jpeg_crop": (progressive_jpeg_bomb(60000, 60000),
                  "fli.decode_and_crop_jpeg(data, [0, 0, 8, 8])", "3,600,000,000 pixels"),
    "png": (png_bomb(40000, 40000), "fli.decode_png(data)", "1,600,000,000 pixels"),
    "gif_screen": (gif_bomb(65535, 65535, 1), "fli.decode_gif(data)", "4,294,836,225 pixels"),
    "gif_screen_first_frame": (gif_bomb(65535, 65535, 1),
                               "fli.decode_image(data, expand_animations=False)",
                               "4,294,836,225 pixels"),
    "gif_frames": (gif_bomb(3000, 3000, 50), "fli.decode_gif(data)", "1,350,000,000 bytes"),
    "gif_frames_image": (gif_bomb(3000, 3000, 50), "fli.decode_image(data)",
                         "1,350,000,000 bytes"),
}


@pytest.mark.timeout(300)
@pytest.mark.parametrize("name", sorted(BOMBS))
@pytest.mark.slow
def test_a_decompression_bomb_is_refused_before_it_is_decoded(name, tmp_path):
    data, call, found = BOMBS[name]
    assert len(data) < 1000
    result = decode_in_child(call, data, tmp_path)
    assert result.get("kind") == "feedline.core.errors.InvalidArgumentError", result
    assert found in result["message"] and "decode limit" in result["message"]
    assert "set_decode_limits" in result["message"]
    assert result["peak_mib"] < 256, result  # the interpreter and its libraries: ~60 MiB


@pytest.mark.timeout(300)
@pytest.mark.parametrize("chunk", [b"PLTE", b"tEXt"])
@pytest.mark.slow
def test_a_png_chunk_longer_than_the_file_is_refused_before_opencv_allocates_it(chunk,
                                                                                tmp_path):
    # Found by the PNG fuzz target: OpenCV allocated and filled a chunk's declared length
    # (600 MB here) before reading it.
    good = fli.encode_png(np.zeros((2, 2, 3), np.uint8))
    data = good[:33] + struct.pack(">I", 600_000_000) + chunk + bytes(16) + good[33:]
    result = decode_in_child("fli.decode_png(data)", data, tmp_path)
    assert result.get("kind") == "feedline.core.errors.InvalidArgumentError", result
    assert f"chunk {chunk!r} at offset 33 declares 600,000,000 bytes" in result["message"]
    assert result["peak_mib"] < 256, result


@pytest.mark.timeout(300)
@pytest.mark.slow
def test_expand_animations_false_decodes_only_the_first_frame(tmp_path):
    # 50 frames of 3000 x 3000 are 1.35 GB decoded; the first alone is 27 MB.
    data = gif_bomb(3000, 3000, 50)
    result = decode_in_child("fli.decode_image(data, expand_animations=False)", data, tmp_path)
    assert result.get("shape") == [3000, 3000, 3], result
    assert result["peak_mib"] < 400, result


def test_images_within_the_limits_decode_and_the_limits_are_configurable():
    png = fli.encode_png(np.zeros((20, 30, 3), np.uint8))
    jpeg = fli.encode_jpeg(np.zeros((20, 30, 3), np.uint8))
    gif = gif_bomb(30, 20, 4)
    assert fli.decode_png(png).shape == (20, 30, 3)
    previous = fli.set_decode_limits(max_pixels=599)
    assert previous == fli.DecodeLimits(fli.DEFAULT_MAX_PIXELS, fli.DEFAULT_MAX_ANIMATION_BYTES)
    assert previous.max_pixels == 89_478_485  # Pillow's Image.MAX_IMAGE_PIXELS
    for decode, data in [(fli.decode_png, png), (fli.decode_jpeg, jpeg), (fli.decode_gif, gif),
                         (fli.decode_image, png)]:
        with pytest.raises(fl.InvalidArgumentError, match=r"20 x 30 = 600 pixels, over the "
                                                          r"decode limit of 599 pixels"):
            decode(data)
    fli.set_decode_limits(max_pixels=600, max_animation_bytes=3 * 600 * 3)
    assert fli.decode_limits() == (600, 5400)
    assert fli.decode_jpeg(jpeg).shape == (20, 30, 3)
    with pytest.raises(fl.InvalidArgumentError, match="4 frames .* over the decode limit of "
                                                      "5,400 bytes.*max_animation_bytes"):
        fli.decode_gif(gif)
    assert fli.decode_image(gif, expand_animations=False).shape == (20, 30, 3)
    fli.set_decode_limits(max_animation_bytes=4 * 600 * 3)
    assert fli.decode_gif(gif).shape == (4, 20, 30, 3)


def test_a_batch_names_the_element_over_the_limit():
    fli.set_decode_limits(max_pixels=100)
    small, large = (fli.encode_png(np.zeros((side, side, 1), np.uint8)) for side in (10, 11))
    with pytest.raises(fl.InvalidArgumentError, match="element 1 of the batch: .*121 pixels"):
        fli.decode_png([small, large])


@pytest.mark.parametrize("value", [0, -1, 1.5, "10", True])
def test_bad_limits_are_refused(value):
    with pytest.raises(fl.InvalidArgumentError, match="positive integers"):
        fli.set_decode_limits(max_pixels=value)


@pytest.mark.timeout(120)
@pytest.mark.slow
def test_worker_processes_inherit_the_limits_through_the_environment(monkeypatch):
    fli.set_decode_limits(max_pixels=12345)
    result = subprocess.run(
        [sys.executable, "-c", "from feedline import image as fli; "
                               "print(fli.decode_limits().max_pixels)"],
        capture_output=True, text=True, timeout=100)
    assert result.stdout.strip() == "12345", result.stderr
    monkeypatch.setenv("FEEDLINE_IMAGE_MAX_PIXELS", "many")
    with pytest.raises(fl.InvalidArgumentError, match="FEEDLINE_IMAGE_MAX_PIXELS must be a "
                                                      "positive integer"):
        fli.decode_limits()


# Found by tests/fuzz/targets_image.py against the decoders before they caught these (zlib
# then base64): each raised a raw error from simplejpeg, Pillow or NumPy.
CRAFTED = {
    # simplejpeg's header names only the subsamplings it knows: KeyError 6 (4:4:1).
    "jpeg_unknown_subsampling": (
        "eNr7f+P/AwYBLzdPNwZGRgYGRiBk+H+bwZmBjYWVjZWFjY2VjZ2djYNLgIuLk5NLhI+fR0BcREJCXERMTEpW"
        "VV5KWllGTExB56uymrqmlqakvK6BroaBqoamBsgQRnZ2di4OLmEuLmENKTEpDZLB/wMMghwMqgy6zIwiDEyC"
        "jMyCjP+PMEgAncoIci0csDIA3QiUkRZgYEaTY1E0ZGJWEgJKSjEyMDExI+liYGFjZmdkBWmUFWRgZmBiRtbI"
        "xMKYyKxoGCj4/y4DCwPT/1sMPMxAEwSZBRnsGT5XvXgiEivTtHrxhMCSIkmSNbgr971tWdfn6HrxhNYuS1Zx"
        "d4Uki8uyt+3/Xzgf7q4wfZK9hcEuS5aaiT8PF/VFbrp7fbkARNWmF0+EYxUFYr6o3buUINP0y/J84d3N/y+q"
        "lhRxAk1LvXhC7f////V3uKy3iQD175n482DpxROqT/rPsS7uFQIa8/+Sa+mPpu71R5QYH58MPHbzl9qmP46u"
        "1x8Jsilclk5/+f/y9evRHapPtstPUlhyQmfd/Xnz/98EANxwl3w="
    ),
    # Pillow: IndexError from a frame's LZW data.
    "gif_index_error": (
        "eNpz93SzME/kZGBnaGCAAsWfLDwgWgdEgGQYOJjN0IT2AIU25wvzMzByyHhsWHCwmUNYy0VCgMEaAGS8Clg="
    ),
    # Pillow: struct.error from a truncated extension.
    "gif_struct_error": "eNpz93SzME/kZGBnaGCAAsWfLDwgWgdEcDJ0MTBwYEpYAwDBzQW5",
    # A second frame reaching past the first grows Pillow's canvas: NumPy could not stack
    # frames of two sizes (ValueError).
    "gif_frames_of_two_sizes": (
        "eNpz93SzME/kZGBnbGCAAsWfLDwgWgdEAGUYGDj4GRg5ZDw2LDjYzCGs5SIhABbGpkGIGYcGawCnEg12"
    ),
}
DECODERS = {
    "decode_image": fli.decode_image,
    "decode_image_first_frame": lambda data: fli.decode_image(data, expand_animations=False),
    "decode_jpeg": fli.decode_jpeg,
    "decode_and_crop_jpeg": lambda data: fli.decode_and_crop_jpeg(data, [0, 0, 1, 1]),
    "extract_jpeg_shape": fli.extract_jpeg_shape,
    "decode_png": fli.decode_png,
    "decode_gif": fli.decode_gif,
}


def crafted(name: str) -> bytes:
    import base64
    import zlib

    return zlib.decompress(base64.b64decode("".join(CRAFTED[name])))


@pytest.mark.parametrize("decoder", sorted(DECODERS))
@pytest.mark.parametrize("name", sorted(CRAFTED))
def test_crafted_bytes_give_feedline_errors_only(name, decoder):
    try:
        DECODERS[decoder](crafted(name))
    except fl.InvalidArgumentError as error:
        assert str(error).startswith(decoder.replace("_first_frame", ""))


def test_gif_frames_of_two_sizes_stack_on_the_grown_canvas():
    frames = fli.decode_gif(crafted("gif_frames_of_two_sizes"))
    assert frames.shape == (2, 793, 9, 3)
    first = fli.decode_image(crafted("gif_frames_of_two_sizes"), expand_animations=False)
    assert first.shape == (263, 9, 3)
    np.testing.assert_array_equal(frames[0, :263], first)
    assert not frames[0, 263:].any()  # padded with black below the first frame


def test_a_jpeg_subsampling_simplejpeg_does_not_name_still_has_a_shape():
    assert fli.extract_jpeg_shape(crafted("jpeg_unknown_subsampling")).tolist() == [37, 45, 3]


@pytest.mark.parametrize("data", [bmp_bomb(1 << 21, 1), png_bomb(1, 1 << 21)],
                         ids=["bmp", "png"])
def test_sizes_opencv_refuses_under_the_pixel_limit_are_feedline_errors(data):
    # 2 Mpx, but wider than OpenCV's CV_IO_MAX_IMAGE_WIDTH: cv2.error before.
    with pytest.raises(fl.InvalidArgumentError, match="decode_image: invalid"):
        fli.decode_image(data)
