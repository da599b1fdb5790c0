"""Write the golden image folder of tests/data/image_folder/ and what Keras reads from it.

Run once in the TensorFlow environment of the benchmarks (Keras 3 with TensorFlow 2.21):
``benchmarks/.venvs/tf/bin/python tests/datasets/record_image_folder.py``. The images and
``expected.json`` are committed, so the tests need neither.

The folder has three classes (``bird``, ``cat``, ``dog``) with PNG, JPEG, GIF and BMP files,
upper-case extensions, a nested folder inside a class, a file that is not an image, a
hidden folder and an image at the top level (neither is a class). ``expected.json`` holds,
for each configuration of ``keras.utils.image_dataset_from_directory``: the dataset's
``file_paths`` (relative to the folder) and ``class_names``, and, for the unshuffled ones,
every batch (images and labels) it yields; or the error it raises. The file is
``expected.json`` in the folder (not an image, so no reader lists it).
"""

import io
import json
import os
import pathlib

import numpy as np
from PIL import Image

HERE = pathlib.Path(__file__).resolve().parents[1] / "data" / "image_folder"

# (relative path, height, width, PIL format)
FILES = [
    ("bird/b1.png", 5, 8, "PNG"),
    ("bird/b2.png", 9, 6, "PNG"),
    ("bird/flock/b3.jpg", 8, 8, "JPEG"),
    ("cat/c1.jpg", 7, 10, "JPEG"),
    ("cat/c2.PNG", 6, 6, "PNG"),
    ("cat/c3.png", 12, 5, "PNG"),
    ("dog/d1.gif", 6, 7, "GIF"),
    ("dog/d2.bmp", 5, 5, "BMP"),
    ("dog/d3.jpeg", 10, 12, "JPEG"),
    ("top.png", 4, 4, "PNG"),
    (".hidden/h.png", 4, 4, "PNG"),
]

CONFIGS = {
    "plain": dict(shuffle=False, batch_size=4, image_size=(6, 5)),
    "split": dict(shuffle=True, seed=13, validation_split=0.3, subset="both", batch_size=2,
                  image_size=(4, 4)),
    "training": dict(shuffle=True, seed=7, validation_split=0.25, subset="training",
                     image_size=(4, 4)),
    "gray_categorical_crop": dict(shuffle=False, batch_size=3, image_size=(4, 6),
                                  color_mode="grayscale", label_mode="categorical",
                                  class_names=["cat", "bird"], crop_to_aspect_ratio=True),
    "gray_with_a_gif": dict(shuffle=False, image_size=(4, 6), color_mode="grayscale"),
    "binary_nearest_classes": dict(shuffle=False, batch_size=None, image_size=(3, 3),
                                   class_names=["dog", "cat"], label_mode="binary",
                                   interpolation="nearest"),
    "no_labels_pad_bicubic": dict(shuffle=False, batch_size=5, image_size=(5, 5),
                                  labels=None, pad_to_aspect_ratio=True,
                                  interpolation="bicubic"),
    "listed_labels": dict(shuffle=False, batch_size=4, image_size=(2, 2),
                          labels=[3, 1, 4, 1, 5, 9, 2, 6, 5, 3, 5], label_mode="int"),
}


def write_images() -> None:
    rng = np.random.default_rng(28)
    for name, height, width, kind in FILES:
        path = HERE / name
        path.parent.mkdir(parents=True, exist_ok=True)
        pixels = rng.integers(0, 256, (height, width, 3), dtype=np.uint8)
        image = Image.fromarray(pixels)
        if kind == "GIF":
            image = image.convert("P", palette=Image.ADAPTIVE, colors=16)
        out = io.BytesIO()
        image.save(out, format=kind, **({"quality": 90} if kind == "JPEG" else {}))
        path.write_bytes(out.getvalue())
    (HERE / "cat" / "notes.txt").write_text("not an image\n")


def record(keras, name: str, config: dict) -> dict:
    try:
        return _record(keras, config)
    except Exception as error:  # what Keras refuses is recorded too
        return {"config": config, "error": f"{type(error).__name__}: {error}"}


def _record(keras, config: dict) -> dict:
    result = keras.utils.image_dataset_from_directory(str(HERE), verbose=False, **config)
    datasets = result if isinstance(result, list) else [result]
    out = []
    for ds in datasets:
        entry = {"file_paths": [os.path.relpath(p, HERE) for p in ds.file_paths],
                 "class_names": ds.class_names}
        if not config.get("shuffle", True):
            batches = []
            for element in ds:
                images, labels = element if isinstance(element, tuple) else (element, None)
                batches.append({"images": images.numpy().tolist(),
                                "dtype": images.dtype.name,
                                "labels": None if labels is None else labels.numpy().tolist(),
                                "label_dtype": None if labels is None else labels.dtype.name})
            entry["batches"] = batches
        out.append(entry)
    return {"config": config, "datasets": out}


def main() -> None:
    write_images()
    import keras

    expected = {name: record(keras, name, config) for name, config in CONFIGS.items()}
    expected["keras_version"] = keras.__version__
    (HERE / "expected.json").write_text(json.dumps(expected) + "\n")


if __name__ == "__main__":
    main()
