"""Loaders of the data people already have: prepared TensorFlow Datasets directories
(:func:`load`, :func:`list_datasets`) and folders of images per class (:func:`image_folder`).

Example:
    >>> import feedline as fl
    >>> fl.datasets.list_datasets("/nonexistent")
    []
"""

from feedline.datasets.image_folder import image_folder
from feedline.datasets.tfds import ReadConfig, SkipDecoding, SplitNotFoundError, load
from feedline.datasets.tfds_features import FeatureError
from feedline.datasets.tfds_info import DatasetInfo, DatasetNotFoundError, SplitInfo, list_datasets
from feedline.datasets.tfds_splits import ReadInstruction

# The name; list_datasets is the same function without shadowing the builtin.
list = list_datasets  # noqa: A001

__all__ = [
    "DatasetInfo",
    "DatasetNotFoundError",
    "FeatureError",
    "ReadConfig",
    "ReadInstruction",
    "SkipDecoding",
    "SplitInfo",
    "SplitNotFoundError",
    "image_folder",
    "list",
    "list_datasets",
    "load",
]
