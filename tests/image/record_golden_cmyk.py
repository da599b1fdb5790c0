"""Record tf.io's decoding of CMYK and YCCK JPEGs as golden values for test_codecs_cmyk.py.

Run with an interpreter that has TensorFlow 2.21 and Pillow (tests never need TensorFlow):

    python tests/image/record_golden_cmyk.py

It writes ``tests/image/golden_cmyk.npz``: the JPEG files (as uint8 arrays of their bytes:
Pillow's Adobe CMYK, the same file marked YCCK, one without its Adobe marker, a progressive
one) and what TensorFlow 2.21 decodes from them.
"""

from __future__ import annotations

import io
from pathlib import Path

import numpy as np
import tensorflow as tf
from PIL import Image

OUT = Path(__file__).with_name("golden_cmyk.npz")


def cmyk_source(height: int, width: int, seed: int) -> np.ndarray:
    """Smooth ink planes with noise, every plane different."""
    rng = np.random.default_rng(seed)
    y, x = np.mgrid[0:height, 0:width].astype(np.float64)
    planes = [(0.5 + 0.4 * np.sin(x / (4 + c) + y / (6 - c) + c)) * 255 for c in range(4)]
    image = np.stack(planes, -1) + rng.normal(0, 10, (height, width, 4))
    return np.clip(np.rint(image), 0, 255).astype(np.uint8)


def jpeg(image: np.ndarray, **options) -> bytes:
    buffer = io.BytesIO()
    Image.fromarray(image, "CMYK").save(buffer, format="JPEG", **options)
    return buffer.getvalue()


def adobe_segment(data: bytes) -> tuple[int, int]:
    """Where Pillow's APP14 "Adobe" segment starts, and its length with the marker."""
    at = data.index(b"\xff\xee")
    assert data[at + 4:at + 9] == b"Adobe"
    return at, 2 + int.from_bytes(data[at + 2:at + 4], "big")


def files() -> dict[str, bytes]:
    adobe = jpeg(cmyk_source(40, 32, 1), quality=90)
    at, length = adobe_segment(adobe)
    ycck = bytearray(adobe)
    ycck[at + 4 + 11] = 2  # the transform byte: libjpeg reads the planes as YCCK
    plain = adobe[:at] + adobe[at + length:]  # no Adobe marker: plain (not inverted) CMYK
    return {"cmyk_adobe": adobe, "ycck_adobe": bytes(ycck), "cmyk_plain": plain,
            "cmyk_progressive": jpeg(cmyk_source(23, 17, 2), quality=75, progressive=True)}


def main() -> None:
    g: dict[str, np.ndarray] = {}
    for name, data in files().items():
        g[f"jpeg/{name}"] = np.frombuffer(data, np.uint8)
        for channels in (0, 3):
            for dct in ("", "INTEGER_ACCURATE"):
                g[f"decode_jpeg/{name}/{channels}/{dct or 'default'}"] = tf.io.decode_jpeg(
                    data, channels=channels, dct_method=dct).numpy()
        g[f"decode_jpeg_ratio2/{name}"] = tf.io.decode_jpeg(data, ratio=2).numpy()
        g[f"decode_and_crop_jpeg/{name}"] = tf.io.decode_and_crop_jpeg(
            data, [3, 5, 12, 9]).numpy()
        g[f"decode_image/{name}"] = tf.io.decode_image(data).numpy()
        g[f"extract_jpeg_shape/{name}"] = tf.io.extract_jpeg_shape(data).numpy()
        try:
            tf.io.decode_jpeg(data, channels=1)
            g[f"gray_refused/{name}"] = np.array(False)
        except tf.errors.InvalidArgumentError:
            g[f"gray_refused/{name}"] = np.array(True)
    np.savez_compressed(OUT, **g)


if __name__ == "__main__":
    main()
