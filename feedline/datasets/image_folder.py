"""``image_folder``: a folder of images, one subfolder per class, as Keras's
``keras.utils.image_dataset_from_directory`` reads it.

The file list, the labels, the class indices (subfolder names sorted, or ``class_names`` in
its order), the seeded shuffle of the file list and the validation split are Keras's,
exactly: the same seed gives the same ``file_paths`` in each subset. Images are decoded with
:func:`feedline.image.decode_image` and resized with :func:`feedline.image.resize.resize`
(``tf.image.decode_image`` and ``tf.image.resize``'s results). The per-epoch shuffle of
elements is feedline's ``shuffle`` with Keras's buffer (8 batches) and seed: the same
distribution as tf.data's, not the same order.
"""

from __future__ import annotations

import os
import re
from collections.abc import Sequence
from typing import Any

import numpy as np

from feedline.core.constants import AUTOTUNE
from feedline.core.dataset import Dataset
from feedline.core.errors import DataLossError, FeedlineError, InvalidArgumentError

__all__ = ["ALLOWLIST_FORMATS", "image_folder", "index_directory"]

#: The file extensions read (lower-cased), as Keras.
ALLOWLIST_FORMATS = (".bmp", ".gif", ".jpeg", ".jpg", ".png")
_INTERPOLATIONS = ("bilinear", "nearest", "bicubic", "area", "lanczos3", "lanczos5",
                   "gaussian", "mitchellcubic")
_CHANNELS = {"rgb": 3, "rgba": 4, "grayscale": 1}


def _valid_files(directory: str, follow_links: bool) -> list[tuple[str, str]]:
    """``(folder, name)`` of every image below ``directory``, as Keras's walk gives them,
    except that each real folder is read once: with ``follow_links``, a link back to a
    folder above it (a loop) or a second link to one folder is not walked again."""
    walked: list[tuple[str, list[str]]] = []
    seen: set[tuple[int, int]] = set()
    stack = [directory]
    while stack:
        root = stack.pop()
        try:
            status = os.stat(root)  # through the links: the real folder
            with os.scandir(root) as scan:
                entries = sorted(scan, key=lambda e: e.name)
        except OSError:
            continue  # as os.walk: an unreadable folder is left out
        if (status.st_dev, status.st_ino) in seen:
            continue
        seen.add((status.st_dev, status.st_ino))
        files, folders = [], []
        for entry in entries:
            try:
                is_dir = entry.is_dir()
            except OSError:
                is_dir = False
            if not is_dir:
                files.append(entry.name)
            elif follow_links or not entry.is_symlink():
                folders.append(entry.path)
        walked.append((root, files))
        # Depth first in name order: the first path met to a folder is the one kept, and an
        # ancestor always comes before the links back to it.
        stack += reversed(folders)
    # Keras sorts the walk by folder path (a string sort), then the names in each folder.
    out = []
    for root, files in sorted(walked, key=lambda x: x[0]):
        out += [(root, name) for name in files if name.lower().endswith(ALLOWLIST_FORMATS)]
    return out


