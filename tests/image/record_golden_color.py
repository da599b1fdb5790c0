"""Record tf.image's colour and dtype outputs as golden values for feedline.image's tests.

Run with TensorFlow's interpreter (tests never need TensorFlow):

    benchmarks/.venvs/tf/bin/python tests/image/record_golden_color.py

It writes ``tests/image/golden_color.npz``: small deterministic source images (``src/<name>``)
and what TensorFlow 2.21 computes from them, one key per ``<op>/<source>/<parameters>``. A
conversion TensorFlow refuses is recorded as its error class name (``error/<key>``).
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import tensorflow as tf

OUT = Path(__file__).with_name("golden_color.npz")

DTYPES = ["uint8", "uint16", "uint32", "int8", "int16", "int32", "int64",
          "float16", "float32", "float64"]


def sources() -> dict[str, np.ndarray]:
    """Images with every hue sector, grays, ties between channels, black and white pixels."""
    rng = np.random.default_rng(27)
    rgb8 = rng.integers(0, 256, (7, 9, 3), dtype=np.uint8)
    # Row 0: the corner cases of the HSV kernels (equal channels, two equal, pure colours).
    rgb8[0, :] = [[0, 0, 0], [255, 255, 255], [128, 128, 128], [255, 0, 0], [0, 255, 0],
                  [0, 0, 255], [200, 200, 10], [10, 200, 200], [200, 10, 200]]
    rgb8[1, :3] = [[90, 90, 200], [200, 90, 90], [90, 200, 90]]
    gray8 = rng.integers(0, 256, (7, 9, 1), dtype=np.uint8)
    batch8 = rng.integers(0, 256, (3, 7, 9, 3), dtype=np.uint8)
    batch8[2] = 77  # a uniform image: per_image_standardization's adjusted stddev
    rgb16 = rng.integers(0, 65536, (7, 9, 3), dtype=np.uint16)
    rgb16[0, :3] = [[0, 0, 0], [65535, 65535, 65535], [65535, 0, 1]]
    rgbf = rng.random((7, 9, 3), dtype=np.float32)
    rgbf[0, :4] = [[0, 0, 0], [1, 1, 1], [0.5, 0.5, 0.25], [0.25, 0.5, 0.5]]
    grayf = rng.random((7, 9, 1), dtype=np.float32)
    # Out of [0, 1]: float ops must not clip, float -> int conversions saturate or wrap.
    widef = (rng.random((7, 9, 3), dtype=np.float32) * 1.6 - 0.3).astype(np.float32)
    rgbh = rgbf.astype(np.float16)
    rgbd = rng.random((7, 9, 3))
    int32 = rng.integers(0, 2**31 - 1, (7, 9, 3), dtype=np.int64).astype(np.int32)
    hsv = rng.random((7, 9, 3), dtype=np.float32)
    hsv[0, :5, 0] = [0.0, 1.0, 1 / 6, 0.5, 5 / 6]  # sector boundaries, h == 1
    return {"rgb8": rgb8, "gray8": gray8, "batch8": batch8, "rgb16": rgb16, "rgbf": rgbf,
            "grayf": grayf, "widef": widef, "rgbh": rgbh, "rgbd": rgbd, "int32": int32,
            "hsv": hsv}


def conversion_sources() -> dict[str, np.ndarray]:
    """One row per dtype: its extremes, zero, small and middle values."""
    out = {}
    for name in DTYPES:
        dtype = np.dtype(name)
        if dtype.kind == "f":
            values = [0.0, 1.0, 0.5, 1e-3, 0.999, 0.25, 1 / 255, 254.5 / 255.5, 0.75, 1 / 3]
            wide = [-0.5, -1e-3, 1.0001, 1.5, 2.0, -2.0, 100.0, -100.0]
            out[f"conv/{name}"] = np.array(values, dtype).reshape(1, -1, 1)
            out[f"convwide/{name}"] = np.array(wide, dtype).reshape(1, -1, 1)
        else:
            info = np.iinfo(dtype)
            values = sorted({0, 1, 2, 3, 127, 128, 255, 256, 1000, 32767, 65535,
                             info.max, info.max - 1, info.max // 2, info.min, info.min + 1,
                             -1, -2, -129})
            values = [v for v in values if info.min <= v <= info.max]
            out[f"conv/{name}"] = np.array(values, dtype).reshape(1, -1, 1)
    return out


def main() -> None:
    g: dict[str, np.ndarray] = {}

    def record(key: str, op, *args, **kwargs) -> None:
        try:
            g[key] = op(*args, **kwargs).numpy()
        except Exception as error:  # noqa: BLE001 - recorded, the test checks it
            g[f"error/{key}"] = np.array(type(error).__name__)

    src = sources()
    for name, image in src.items():
        g[f"src/{name}"] = image
    for key, image in conversion_sources().items():
        g[f"src/{key}"] = image
        for target in DTYPES:
            for saturate in (False, True):
                out_key = f"convert_image_dtype/{key}/{target}/{int(saturate)}"
                record(out_key, tf.image.convert_image_dtype, image, tf.as_dtype(target),
                       saturate=saturate)

    colour = ["rgb8", "batch8", "rgb16", "rgbf", "widef", "rgbh", "rgbd", "int32"]
    for name in colour + ["gray8", "grayf"]:
        for delta in (-0.5, -0.1, 0.0, 0.13, 0.6):
            record(f"adjust_brightness/{name}/{delta}",
                   tf.image.adjust_brightness, src[name], delta)
        for factor in (0.0, 0.5, 1.0, 1.7, 3.0, -0.5):
            record(f"adjust_contrast/{name}/{factor}", tf.image.adjust_contrast, src[name], factor)
        for gamma, gain in ((0.5, 1.0), (1.0, 1.0), (2.2, 1.0), (1.0, 0.8), (0.7, 1.3),
                            (0.0, 1.0)):
            if name == "widef":  # negative bases under a fractional power: NaN
                continue
            record(f"adjust_gamma/{name}/{gamma}/{gain}",
                   tf.image.adjust_gamma, src[name], gamma, gain)
    for name in colour:
        for factor in (0.0, 0.3, 1.0, 1.9, 5.0):
            record(f"adjust_saturation/{name}/{factor}",
                   tf.image.adjust_saturation, src[name], factor)
        for delta in (-1.0, -0.5, -0.3, 0.0, 0.1, 0.25, 0.5, 1.0):
            record(f"adjust_hue/{name}/{delta}", tf.image.adjust_hue, src[name], delta)
        record(f"rgb_to_grayscale/{name}", tf.image.rgb_to_grayscale, src[name])
        record(f"per_image_standardization/{name}", tf.image.per_image_standardization, src[name])
    for name in ("gray8", "grayf"):
        record(f"grayscale_to_rgb/{name}", tf.image.grayscale_to_rgb, tf.constant(src[name]))
        record(f"per_image_standardization/{name}", tf.image.per_image_standardization, src[name])
    for name in ("rgbf", "widef", "rgbh", "rgbd"):
        record(f"rgb_to_hsv/{name}", tf.image.rgb_to_hsv, tf.constant(src[name]))
    for name in ("hsv", "rgbf", "rgbh", "rgbd"):
        record(f"hsv_to_rgb/{name}", tf.image.hsv_to_rgb, tf.constant(src[name]))

    np.savez_compressed(OUT, **g)
    print(f"{OUT}: {len(g)} arrays, {OUT.stat().st_size} bytes")


if __name__ == "__main__":
    main()
