"""Record tf.io / tf.image outputs as golden values for feedline.image's codec and geometry tests.

Run with TensorFlow's interpreter (tests never need TensorFlow):

    benchmarks/.venvs/tf/bin/python tests/image/record_golden.py

It writes ``tests/image/golden_codecs_geometry.npz``: the source images, their encodings (as
uint8 arrays of the encoded bytes), and what TensorFlow 2.21 decodes, resizes and crops from them.
"""

from __future__ import annotations

import io
from pathlib import Path

import numpy as np
import tensorflow as tf
from PIL import Image

OUT = Path(__file__).with_name("golden_codecs_geometry.npz")


def source(height: int, width: int, channels: int, seed: int, dtype=np.uint8) -> np.ndarray:
    """A smooth picture with noise: JPEG-like content, with every channel different."""
    rng = np.random.default_rng(seed)
    y, x = np.mgrid[0:height, 0:width].astype(np.float64)
    top = 255.0 if dtype == np.uint8 else 65535.0
    planes = [(x / width * 0.8 + 0.1 * np.sin(y / 3 + c)) * top for c in range(channels)]
    image = np.stack(planes, -1) + rng.normal(0, top * 0.05, (height, width, channels))
    return np.clip(np.rint(image), 0, top).astype(dtype)


def main() -> None:
    g: dict[str, np.ndarray] = {}
    rgb = source(17, 23, 3, 1)
    rgb40 = source(40, 32, 3, 2)
    gray = source(17, 23, 1, 3)
    rgba = source(40, 32, 4, 4)
    rgb16 = source(17, 23, 3, 5, np.uint16)
    gray16 = source(40, 32, 1, 6, np.uint16)
    for name, image in [("rgb", rgb), ("rgb40", rgb40), ("gray", gray), ("rgba", rgba),
                        ("rgb16", rgb16), ("gray16", gray16)]:
        g[f"src/{name}"] = image

    jpegs = {
        "rgb_q90": tf.io.encode_jpeg(rgb, quality=90),
        "rgb40_q75": tf.io.encode_jpeg(rgb40, quality=75),
        "rgb40_444": tf.io.encode_jpeg(rgb40, quality=95, chroma_downsampling=False),
        "rgb40_progressive": tf.io.encode_jpeg(rgb40, quality=85, progressive=True),
        "gray_q90": tf.io.encode_jpeg(gray, quality=90),
    }
    for name, data in jpegs.items():
        data = data.numpy()
        g[f"jpeg/{name}"] = np.frombuffer(data, np.uint8)
        for channels in (0, 1, 3):
            for dct in ("", "INTEGER_ACCURATE"):
                decoded = tf.io.decode_jpeg(data, channels=channels, dct_method=dct).numpy()
                g[f"decode_jpeg/{name}/{channels}/{dct or 'default'}"] = decoded
        if name in ("rgb_q90", "gray_q90"):
            g[f"decode_image_f32/{name}"] = tf.io.decode_image(data, dtype=tf.float32).numpy()
    # ratio: libjpeg's DCT-domain downscale (1/2, 1/4, 1/8).
    for name in ("rgb40_q75", "rgb_q90"):
        for ratio in (2, 4, 8):
            g[f"decode_jpeg_ratio/{name}/{ratio}"] = tf.io.decode_jpeg(
                g[f"jpeg/{name}"].tobytes(), ratio=ratio).numpy()
    # decode_and_crop_jpeg: windows [y, x, h, w], on a 4:2:0 and a 4:4:4 image.
    for name in ("rgb40_q75", "rgb40_444", "rgb40_progressive"):
        data = g[f"jpeg/{name}"].tobytes()
        for window in ((0, 0, 40, 32), (5, 7, 20, 16), (13, 3, 9, 11), (39, 31, 1, 1)):
            g[f"decode_and_crop_jpeg/{name}/{'_'.join(map(str, window))}"] = (
                tf.io.decode_and_crop_jpeg(data, window, channels=3).numpy())

    pngs = {
        "gray8": tf.io.encode_png(gray), "rgb8": tf.io.encode_png(rgb),
        "rgba8": tf.io.encode_png(rgba), "rgb16": tf.io.encode_png(rgb16),
        "gray16": tf.io.encode_png(gray16),
    }
    for name, data in pngs.items():
        data = data.numpy()
        g[f"png/{name}"] = np.frombuffer(data, np.uint8)
        for channels in (0, 1, 3, 4):
            for dtype in (tf.uint8, tf.uint16):
                if dtype == tf.uint16 and name not in ("rgb16", "gray8"):
                    continue  # the other 8-bit cases scale the same way as gray8
                decoded = tf.io.decode_png(data, channels=channels, dtype=dtype).numpy()
                g[f"decode_png/{name}/{channels}/{dtype.name}"] = decoded
        if name in ("rgb16", "gray8"):
            g[f"decode_image_f32/{name}"] = tf.io.decode_image(data, dtype=tf.float32).numpy()

    frames = [Image.fromarray(source(17, 23, 3, 10 + i)).quantize(64) for i in range(2)]
    buffer = io.BytesIO()
    frames[0].save(buffer, format="GIF", save_all=True, append_images=frames[1:], duration=50)
    gif = buffer.getvalue()
    g["gif/two_frames"] = np.frombuffer(gif, np.uint8)
    g["decode_gif/two_frames"] = tf.io.decode_gif(gif).numpy()
    g["decode_image_first/two_frames"] = tf.io.decode_image(gif, expand_animations=False).numpy()

    # resize: float and uint8 input, down, up, mixed; every method, with and without antialias.
    images = {"rgb": rgb, "rgb40f": rgb40.astype(np.float32) / 255.0}
    methods = ["bilinear", "nearest", "area", "bicubic", "lanczos3", "lanczos5", "gaussian",
               "mitchellcubic"]
    # Downscaling is where antialias matters; upscaling records every method once (antialias
    # changes nothing there but bilinear/bicubic are checked for it), keeping the file small.
    cases = {(8, 11): (methods, (False, True)), (5, 3): (methods, (False, True)),
             (22, 27): (methods, (False,)),
             (17, 40): (["bilinear", "bicubic", "area"], (False, True)),
             (21, 30): (["bilinear", "bicubic"], (True,))}
    for name, image in images.items():
        # The float image (values in [0, 1], another shape) checks only the downscale cases.
        for size, (size_methods, antialiases) in cases.items():
            if name == "rgb40f" and size not in ((8, 11), (5, 3)):
                continue
            for method in size_methods:
                for antialias in antialiases:
                    out = tf.image.resize(image, size, method=method, antialias=antialias).numpy()
                    g[f"resize/{name}/{size[0]}x{size[1]}/{method}/{int(antialias)}"] = out
            g[f"resize_aspect/{name}/{size[0]}x{size[1]}"] = tf.image.resize(
                image, size, preserve_aspect_ratio=True).numpy()
        for target in ((20, 15), (10, 30), (17, 23)):
            g[f"resize_with_crop_or_pad/{name}/{target[0]}x{target[1]}"] = (
                tf.image.resize_with_crop_or_pad(image, *target).numpy())
            g[f"resize_with_pad/{name}/{target[0]}x{target[1]}"] = (
                tf.image.resize_with_pad(image, *target).numpy())

    for name, image in (("rgb", rgb), ("gray", gray)):
        h, w = image.shape[:2]
        g[f"crop_to_bounding_box/{name}"] = tf.image.crop_to_bounding_box(
            image, 2, 3, h - 5, w - 7).numpy()
        g[f"pad_to_bounding_box/{name}"] = tf.image.pad_to_bounding_box(
            image, 2, 3, h + 5, w + 4).numpy()
        for fraction in (0.5, 0.33, 0.9, 1.0):
            g[f"central_crop/{name}/{fraction}"] = tf.image.central_crop(image, fraction).numpy()
        g[f"flip_left_right/{name}"] = tf.image.flip_left_right(image).numpy()
        g[f"flip_up_down/{name}"] = tf.image.flip_up_down(image).numpy()
        g[f"transpose/{name}"] = tf.image.transpose(image).numpy()
        for k in (0, 1, 2, 3, -1, 5):
            g[f"rot90/{name}/{k}"] = tf.image.rot90(image, k).numpy()
    batch = np.stack([rgb, rgb[::-1]])
    g["src/batch"] = batch
    g["rot90/batch/1"] = tf.image.rot90(batch, 1).numpy()
    g["central_crop/batch/0.5"] = tf.image.central_crop(batch, 0.5).numpy()
    np.savez_compressed(OUT, **g)
    print(f"wrote {OUT} ({OUT.stat().st_size} bytes, {len(g)} arrays)")


if __name__ == "__main__":
    main()