def index_directory(directory: str, labels: Any = "inferred",
                    class_names: Sequence[str] | None = None, shuffle: bool = True,
                    seed: int | None = None, follow_links: bool = False
                    ) -> tuple[list[str], np.ndarray | None, list[str] | None]:
    """``(file_paths, labels, class_names)`` as Keras's ``index_directory`` gives them.

    Classes are the subfolders (sorted, hidden ones left out) or ``class_names`` in its
    order; files are every image under a class folder, folder by folder in sorted order;
    ``shuffle`` permutes paths and labels with ``np.random.RandomState(seed)``.

    Example:
        >>> import os, tempfile
        >>> root = tempfile.mkdtemp()
        >>> for name in ["b/2.png", "a/1.jpg", "a/x/3.PNG", "a/notes.txt"]:
        ...     os.makedirs(os.path.dirname(os.path.join(root, name)), exist_ok=True)
        ...     open(os.path.join(root, name), "wb").close()
        >>> paths, labels, names = index_directory(root, shuffle=False)
        >>> [os.path.relpath(p, root) for p in paths], labels.tolist(), names
        (['a/1.jpg', 'a/x/3.PNG', 'b/2.png'], [0, 0, 1], ['a', 'b'])
    """
    if not os.path.isdir(directory):
        raise FileNotFoundError(f"image_folder: no such folder: {directory!r}")
    if labels == "inferred":
        subdirs = [d for d in sorted(os.listdir(directory))
                   if os.path.isdir(os.path.join(directory, d)) and not d.startswith(".")]
        if class_names is not None:
            if not set(class_names).issubset(set(subdirs)):
                raise ValueError(
                    "image_folder: the class_names passed did not match the names of the "
                    f"subdirectories of the target directory. Expected: {subdirs} (or a "
                    f"subset of it), but received: class_names={list(class_names)}")
            subdirs = list(class_names)
    else:
        subdirs = [""]
        if class_names is not None:
            raise ValueError("image_folder: class_names can only be given with "
                             "labels='inferred' (with labels=None there are no classes; "
                             "with a list of labels, the classes are its sorted values)")
    files: list[str] = []
    found: list[int] = []
    for index, subdir in enumerate(subdirs):
        folder = os.path.join(directory, subdir)
        for root, name in _valid_files(folder, follow_links):
            files.append(os.path.join(subdir, os.path.relpath(os.path.join(root, name),
                                                              folder)))
            found.append(index)
    names: list[str] | None
    result: np.ndarray | None
    if labels == "inferred":
        result = np.array(found, dtype=np.int32)
        names = list(subdirs)
    elif labels is None:
        result, names = None, None
    else:
        if len(labels) != len(files):
            raise ValueError(
                "image_folder: expected the lengths of labels to match the number of files "
                f"in the target directory. len(labels) is {len(labels)} while we found "
                f"{len(files)} files in directory {directory}.")
        result = np.asarray(labels)
        if result.dtype.kind in "iu":  # Python ints become int32 in tf.data, as in Keras
            result = result.astype(np.int32)
        names = [str(label) for label in sorted(set(labels))]
    paths = [os.path.join(directory, name) for name in files]
    if shuffle:
        if seed is None:
            seed = np.random.randint(1e6)
        np.random.RandomState(seed).shuffle(paths)
        if result is not None:
            np.random.RandomState(seed).shuffle(result)
    return paths, result, names


def _split(paths: list[str], labels: np.ndarray | None, validation_split: float | None,
           subset: str | None) -> tuple[list[str], np.ndarray | None]:
    """Keras's ``get_training_or_validation_split``: the last ``int(split * n)`` paths are
    the validation subset (with 0 of them, Keras's slicing leaves training empty too)."""
    if not validation_split:
        return paths, labels
    count = int(validation_split * len(paths))
    part = slice(None, -count) if subset == "training" else slice(-count, None)
    return paths[part], None if labels is None else labels[part]


class _LoadImage:
    """Read, decode and resize one image file as Keras's ``_load_image_tf`` (picklable, so
    worker processes can run it)."""

    def __init__(self, image_size: tuple[int, int], channels: int, interpolation: str,
                 data_format: str, crop_to_aspect_ratio: bool, pad_to_aspect_ratio: bool
                 ) -> None:
        self.image_size, self.channels, self.interpolation = image_size, channels, interpolation
        self.data_format = data_format
        self.crop, self.pad = crop_to_aspect_ratio, pad_to_aspect_ratio

    def __call__(self, path: Any) -> np.ndarray:
        from feedline.formats.files import open_file, path_name
        from feedline.image.codecs import decode_image
        from feedline.image.resize import resize, resize_with_pad

        name = path_name(path)
        if os.path.exists(name) and not os.path.isfile(name):
            # A FIFO or a device named *.png would block the read, or never end.
            raise InvalidArgumentError(f"image_folder: {name} is not a regular file",
                                       path=name)
        try:
            with open_file(name, "rb") as file:
                contents = file.read()
        except OSError as error:
            raise DataLossError(f"image_folder: cannot read {name} "
                                f"({error.strerror or error})", path=name) from None
        try:
            image = decode_image(contents, channels=self.channels, expand_animations=False)
        except MemoryError:
            raise
        except Exception as error:  # noqa: BLE001 - every decode error names the file
            raise _not_an_image(name, len(contents), error) from None
        height, width = self.image_size
        if self.crop:
            image = _center_crop(image, height, width)
            image = resize(image, (height, width), method=self.interpolation)
        elif self.pad:
            image = resize_with_pad(image, height, width, method=self.interpolation)
        else:
            image = resize(image, (height, width), method=self.interpolation)
        if self.data_format == "channels_first":
            image = np.transpose(image, (2, 0, 1))
        return image


