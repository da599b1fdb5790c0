"""``padded_batch``: batch elements of varying shapes, padding each leaf to a common shape."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from feedline.core.dataset import Dataset
from feedline.core.errors import DataLossError, StructureError
from feedline.core.functions import annotate_error
from feedline.core.iterator import DatasetIterator, IteratorContext, State
from feedline.core.registry import operation
from feedline.core.structure import (
    DatasetSpec,
    Element,
    NoneTensorSpec,
    TensorSpec,
    describe,
    flatten,
    flatten_with_paths,
    is_datasets_array,
    pack_as,
    same_structure,
)
from feedline.core.traits import INDEPENDENT
from feedline.core.unary import UnaryDataset, UnaryIterator
from feedline.core.validation import as_int
from feedline.transforms.batch import batched_cardinality, pull_batch, validate_batch_size

Shape = tuple[int | None, ...] | None
"""A padded shape: ``None`` dims (or -1) pad to the longest in the batch; ``None`` as a whole
means 'any rank, every dimension to the longest'."""


def flatten_up_to(structure: Element, value: Any, what: str, path: str = "",
                  none_fills: bool = False) -> list[Any]:
    """The parts of ``value`` at the leaf positions of ``structure`` (``tf.nest.flatten_up_to``).

    A leaf position takes whatever ``value`` holds there, whole (a shape list, say). With
    ``none_fills``, ``None`` where ``structure`` has a tuple or dict stands for ``None`` at
    each of its leaves (padding values: tf.data's default for that whole part).

    Example:
        >>> flatten_up_to((0, {"a": 0}), ([3], {"a": None}), "padded_shapes")
        [[3], None]
        >>> flatten_up_to((0, {"a": 0, "b": 0}), (-1, None), "padding_values", none_fills=True)
        [-1, None, None]
    """
    if none_fills and value is None:
        return [None] * len(flatten_with_paths(structure))
    where = path or "the top"
    if isinstance(structure, tuple):
        if not isinstance(value, tuple | list) or len(value) != len(structure):
            raise ValueError(f"{what} must have the elements' structure {describe(structure)}: "
                             f"at {where} expected {len(structure)} items, got {value!r}")
        out: list[Any] = []
        for i, (part, item) in enumerate(zip(structure, value)):
            out.extend(flatten_up_to(part, item, what, f"{path}[{i}]", none_fills))
        return out
    if isinstance(structure, dict):
        if not isinstance(value, dict) or set(value) != set(structure):
            found = sorted(value, key=repr) if isinstance(value, dict) else value
            raise ValueError(f"{what} must have the elements' structure {describe(structure)}: "
                             f"at {where} expected keys {sorted(structure, key=repr)!r}, "
                             f"got {found!r}")
        out = []
        for key in sorted(structure):
            out.extend(flatten_up_to(structure[key], value[key], what, f"{path}[{key!r}]",
                                     none_fills))
        return out
    return [value]


def as_padded_shape(value: Any, path: str) -> Shape:
    """A user's padded shape for one leaf as a tuple of dims (``None`` for 'longest').

    Example:
        >>> as_padded_shape([None, 4, -1], "[0]"), as_padded_shape(5, "[0]")
        ((None, 4, None), (5,))
    """
    if value is None:
        return None
    if isinstance(value, np.ndarray) and value.ndim == 1:
        value = value.tolist()
    elif not isinstance(value, list | tuple):
        # One int (NumPy integers and 0-d arrays included) is the shape of a vector leaf.
        try:
            value = [as_int(value, "")]
        except TypeError:
            raise TypeError(f"padded_batch: padded shape of leaf {path} must be a list of dims "
                            f"(ints, -1 or None), got {value!r}") from None
    dims: list[int | None] = []
    for dim in value:
        try:
            size = None if dim is None else as_int(dim, "")
        except TypeError:
            size = -2  # reported below with the other invalid dimensions
        if size is None or size == -1:
            dims.append(None)
        elif size >= 0:
            dims.append(size)
        else:
            raise ValueError(f"padded_batch: padded shape of leaf {path} has an invalid "
                             f"dimension {dim!r} (expected an int >= 0, -1 or None)")
    return tuple(dims)


def _plain(value: Any, encode_str: bool = False) -> Any:
    """``value`` with NumPy scalars and arrays as Python values, containers kept.

    With ``encode_str``, ``str`` becomes UTF-8 ``bytes`` (tf.data's tf.string).

    Example:
        >>> _plain(([np.int64(3), None], {"k": np.array([1, 2])}))
        ([3, None], {'k': [1, 2]})
        >>> _plain(("pad", b"x"), encode_str=True)
        (b'pad', b'x')
    """
    if isinstance(value, dict):
        return {key: _plain(item, encode_str) for key, item in value.items()}
    if isinstance(value, tuple):
        items = [_plain(item, encode_str) for item in value]
        return type(value)(*items) if hasattr(type(value), "_fields") else tuple(items)
    if isinstance(value, list):
        return [_plain(item, encode_str) for item in value]
    if isinstance(value, np.ndarray | np.generic):
        return _plain(value.tolist(), encode_str)
    if encode_str and isinstance(value, str):
        return value.encode("utf-8")
    return value


def _is_text_kind(dtype: np.dtype) -> bool:
    return np.dtype(dtype) == object


def check_padding_value(value: Any, dtype: np.dtype, path: str) -> Any:
    """A padding value fit for a leaf of ``dtype`` (object: bytes/str leaves), or an error.

    Scalars only; numbers must convert to ``dtype`` without changing value.

    Example:
        >>> check_padding_value(-1, np.dtype(np.int32), "[0]")
        np.int32(-1)
    """
    if isinstance(value, np.ndarray) and value.ndim == 0:
        value = value[()]
    if _is_text_kind(dtype):
        if not isinstance(value, bytes | str):
            raise TypeError(f"padded_batch: padding value {value!r} for leaf {path} must be "
                            "bytes or str, as the leaf holds bytes/str")
        # A str pads as its UTF-8 bytes, so a batch never mixes str and bytes (tf.string).
        return value.encode("utf-8") if isinstance(value, str) else value
    if isinstance(value, bytes | str) or np.ndim(value) != 0:
        kind = "a scalar" if np.ndim(value) == 0 else f"shape {np.shape(value)}"
        raise (TypeError if np.ndim(value) == 0 else ValueError)(
            f"padding_values must be scalars matching their leaf: leaf {path} ({dtype}) got "
            f"{value!r} ({kind})")
    if not isinstance(value, bool | int | float | complex | np.generic):
        raise TypeError(f"padding_values: leaf {path} ({dtype}) got a "
                        f"{type(value).__name__}, expected a number")
    converted = np.asarray(value).astype(dtype)
    with np.errstate(invalid="ignore"):
        same = np.array_equal(converted, np.asarray(value), equal_nan=converted.dtype.kind in "fc")
    if not same:
        raise TypeError(f"padding_values: {value!r} for leaf {path} does not fit its dtype "
                        f"{dtype} (it would become {converted!r})")
    return dtype.type(converted)


def _leaf_array(value: Any) -> np.ndarray:
    if isinstance(value, bytes | str):
        out = np.empty((), dtype=object)
        out[()] = value
        return out
    return np.asarray(value)


@dataclass(frozen=True)
class _LeafPlan:
    path: str
    shape: Shape
    padding: Any  # None: the leaf's default (0, False, b"" or "")


def make_plan(template: Element, padded_shapes: Element, padding_values: Element,
              dtypes: list[np.dtype]) -> list[_LeafPlan]:
    """Per leaf of ``template`` (a spec or an element): its padded shape and padding value."""
    paths = [path for path, _ in flatten_with_paths(template)]
    if padded_shapes is None:
        shapes: list[Shape] = [None] * len(paths)
    else:
        raw = flatten_up_to(template, padded_shapes, "padded_shapes")
        shapes = [as_padded_shape(value, path) for value, path in zip(raw, paths)]
    if padding_values is None:
        paddings: list[Any] = [None] * len(paths)
    elif isinstance(template, tuple | dict) and not isinstance(padding_values, tuple | dict | list):
        paddings = [padding_values] * len(paths)  # one value for every leaf, as tf.data
    else:
        # None anywhere (a leaf or a whole part) is that part's default padding, as tf.data.
        paddings = flatten_up_to(template, padding_values, "padding_values", none_fills=True)
    checked = [None if value is None else check_padding_value(value, dtype, path)
               for value, dtype, path in zip(paddings, dtypes, paths)]
    return [_LeafPlan(path, shape, padding)
            for path, shape, padding in zip(paths, shapes, checked)]


_DATASETS_REFUSED = "`padded_batch` is not supported for datasets of datasets"


def _none_refused(path: str) -> str:
    return ("`padded_batch` is only supported for datasets that produce tensor elements but "
            f"type spec of elements in the input dataset is not a subclass of TensorSpec: "
            f"`NoneTensorSpec()` (leaf {path})")


def check_tensor_leaves(spec: Element) -> None:
    """Refuse, as tf.data does with a ``TypeError``, a spec with ``None`` or dataset leaves:
    there is nothing to pad in them.

    Example:
        >>> check_tensor_leaves((TensorSpec((2,), np.dtype("int64")), NoneTensorSpec()))
        Traceback (most recent call last):
        ...
        TypeError: `padded_batch` is only supported for datasets that produce tensor elements but type spec of elements in the input dataset is not a subclass of TensorSpec: `NoneTensorSpec()` (leaf [1])
    """
    for path, leaf in flatten_with_paths(spec):
        if isinstance(leaf, DatasetSpec):
            raise TypeError(f"{_DATASETS_REFUSED} (leaf {path} is {leaf})")
        if isinstance(leaf, NoneTensorSpec):
            raise TypeError(_none_refused(path))


def check_plan_against_spec(plan: list[_LeafPlan], spec: Element) -> None:
    """Static checks (as tf.data does at construction): ranks agree, no known dim too big."""
    for leaf, leaf_spec in zip(plan, flatten(spec)):
        if leaf.shape is None:
            continue
        known = leaf_spec.shape
        if len(leaf.shape) != len(known) or any(
                p is not None and k is not None and p < k for p, k in zip(leaf.shape, known)):
            raise ValueError(f"padded_batch: the padded shape {leaf.shape} of leaf {leaf.path} "
                             f"is not compatible with the input's shape {known}")


def pad_leaf(values: list[Any], leaf: _LeafPlan, first_index: int) -> np.ndarray:
    """Stack one leaf of a batch, padding each value up to the batch's padded shape.

    Raises:
        DataLossError: A value is larger than the padded shape (tf.data's "Attempted to pad
            to a smaller size than the input element").
        TypeError: The leaf holds ``None`` or datasets, which cannot be padded.

    Example:
        >>> plan = _LeafPlan("[0]", None, None)
        >>> pad_leaf([np.array([1]), np.array([2, 3])], plan, 0).tolist()
        [[1, 0], [2, 3]]
    """
    for i, value in enumerate(values):
        if value is None:
            raise TypeError(f"{_none_refused(leaf.path)}: input element {first_index + i} "
                            "has None there")
        if isinstance(value, Dataset) or is_datasets_array(value):
            raise TypeError(f"{_DATASETS_REFUSED}: leaf {leaf.path} of input element "
                            f"{first_index + i} holds datasets")
    arrays = [_leaf_array(value) for value in values]
    rank = arrays[0].ndim if leaf.shape is None else len(leaf.shape)
    for i, array in enumerate(arrays):
        if array.ndim != rank:
            expected = "the padded shape's" if leaf.shape is not None else "element 0's"
            raise StructureError(
                f"padded_batch: leaf {leaf.path} of input element {first_index + i} has rank "
                f"{array.ndim} (shape {array.shape}), but {expected} rank is {rank}")
    target: list[int] = []
    for d in range(rank):
        longest = max(array.shape[d] for array in arrays)
        given = None if leaf.shape is None else leaf.shape[d]
        if given is None:
            target.append(longest)
            continue
        if longest > given:
            # tf.data's category: the element does not fit what the pipeline promised.
            i = next(i for i, array in enumerate(arrays) if array.shape[d] > given)
            raise DataLossError(
                f"padded_batch: Attempted to pad to a smaller size than the input element: "
                f"leaf {leaf.path} of input element {first_index + i} has shape "
                f"{arrays[i].shape}, larger than the padded shape {leaf.shape} in dimension {d} "
                f"({arrays[i].shape[d]} > {given})")
        target.append(given)
    if any(array.dtype == object for array in arrays):
        dtype = np.dtype(object)
        padding = leaf.padding
        if padding is None:
            sample = next((x for a in arrays for x in a.ravel()[:1]), b"")
            padding = "" if isinstance(sample, str) else b""
    else:
        dtype = np.result_type(*arrays)
        padding = 0 if leaf.padding is None else leaf.padding
        if isinstance(padding, bytes | str):
            raise TypeError(f"padded_batch: padding value {padding!r} for leaf {leaf.path} "
                            f"does not fit its dtype {dtype}")
    out = np.full((len(arrays), *target), padding, dtype=dtype)
    for i, array in enumerate(arrays):
        # array[()] unwraps a 0-d object array, which would otherwise be stored as an object
        out[(i, *(slice(0, n) for n in array.shape))] = array if array.ndim else array[()]
    return out


@operation("padded_batch")
class PaddedBatchDataset(UnaryDataset):
    """The node of ``Dataset.padded_batch``.

    Args:
        input_dataset: The elements to batch.
        batch_size: Elements per batch.
        padded_shapes: ``None`` pads every dimension of every leaf to the longest in the
            batch; otherwise a structure matching the elements with, per leaf, a shape whose
            ``None``/-1 dims pad to the longest and whose ints are exact sizes (an element
            larger than that is an error).
        padding_values: ``None`` (0, ``False``, ``b""`` or ``""`` per leaf), one scalar for every
            leaf, or a structure matching the elements (``None`` entries, for a leaf or a
            whole tuple or dict, use the default, as tf.data).
        drop_remainder: Drop a last batch smaller than ``batch_size``.
        name: Shown in errors.

    Example:
        >>> import feedline as fl
        >>> ds = fl.Dataset.from_tensor_slices([1, 3, 2]).map(lambda n: (np.arange(n), b"x" * n))
        >>> [(a.tolist(), b.tolist()) for a, b in PaddedBatchDataset(ds, 3, ([4], []), (-1, b"?"))]
        [([[0, -1, -1, -1], [0, 1, 2, -1], [0, 1, -1, -1]], [b'x', b'xxx', b'xx'])]
    """

    TRAITS = INDEPENDENT

    def __init__(self, input_dataset: Dataset, batch_size: int, padded_shapes: Element = None,
                 padding_values: Element = None, drop_remainder: bool = False,
                 name: str | None = None) -> None:
        super().__init__(input_dataset)
        self.batch_size = validate_batch_size(batch_size, "padded_batch(batch_size)")
        # Plain Python values (NumPy scalars and arrays unwrapped, str as UTF-8 bytes): the node
        # is fingerprinted and pickled, and the padding of a bytes leaf must be bytes.
        self.padded_shapes = _plain(padded_shapes)
        self.padding_values = _plain(padding_values, encode_str=True)
        self.drop_remainder = bool(drop_remainder)
        self.name = name or "padded_batch"
        spec = input_dataset._element_spec()
        if spec is not None:
            # Mistakes in the arguments show up here, not at the first batch, when possible.
            check_tensor_leaves(spec)
            plan = make_plan(spec, padded_shapes, padding_values,
                             [np.dtype(leaf.dtype) for leaf in flatten(spec)])
            check_plan_against_spec(plan, spec)

    def _element_spec(self) -> Element | None:
        spec = self._inputs[0]._element_spec()
        if spec is None:
            return None
        check_tensor_leaves(spec)
        plan = make_plan(spec, self.padded_shapes, None, [leaf.dtype for leaf in flatten(spec)])
        batch = self.batch_size if self.drop_remainder else None
        leaves = []
        for leaf, leaf_spec in zip(plan, flatten(spec)):
            dims = leaf_spec.shape if leaf.shape is None else leaf.shape
            if self.padded_shapes is not None and leaf.shape is None:
                dims = (None,) * len(leaf_spec.shape)
            leaves.append(TensorSpec((batch, *dims), leaf_spec.dtype))
        return pack_as(spec, leaves)

    def cardinality(self) -> int:
        return batched_cardinality(self._inputs[0].cardinality(), self.batch_size,
                                   self.drop_remainder)

    def _make_iterator(self, ctx: IteratorContext) -> DatasetIterator:
        return PaddedBatchIterator(ctx, self._make_input_iterator(ctx), self)


class PaddedBatchIterator(UnaryIterator):
    def __init__(self, ctx: IteratorContext, upstream: DatasetIterator,
                 node: PaddedBatchDataset) -> None:
        super().__init__(ctx, upstream)
        self._node = node
        self._plan: list[_LeafPlan] | None = None
        self._template: Element = None
        self._batches = 0
        self._elements = 0

    def _plan_for(self, first: Element) -> list[_LeafPlan]:
        if self._plan is None:
            dtypes = [_leaf_array(leaf).dtype for leaf in flatten(first)]
            self._plan = make_plan(first, self._node.padded_shapes, self._node.padding_values,
                                   dtypes)
            self._template = first
        return self._plan

    def __next__(self) -> Any:
        node = self._node
        elements = pull_batch(self._upstream, node.batch_size, node.drop_remainder)
        first_index = self._elements
        index = self._batches
        self._elements += len(elements)
        self._batches += 1
        try:
            return self._pad(elements, first_index)
        except (StructureError, TypeError, ValueError, DataLossError) as error:
            annotate_error(error, node.name, index)
            raise

    def _pad(self, elements: list[Element], first_index: int) -> Element:
        plan = self._plan_for(elements[0])
        template = self._template
        for i, element in enumerate(elements):
            if not same_structure(template, element):
                raise StructureError(
                    f"padded_batch: input element {first_index + i} is {describe(element)}, "
                    f"but the elements are {describe(template)}")
        columns = zip(*(flatten(element) for element in elements))
        return pack_as(elements[0], [pad_leaf(list(column), leaf, first_index)
                                     for column, leaf in zip(columns, plan)])

    def _get_state(self) -> State:
        return self._with_input_state({"batches": self._batches, "elements": self._elements})

    def _set_state(self, state: State) -> None:
        self._load_input_state(state)
        self._batches = state["batches"]
        self._elements = state["elements"]
