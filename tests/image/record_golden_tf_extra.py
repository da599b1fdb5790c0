"""Record what TensorFlow 2.21 computes for the tf.image additions of issue 43.

Run with TensorFlow's interpreter (tests never need TensorFlow):

    /tmp/tfvenv/bin/python tests/image/record_golden_tf_extra.py

It writes ``tests/image/golden_tf_extra.npz``: the source images (``src/<name>``) and one key
per ``<op>/<source>/<parameters>``: YUV and YIQ conversions, ``crop_and_resize``,
``extract_patches``, ``total_variation`` and the ``stateless_random_*`` family; and
``tests/image/golden_tf_bounding_box.json``: 40 random cases of
``stateless_sample_distorted_bounding_box`` (the box's float32 values as their bits).
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import tensorflow as tf

OUT = Path(__file__).with_name("golden_tf_extra.npz")
BOXES = Path(__file__).with_name("golden_tf_bounding_box.json")
SEEDS = [(1, 2), (0, 0), (7, -3), (123456789, 42)]


def sources() -> dict[str, np.ndarray]:
    rng = np.random.default_rng(43)
    return {
        "rgbf": rng.random((6, 7, 3), dtype=np.float32),
        "batchf": rng.random((3, 5, 6, 3), dtype=np.float32),
        "rgb8": rng.integers(0, 256, (6, 7, 3), dtype=np.uint8),
        "batch8": rng.integers(0, 256, (4, 5, 6, 3), dtype=np.uint8),
        "gray8": rng.integers(0, 256, (8, 9, 1), dtype=np.uint8),
        "rgbd": rng.random((5, 4, 3)),
    }


def main() -> None:
    src = sources()
    out: dict[str, np.ndarray] = {f"src/{k}": v for k, v in src.items()}
    for name in ("rgbf", "batchf", "rgbd"):
        image = src[name]
        for op in ("rgb_to_yuv", "yuv_to_rgb", "rgb_to_yiq", "yiq_to_rgb"):
            out[f"{op}/{name}"] = getattr(tf.image, op)(image).numpy()
    for name in ("rgbf", "batchf", "rgb8", "batch8", "gray8", "rgbd"):
        # TensorFlow has no Abs for unsigned integers: uint8 images are refused, so their
        # int32 forms are recorded.
        image = src[name].astype(np.int32) if src[name].dtype == np.uint8 else src[name]
        out[f"total_variation/{name}"] = tf.image.total_variation(tf.constant(image)).numpy()

    boxes = np.array([[0.0, 0.0, 1.0, 1.0], [0.1, 0.2, 0.7, 0.9], [0.5, 0.5, 0.5, 0.5],
                      [-0.2, -0.1, 1.3, 1.2], [0.9, 0.8, 0.1, 0.3], [0.3, 0.0, 0.31, 1.0]],
                     np.float32)
    box_indices = np.array([0, 1, 2, 3, 0, 1], np.int32)
    out["crop_and_resize/boxes"] = boxes
    out["crop_and_resize/box_indices"] = box_indices
    for name in ("batchf", "batch8"):
        for method in ("bilinear", "nearest"):
            for size in ((3, 4), (1, 1), (5, 2)):
                images = src[name]
                indices = box_indices % images.shape[0]
                key = f"crop_and_resize/{name}/{method}/{size[0]}x{size[1]}"
                out[key] = tf.image.crop_and_resize(images, boxes, indices, size, method=method,
                                                    extrapolation_value=-1.0).numpy()

    for name in ("batchf", "batch8"):
        for sizes, strides, rates, padding in (
                ((1, 2, 2, 1), (1, 1, 1, 1), (1, 1, 1, 1), "VALID"),
                ((1, 3, 2, 1), (1, 2, 3, 1), (1, 1, 1, 1), "SAME"),
                ((1, 2, 2, 1), (1, 1, 2, 1), (1, 2, 2, 1), "VALID"),
                ((1, 2, 3, 1), (1, 3, 1, 1), (1, 2, 1, 1), "SAME")):
            key = (f"extract_patches/{name}/{'x'.join(map(str, sizes))}/"
                   f"{'x'.join(map(str, strides))}/{'x'.join(map(str, rates))}/{padding}")
            out[key] = tf.image.extract_patches(src[name], sizes, strides, rates,
                                                padding).numpy()

    for seed in SEEDS:
        s = f"{seed[0]}_{seed[1]}"
        for name in ("rgb8", "batch8", "rgbf"):
            image = src[name]
            out[f"stateless_random_flip_left_right/{name}/{s}"] = \
                tf.image.stateless_random_flip_left_right(image, seed).numpy()
            out[f"stateless_random_flip_up_down/{name}/{s}"] = \
                tf.image.stateless_random_flip_up_down(image, seed).numpy()
            out[f"stateless_random_brightness/{name}/{s}"] = \
                tf.image.stateless_random_brightness(image, 0.3, seed).numpy()
            out[f"stateless_random_contrast/{name}/{s}"] = \
                tf.image.stateless_random_contrast(image, 0.2, 1.8, seed).numpy()
            out[f"stateless_random_saturation/{name}/{s}"] = \
                tf.image.stateless_random_saturation(image, 0.2, 1.8, seed).numpy()
            out[f"stateless_random_hue/{name}/{s}"] = \
                tf.image.stateless_random_hue(image, 0.4, seed).numpy()
            size = (3, 4, 3) if image.ndim == 3 else (2, 3, 4, 3)
            out[f"stateless_random_crop/{name}/{s}"] = \
                tf.image.stateless_random_crop(image, size, seed).numpy()
        for name in ("rgb8", "rgbf", "gray8"):
            out[f"stateless_random_jpeg_quality/{name}/{s}"] = \
                tf.image.stateless_random_jpeg_quality(src[name], 10, 95, seed).numpy()
        flips = tf.image.stateless_random_flip_left_right(np.zeros((16, 1, 2, 1)) +
                                                          np.arange(2).reshape(1, 1, 2, 1), seed)
        out[f"stateless_random_flip_left_right/coins16/{s}"] = flips.numpy()
    np.savez_compressed(OUT, **out)
    print(f"wrote {len(out)} arrays to {OUT}")
    record_boxes()


def record_boxes() -> None:
    cases = []
    rng = np.random.default_rng(5)
    for _ in range(40):
        height, width = int(rng.integers(1, 300)), int(rng.integers(1, 300))
        count = int(rng.integers(0, 4))
        a, b = rng.random((1, count, 2)), rng.random((1, count, 2))
        boxes = np.concatenate([np.minimum(a, b), np.maximum(a, b)], -1).astype(np.float32)
        seed = [int(rng.integers(-2**40, 2**40)), int(rng.integers(-2**40, 2**40))]
        kwargs = {
            "min_object_covered": float(rng.choice([0.0, 0.1, 0.5, 0.9])),
            "aspect_ratio_range": [float(rng.choice([0.5, 0.75])),
                                   float(rng.choice([1.0, 1.33, 2.0]))],
            "area_range": [float(rng.choice([0.05, 0.3])), float(rng.choice([0.6, 1.0]))],
            "max_attempts": int(rng.choice([1, 10, 100])),
            "use_image_if_no_bounding_boxes": True}
        begin, size, box = tf.image.stateless_sample_distorted_bounding_box(
            [height, width, 3], boxes, seed=seed, **kwargs)
        cases.append({"image_size": [height, width, 3], "boxes": boxes.tolist(), "seed": seed,
                      "kwargs": kwargs, "begin": begin.numpy().tolist(),
                      "size": size.numpy().tolist(),
                      "box_bits": box.numpy().view(np.uint32).tolist()})
    BOXES.write_text(json.dumps(cases, indent=0) + "\n")
    print(f"wrote {len(cases)} cases to {BOXES}")


if __name__ == "__main__":
    main()