# "got 123 bytes starting with b'...'" and any other bytes literal in a decoder's message.
_PREVIEW = re.compile(r"""(?:;?\s*got\s+)?\d+ bytes starting with b(['"])(?:\\.|(?!\1).)*\1"""
                      r"|(?:;\s*)?got \d+ bytes[^;)]*")
_BYTES = re.compile(r"""\bb(['"])(?:\\.|(?!\1).)*\1""")


def _not_an_image(name: str, size: int, error: Exception) -> FeedlineError:
    """The error for a file that does not decode: the file, its size and what was
    expected; never its contents (a file of secrets named ``*.png`` stays out of logs)."""
    reason = _BYTES.sub("<bytes>", _PREVIEW.sub("", str(error))).strip()
    message = (f"image_folder: {name} ({size} bytes) does not decode as a BMP, GIF, JPEG or "
               f"PNG image: {reason or type(error).__name__}")
    if isinstance(error, DataLossError):
        return DataLossError(message, path=name)
    return InvalidArgumentError(message, path=name)


def _center_crop(image: np.ndarray, target_height: int, target_width: int) -> np.ndarray:
    """Keras's ``smart_resize`` crop: the largest centred window of the target's aspect
    ratio (in float32, as its graph path computes it)."""
    height, width = image.shape[:2]
    f32 = np.float32
    crop_height = max(min(height, int(f32(width * target_height) / f32(target_width))), 1)
    crop_width = max(min(width, int(f32(height * target_width) / f32(target_height))), 1)
    top = int(f32(height - crop_height) / f32(2))
    left = int(f32(width - crop_width) / f32(2))
    return image[top:top + crop_height, left:left + crop_width]


def _labels(labels: np.ndarray, label_mode: str, num_classes: int) -> np.ndarray:
    if label_mode == "binary":
        return labels.astype(np.float32)[:, None]
    if label_mode == "categorical":
        return np.eye(num_classes, dtype=np.float32)[labels]
    return labels


def _build(paths: list[str], labels: np.ndarray | None, label_mode: str | None,
           num_classes: int, load: _LoadImage, shuffle: bool, buffer_size: int,
           seed: int | None, batch_size: int | None, class_names: list[str] | None
           ) -> Dataset:
    names = Dataset.from_tensor_slices(np.array(paths, dtype=object))
    if label_mode:
        assert labels is not None
        ds = Dataset.zip((names, Dataset.from_tensor_slices(
            _labels(labels, label_mode, num_classes))))
    else:
        ds = names
    if shuffle:
        ds = ds.shuffle(buffer_size, seed=seed)
    if label_mode:
        ds = ds.map(_LoadWithLabel(load), num_parallel_calls=AUTOTUNE)
    else:
        ds = ds.map(load, num_parallel_calls=AUTOTUNE)
    if batch_size is not None:
        ds = ds.batch(batch_size)
    ds = ds.prefetch(AUTOTUNE)
    ds.class_names = class_names  # type: ignore[attr-defined]
    ds.file_paths = paths  # type: ignore[attr-defined]
    return ds


