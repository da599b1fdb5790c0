"""The golden TFDS directories (tests/data/tfds, written by record_tfds.py) and a comparison
of feedline's elements with what TFDS recorded."""

from __future__ import annotations

import lzma
import pickle
from pathlib import Path
from typing import Any

import numpy as np

from feedline.formats.example import RaggedValues

ROOT = Path(__file__).resolve().parents[1] / "data" / "tfds"


def expected() -> dict[str, Any]:
    with lzma.open(ROOT / "expected.pkl.xz") as f:
        return pickle.load(f)


def assert_same(actual: Any, wanted: Any, path: str = "", exact_types: bool = True) -> None:
    """``actual`` equals TFDS's ``wanted``: same structure, types, dtypes, shapes and values
    (a recorded ``{"__ragged__": lists}`` is a tf.RaggedTensor: a RaggedValues here)."""
    if isinstance(wanted, dict) and "__ragged__" in wanted:
        assert isinstance(actual, RaggedValues), f"{path}: {type(actual)} is not ragged"
        assert actual.to_list() == wanted["__ragged__"], path
        return
    if isinstance(wanted, dict):
        assert isinstance(actual, dict) and list(actual) == list(wanted), \
            f"{path}: keys {list(actual)} != {list(wanted)}"
        for key in wanted:
            assert_same(actual[key], wanted[key], f"{path}/{key}", exact_types)
        return
    if isinstance(wanted, (tuple, list)):
        assert type(actual) is type(wanted) and len(actual) == len(wanted), \
            f"{path}: {type(actual).__name__}[{len(actual)}] != " \
            f"{type(wanted).__name__}[{len(wanted)}]"
        for i, (a, w) in enumerate(zip(actual, wanted)):
            assert_same(a, w, f"{path}[{i}]", exact_types)
        return
    if exact_types:
        assert type(actual) is type(wanted), f"{path}: {type(actual)} != {type(wanted)}"
    if isinstance(wanted, np.ndarray):
        assert (actual.dtype, actual.shape) == (wanted.dtype, wanted.shape), \
            f"{path}: {actual.dtype}{actual.shape} != {wanted.dtype}{wanted.shape}"
        assert np.array_equal(actual, wanted), f"{path}: values differ"
    else:
        assert actual == wanted, f"{path}: {actual!r} != {wanted!r}"
