"""Record tf.io's decoding of WebP images as golden values for test_codecs_webp.py.

Run with an interpreter that has TensorFlow 2.21 and Pillow (tests never need TensorFlow):

    python tests/image/record_golden_webp.py

It writes ``tests/image/golden_webp.npz``: still WebP files made by Pillow (lossy and lossless,
with and without alpha; as uint8 arrays of their bytes) and what TensorFlow 2.21 decodes from
them. Animations are not recorded: TensorFlow 2.21 gives them 3 channels of misplaced RGBA
bytes, or corrupts its heap in ``decode_image`` (measured).
"""

from __future__ import annotations

import io
from pathlib import Path

import numpy as np
import tensorflow as tf
from PIL import Image

OUT = Path(__file__).with_name("golden_webp.npz")


def source(height: int, width: int, channels: int, seed: int) -> np.ndarray:
    rng = np.random.default_rng(seed)
    y, x = np.mgrid[0:height, 0:width].astype(np.float64)
    planes = [(0.5 + 0.4 * np.sin(x / (3 + c) + y / (5 + c) + c)) * 255 for c in range(channels)]
    image = np.stack(planes, -1) + rng.normal(0, 8, (height, width, channels))
    return np.clip(np.rint(image), 0, 255).astype(np.uint8)


def webp(image: np.ndarray, **options) -> bytes:
    buffer = io.BytesIO()
    Image.fromarray(image).save(buffer, format="WEBP", **options)
    return buffer.getvalue()


def main() -> None:
    files = {
        "lossy_rgb": webp(source(21, 27, 3, 1), quality=80),
        "lossy_rgba": webp(source(21, 27, 4, 2), quality=70),
        "lossless_rgb": webp(source(13, 9, 3, 3), lossless=True),
        "lossless_rgba": webp(source(13, 9, 4, 4), lossless=True, exact=True),
    }
    g: dict[str, np.ndarray] = {}
    for name, data in files.items():
        g[f"webp/{name}"] = np.frombuffer(data, np.uint8)
        g[f"decode_webp/{name}"] = tf.io.decode_webp(data).numpy()
        g[f"decode_image/{name}"] = tf.io.decode_image(data).numpy()
        g[f"decode_image_first/{name}"] = tf.io.decode_image(data, expand_animations=False).numpy()
    np.savez_compressed(OUT, **g)


if __name__ == "__main__":
    main()