class _LoadWithLabel:
    def __init__(self, load: _LoadImage) -> None:
        self.load = load

    def __call__(self, path: Any, label: Any) -> tuple[np.ndarray, Any]:
        return self.load(path), label


def image_folder(directory: str, labels: Any = "inferred", label_mode: str | None = "int",
                 class_names: Sequence[str] | None = None, color_mode: str = "rgb",
                 batch_size: int | None = 32, image_size: Any = (256, 256),
                 shuffle: bool = True, seed: int | None = None,
                 validation_split: float | None = None, subset: str | None = None,
                 interpolation: str = "bilinear", follow_links: bool = False,
                 crop_to_aspect_ratio: bool = False, pad_to_aspect_ratio: bool = False,
                 data_format: str = "channels_last", verbose: bool = True
                 ) -> Dataset | list[Dataset]:
    """A dataset of ``(images, labels)`` batches from a folder of class subfolders, as
    ``keras.utils.image_dataset_from_directory``.

    Args:
        directory: The folder: with ``labels="inferred"``, one subfolder per class (images
            anywhere below it); otherwise images anywhere below the folder.
        labels: ``"inferred"`` (from the subfolders), ``None`` (images only) or a list of
            integer labels, one per image file in the sorted walk of the folder.
        label_mode: ``"int"`` (``int32``), ``"categorical"`` (one-hot ``float32``),
            ``"binary"`` (``float32`` of shape ``(1,)``, for two classes) or ``None``.
        class_names: With inferred labels, the subfolders to read, in the order of their
            indices (default: every subfolder, sorted).
        color_mode: ``"rgb"``, ``"rgba"`` or ``"grayscale"`` (3, 4 or 1 channels).
        batch_size: Images per batch; ``None`` yields single images.
        image_size: ``(height, width)`` (or one int) every image is resized to.
        shuffle: Shuffle the file list (seeded) and the elements of each epoch.
        seed: The seed of both; required with ``validation_split`` and ``shuffle``.
            ``None`` draws one from NumPy's global generator, as Keras does.
        validation_split: The fraction of files kept for validation (the last ones of the
            shuffled list).
        subset: ``"training"``, ``"validation"`` or ``"both"`` (a list of the two datasets;
            the validation one is not shuffled).
        interpolation: ``tf.image.resize``'s method name.
        follow_links: Follow symbolic links to folders.
        crop_to_aspect_ratio: Crop the largest centred window of the target aspect ratio
            before resizing.
        pad_to_aspect_ratio: Pad (``resize_with_pad``) instead of distorting.
        data_format: ``"channels_last"`` or ``"channels_first"``.
        verbose: Print how many files were found, as Keras does.

    Returns:
        The dataset (with ``class_names`` and ``file_paths`` attributes, as Keras sets), or
        ``[training, validation]`` for ``subset="both"``. Images are ``float32`` (the input
        dtype with ``interpolation="nearest"``, as ``tf.image.resize``).

    Example:
        >>> import os, tempfile, numpy as np
        >>> import feedline.image as image
        >>> from feedline.datasets.image_folder import image_folder
        >>> root = tempfile.mkdtemp()
        >>> for name in ["cat/1.png", "cat/2.png", "dog/3.png"]:
        ...     os.makedirs(os.path.dirname(os.path.join(root, name)), exist_ok=True)
        ...     with open(os.path.join(root, name), "wb") as f:
        ...         _ = f.write(image.encode_png(np.zeros((4, 6, 3), np.uint8)))
        >>> ds = image_folder(root, image_size=(2, 3), batch_size=2, shuffle=False)
        Found 3 files belonging to 2 classes.
        >>> [(x.shape, y.tolist()) for x, y in ds], ds.class_names
        ([((2, 2, 3, 3), [0, 0]), ((1, 2, 3, 3), [1])], ['cat', 'dog'])
    """
    if labels not in ("inferred", None) and not isinstance(labels, (list, tuple)):
        raise ValueError(
            "image_folder: labels should be 'inferred', None or a list/tuple of integer "
            f"labels, one per image file in the folder. Received: labels={labels!r}")
    if labels not in ("inferred", None) and class_names:
        raise ValueError("image_folder: class_names can only be given with labels='inferred'"
                         f". Received: labels={labels!r}, class_names={class_names!r}")
    if label_mode not in ("int", "categorical", "binary", None):
        raise ValueError("image_folder: label_mode must be 'int', 'categorical', 'binary' or "
                         f"None. Received: label_mode={label_mode!r}")
    if labels is None or label_mode is None:
        labels, label_mode = None, None
    if color_mode not in _CHANNELS:
        raise ValueError("image_folder: color_mode must be 'rgb', 'rgba' or 'grayscale'. "
                         f"Received: color_mode={color_mode!r}")
    if isinstance(image_size, int):
        image_size = (image_size, image_size)
    elif not isinstance(image_size, (list, tuple)) or len(image_size) != 2:
        raise ValueError("image_folder: image_size must be a tuple of 2 integers. "
                         f"Received: image_size={image_size!r}")
    interpolation = interpolation.lower()
    if interpolation not in _INTERPOLATIONS:
        raise ValueError(f"image_folder: interpolation should be one of {_INTERPOLATIONS}. "
                         f"Received: interpolation={interpolation!r}")
    if data_format not in ("channels_last", "channels_first"):
        raise ValueError("image_folder: data_format must be 'channels_last' or "
                         f"'channels_first'. Received: {data_format!r}")
    if crop_to_aspect_ratio and pad_to_aspect_ratio:
        raise ValueError("image_folder: only one of pad_to_aspect_ratio and "
                         "crop_to_aspect_ratio can be True")
    if validation_split and not 0 < validation_split < 1:
        raise ValueError("image_folder: validation_split must be between 0 and 1. "
                         f"Received: {validation_split}")
    if (validation_split or subset) and not (validation_split and subset):
        raise ValueError("image_folder: if subset is set, validation_split must be set, and "
                         "inversely")
    if subset not in ("training", "validation", "both", None):
        raise ValueError("image_folder: subset must be 'training', 'validation' or 'both'. "
                         f"Received: {subset!r}")
    if validation_split and shuffle and seed is None:
        raise ValueError("image_folder: with validation_split and shuffle, pass a seed, so "
                         "that the training and validation subsets do not overlap")
    if seed is None:
        seed = np.random.randint(1e6)
    directory = os.fspath(directory)
    paths, found, names = index_directory(directory, labels, class_names, shuffle, seed,
                                          follow_links)
    if verbose:
        print(f"Found {len(paths)} files." if found is None else
              f"Found {len(paths)} files belonging to {len(names or ())} classes.")
    if label_mode == "binary" and len(names or ()) != 2:
        raise ValueError("image_folder: with label_mode='binary' there must be exactly 2 "
                         f"classes. Received: class_names={names}")
    load = _LoadImage((int(image_size[0]), int(image_size[1])), _CHANNELS[color_mode],
                      interpolation, data_format, crop_to_aspect_ratio, pad_to_aspect_ratio)
    buffer_size = batch_size * 8 if batch_size is not None else 1024
    num_classes = len(names) if names else 0
    subsets = ["training", "validation"] if subset == "both" else [subset]
    built = []
    for part in subsets:
        part_paths, part_labels = _split(paths, found, validation_split, part)
        if verbose and validation_split:
            count = len(part_paths)
            print(f"Using {count} files for {part}.")
        if not part_paths:
            kind = f"{part} images" if subset == "both" else "images"
            raise ValueError(f"image_folder: no {kind} found in directory {directory}. "
                             f"Allowed formats: {ALLOWLIST_FORMATS}")
        built.append(_build(part_paths, part_labels, label_mode, num_classes, load,
                            shuffle and part != "validation" if subset == "both" else shuffle,
                            buffer_size, seed, batch_size, names))
    return built if subset == "both" else built[0]
