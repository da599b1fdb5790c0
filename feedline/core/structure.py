"""Nested element structures: flatten, pack, map, compare, and describe them.

An element is a leaf or a nest of ``tuple`` (including namedtuples) and ``dict``.
Leaves are NumPy arrays, NumPy scalars, Python scalars or ``bytes``; as in tf.data, a leaf
may also be ``None`` (a :class:`NoneTensorSpec` component, kept as it is by batching) or a
:class:`~feedline.Dataset` (what ``window`` yields: a :class:`DatasetSpec` component; a batch
of datasets is a NumPy object array of them). Dicts flatten in sorted-key order, as
``tf.nest`` does, so two dicts with the same keys always line up.

Values become elements the way tf.data makes tensors of them (:func:`normalize_output` for
what user functions return, :func:`to_leaf_array` for what sources are given): text is
tf.string, so ``str`` becomes UTF-8 ``bytes`` and string arrays object arrays of ``bytes``;
a list nested in an element becomes one array; a list *returned* by a function is a tuple
of components (tf.data's ``_should_pack``).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any, ClassVar

import numpy as np

from feedline.core.errors import StructureError

Element = Any


def is_nest(value: object) -> bool:
    """Whether ``value`` is a tuple, namedtuple or dict (a node, not a leaf)."""
    return isinstance(value, (tuple, dict))


def _is_namedtuple(value: object) -> bool:
    return isinstance(value, tuple) and hasattr(type(value), "_fields")


def flatten(element: Element) -> list[Any]:
    """Return the leaves of ``element`` in canonical order.

    Example:
        >>> flatten({"b": 2, "a": (1, 3)})
        [1, 3, 2]
    """
    if isinstance(element, tuple):
        out: list[Any] = []
        for item in element:
            out.extend(flatten(item))
        return out
    if isinstance(element, dict):
        out = []
        for key in sorted(element):
            out.extend(flatten(element[key]))
        return out
    return [element]


def flatten_with_paths(element: Element, prefix: str = "") -> list[tuple[str, Any]]:
    """Like :func:`flatten`, pairing each leaf with a readable path such as ``[0]['image']``.

    Example:
        >>> flatten_with_paths((1, {"x": 2}))
        [('[0]', 1), ("[1]['x']", 2)]
    """
    if isinstance(element, tuple):
        out: list[tuple[str, Any]] = []
        for i, item in enumerate(element):
            out.extend(flatten_with_paths(item, f"{prefix}[{i}]"))
        return out
    if isinstance(element, dict):
        out = []
        for key in sorted(element):
            out.extend(flatten_with_paths(element[key], f"{prefix}[{key!r}]"))
        return out
    return [(prefix or "<element>", element)]


def pack_as(structure: Element, leaves: list[Any]) -> Element:
    """Rebuild ``structure`` with ``leaves`` (in :func:`flatten` order) as its leaves.

    Example:
        >>> pack_as({"b": 0, "a": (0, 0)}, [1, 3, 2])
        {'b': 2, 'a': (1, 3)}
    """
    iterator = iter(leaves)
    result = _pack(structure, iterator)
    if next(iterator, _END) is not _END:
        raise StructureError(f"too many leaves to pack into {describe(structure)}")
    return result


_END = object()


def _pack(structure: Element, leaves: Iterator[Any]) -> Element:
    if isinstance(structure, tuple):
        items = [_pack(item, leaves) for item in structure]
        return type(structure)(*items) if _is_namedtuple(structure) else tuple(items)
    if isinstance(structure, dict):
        packed = {key: _pack(structure[key], leaves) for key in sorted(structure)}
        return {key: packed[key] for key in structure}
    leaf = next(leaves, _END)
    if leaf is _END:
        raise StructureError(f"too few leaves to pack into {describe(structure)}")
    return leaf


def map_structure(fn: Callable[..., Any], *elements: Element) -> Element:
    """Apply ``fn`` leaf by leaf across elements that share one structure.

    Example:
        >>> map_structure(lambda a, b: a + b, (1, {"x": 2}), (10, {"x": 20}))
        (11, {'x': 22})
    """
    first = elements[0]
    for other in elements[1:]:
        assert_same_structure(first, other)
    columns = [flatten(e) for e in elements]
    return pack_as(first, [fn(*leaves) for leaves in zip(*columns)])


def detached(element: Element) -> Element:
    """A copy of ``element`` that shares nothing mutable with it: new containers, copied
    arrays (``bytes`` and NumPy scalars are immutable and shared).

    tf.data's elements are immutable tensors, so ported code updates its inputs in place
    (``features["image"] *= 2``) and is right to. A stage that keeps an element to hand out
    again (a memory cache, ``from_tensors`` under ``repeat``) hands out and keeps detached
    copies, so such an update never reaches another element, epoch or iterator.

    Example:
        >>> kept = {"x": np.zeros(2)}
        >>> given = detached(kept)
        >>> given["x"] += 1
        >>> kept["x"].tolist(), given is kept
        ([0.0, 0.0], False)
    """
    if type(element) is np.ndarray:
        return element.copy()
    if not is_nest(element):
        return element
    return map_structure(_detached_leaf, element)


def _detached_leaf(leaf: Any) -> Any:
    return leaf.copy() if isinstance(leaf, np.ndarray) else leaf


def same_structure(a: Element, b: Element) -> bool:
    """Whether ``a`` and ``b`` have the same nesting (leaf values are not compared)."""
    if isinstance(a, tuple):
        return (isinstance(b, tuple) and len(a) == len(b)
                and _is_namedtuple(a) == _is_namedtuple(b)
                and all(same_structure(x, y) for x, y in zip(a, b)))
    if isinstance(a, dict):
        return (isinstance(b, dict) and set(a) == set(b)
                and all(same_structure(a[k], b[k]) for k in a))
    return not is_nest(b)


def assert_same_structure(a: Element, b: Element, where: str = "") -> None:
    """Raise :class:`StructureError` naming ``where`` if ``a`` and ``b`` are nested differently."""
    if not same_structure(a, b):
        context = f" {where}" if where else ""
        raise StructureError(
            f"structure mismatch{context}: expected {describe(a)}, got {describe(b)}")


def describe(element: Element) -> str:
    """A short text of an element's structure, leaves shown by kind."""
    if isinstance(element, tuple):
        inner = ", ".join(describe(x) for x in element)
        name = type(element).__name__ if _is_namedtuple(element) else ""
        return f"{name}({inner}{',' if len(element) == 1 and not name else ''})"
    if isinstance(element, dict):
        return "{" + ", ".join(f"{k!r}: {describe(v)}" for k, v in element.items()) + "}"
    if isinstance(element, TensorSpec | NoneTensorSpec | DatasetSpec):
        return repr(element)
    return "leaf"


_NUMERIC_SCALARS = frozenset(
    t for t in set(np.sctypeDict.values()) if issubclass(t, np.number | np.bool_))
_PLAIN_LEAVES = frozenset({bool, int, float, complex, bytes}) | _NUMERIC_SCALARS
"""Leaf types that are elements as they are: the fast path of :func:`normalize_output`."""
_NUMERIC_KINDS = frozenset("biufcmM")
_EXPECTED = ("NumPy arrays, numbers, bytes or str, nested in tuples, dicts, namedtuples or "
             "lists")


_LEAF_TYPES: set[type] = set()
"""Classes of library values that are elements as they are (see :func:`register_leaf_type`)."""


def register_leaf_type(cls: type) -> type:
    """Declare that instances of ``cls`` are leaves of elements, returned by user functions
    unchanged (as ``RaggedValues`` from ``parse_example`` with a ``VarLenFeature``).

    Only library code calls this, for its own value types: anything else a function returns
    that is not an array, number or text is a ``TypeError`` (:func:`normalize_output`).

    Example:
        >>> class Rows:
        ...     pass
        >>> rows = Rows()
        >>> register_leaf_type(Rows) is Rows and normalize_output((rows, 1))[0] is rows
        True
    """
    _LEAF_TYPES.add(cls)
    return cls


def is_registered_leaf(value: Any) -> bool:
    """Whether ``value`` is an instance of a :func:`register_leaf_type` class.

    Example:
        >>> is_registered_leaf(b"x")
        False
    """
    return type(value) in _LEAF_TYPES


def normalize_output(value: Element) -> Element:
    """Turn a user function's return value into an element, as tf.data makes tensors of it.

    * ``str`` (and NumPy string scalars and arrays) become UTF-8 ``bytes`` (object arrays of
      ``bytes``): tf.data's tf.string, so a batch never mixes ``str`` and ``bytes``.
    * A list nested in the result becomes one NumPy array (tf.data converts it to a tensor);
      a list returned as the whole result is a tuple of components (tf.data's
      ``_should_pack``), whose own lists become arrays.
    * Tuples, namedtuples and dicts keep their structure; ``None`` inside them is a component
      of its own (tf.data's ``NoneTensorSpec``), kept as it is.
    * Anything else (``None`` as the whole result, a class, an arbitrary object) is a
      ``TypeError`` naming its type and its position in the result.

    Numbers, ``bytes`` and numeric arrays are returned at the cost of one type check: this
    runs for every element a function produces.

    Example:
        >>> normalize_output(([np.int64(1), np.int64(5)], "id"))
        (array([1, 5]), b'id')
        >>> normalize_output([1, {"k": [2, 3]}])
        (1, {'k': array([2, 3])})
        >>> normalize_output({"x": None})
        {'x': None}
        >>> normalize_output(None)
        Traceback (most recent call last):
        ...
        TypeError: a function returned None (NoneType), which cannot be part of an element: expected NumPy arrays, numbers, bytes or str, nested in tuples, dicts, namedtuples or lists
    """
    kind = type(value)
    if kind in _PLAIN_LEAVES:
        return value
    if kind is np.ndarray and value.dtype.kind in _NUMERIC_KINDS:
        return value
    if kind is list:
        return tuple(_normalize(item, f"[{i}]") for i, item in enumerate(value))
    return _normalize(value, "")


def _normalize(value: Any, path: str) -> Any:
    kind = type(value)
    if kind in _PLAIN_LEAVES:
        return value
    if isinstance(value, np.ndarray):
        return text_as_bytes(value) if value.dtype.kind in "USO" else value
    if isinstance(value, str):  # np.str_ too
        return value.encode("utf-8")
    if isinstance(value, bytes):  # np.bytes_: plain bytes, as tf.string gives
        return bytes(value)
    if isinstance(value, tuple):
        items = [_normalize(item, f"{path}[{i}]") for i, item in enumerate(value)]
        return kind(*items) if _is_namedtuple(value) else tuple(items)
    if isinstance(value, dict):
        return {key: _normalize(item, f"{path}[{key!r}]") for key, item in value.items()}
    if isinstance(value, list):
        return _list_as_array(value, path)
    if isinstance(value, np.generic | int | float | complex):  # other NumPy scalars, int enums
        return value
    if value is None and path:
        # A None component of a tuple or dict is kept, as tf.data keeps it; a function
        # returning None as a whole most likely forgot its return statement.
        return None
    if isinstance(value, _dataset_class()) or kind in _LEAF_TYPES:  # datasets, RaggedValues
        return value
    if hasattr(kind, "__array__") and not isinstance(value, type):
        # An array of another library (a CPU torch tensor, a JAX array): tf.data would
        # convert it to a tensor, so it becomes a NumPy array.
        array = np.asarray(value)
        if array.dtype != object:
            return _normalize(array, path)
    raise TypeError(f"a function returned {_shown(value)}{f' at {path}' if path else ''}, "
                    f"which cannot be part of an element: expected {_EXPECTED}")


def _shown(value: Any) -> str:
    if value is None:
        return "None (NoneType)"
    if isinstance(value, type):
        return f"the class {value.__qualname__}"
    return f"a value of type {type(value).__qualname__}"


def _list_as_array(value: list[Any], path: str) -> np.ndarray:
    """A list nested in a function's result as one array (tf.data's tensor of it)."""
    if _contains_dataset(value):
        return datasets_array(value, f"a function's result at {path}")
    try:
        array = np.asarray(value)
    except ValueError as error:
        raise StructureError(f"a function returned a list at {path} that cannot become one "
                             f"array (a list in an element is converted to a tensor, as in "
                             f"tf.data): {error}") from None
    if array.dtype.kind in "US" or (array.dtype == object and _contains_bytes(value)):
        # Strings: NumPy would turn numbers among them into text, and cut trailing NULs.
        objects = np.array(value, dtype=object)
        bad = next((x for x in objects.ravel().tolist() if not isinstance(x, str | bytes)),
                   _END)
        if bad is not _END or objects.shape != array.shape:
            raise TypeError(f"a function returned a list at {path} that mixes strings with "
                            f"{'lists' if bad is _END else _shown(bad)}; a list in an element "
                            "becomes one array, so its items must all be strings, of equal "
                            "lengths")
        return text_as_bytes(objects)
    if array.dtype == object:
        bad = next((x for x in np.array(value, dtype=object).ravel().tolist()
                    if type(x) not in _PLAIN_LEAVES), None)
        raise TypeError(f"a function returned a list at {path} holding {_shown(bad)}, which "
                        f"cannot be part of an element: expected {_EXPECTED}")
    return array


def text_as_bytes(array: np.ndarray) -> np.ndarray:
    """A string array as tf.data holds tf.string: an object array of UTF-8 ``bytes``.

    ``str`` (``U``) and ``bytes`` (``S``) arrays are converted; an object array is returned
    as it is unless it holds ``str`` items, which are encoded. Other arrays pass through.

    Example:
        >>> text_as_bytes(np.array(["a", "é"]))
        array([b'a', b'\\xc3\\xa9'], dtype=object)
    """
    kind = array.dtype.kind
    if kind == "O":
        items = array.ravel().tolist()
        if not any(isinstance(x, str) for x in items):
            return array
    elif kind in "US":
        items = array.ravel().tolist()
    else:
        return array
    out = np.empty(array.shape, dtype=object)
    out.reshape(-1)[:] = [x.encode("utf-8") if isinstance(x, str) else x for x in items]
    return out


def to_leaf_array(value: Any) -> np.ndarray:
    """Convert one leaf given to a source to a NumPy array, as tf.data makes a tensor of it.

    ``bytes``/``str`` leaves (and lists of them) become object arrays of ``bytes``, ``str``
    encoded as UTF-8; NumPy ``str``/``bytes`` arrays likewise, and object arrays holding
    ``str`` (a pandas text column, ``dict(df)``'s values) have those items encoded. A
    :class:`~feedline.Dataset` is a 0-d object array holding it, a (nested) list of datasets
    an object array of them (see :func:`datasets_array`).

    Example:
        >>> to_leaf_array("é"), to_leaf_array(["a", b"b"])
        (array(b'\\xc3\\xa9', dtype=object), array([b'a', b'b'], dtype=object))
        >>> to_leaf_array(np.array(["x", "yz"], dtype=object))
        array([b'x', b'yz'], dtype=object)
    """
    if isinstance(value, np.ndarray):
        return text_as_bytes(value) if value.dtype.kind in "USO" else value
    if isinstance(value, (bytes, str)):
        out = np.empty((), dtype=object)
        out[()] = value.encode("utf-8") if isinstance(value, str) else bytes(value)
        return out
    if isinstance(value, (list, tuple)):
        if _contains_bytes(value):
            return text_as_bytes(np.array(value, dtype=object))
        if _contains_dataset(value):
            return datasets_array(value, "a list of datasets")
    elif isinstance(value, _dataset_class()):
        out = np.empty((), dtype=object)
        out[()] = value
        return out
    array = np.asarray(value)
    return text_as_bytes(array) if array.dtype.kind in "USO" else array


def _contains_bytes(value: Any) -> bool:
    if isinstance(value, (bytes, str)):
        return True
    if isinstance(value, (list, tuple)) and value:
        return _contains_bytes(value[0])
    return False


def _dataset_class() -> type:
    # Imported here: dataset.py imports this module.
    from feedline.core.dataset import Dataset

    return Dataset


def _contains_dataset(value: Any) -> bool:
    while isinstance(value, (list, tuple)) and value:
        value = value[0]
    return isinstance(value, _dataset_class())


def datasets_array(value: Any, what: str = "a list of datasets") -> np.ndarray:
    """A (nested) list of datasets as a NumPy object array of them, as tf.data makes a tensor
    of dataset variants of such a list (``from_tensors([a, b])``: a batch of two datasets).

    NumPy cannot build it by itself: a dataset has a length and items, so ``np.array`` would
    read each one's elements instead of holding it.

    Raises:
        StructureError: The nesting is ragged, or an item is not a dataset.

    Example:
        >>> import feedline as fl
        >>> datasets_array([[fl.Dataset.range(1), fl.Dataset.range(2)]]).shape
        (1, 2)
    """
    dataset = _dataset_class()
    shape: list[int] = []
    probe = value
    while isinstance(probe, (list, tuple)):
        shape.append(len(probe))
        if not probe:
            break
        probe = probe[0]
    items: list[Any] = []

    def collect(item: Any, depth: int, path: str) -> None:
        if depth == len(shape):
            if not isinstance(item, dataset):
                raise StructureError(f"{what}: item {path} is {_shown(item)}, not a dataset "
                                     "(datasets cannot be mixed with other values in one "
                                     "component)")
            items.append(item)
            return
        if not isinstance(item, (list, tuple)) or len(item) != shape[depth]:
            found = f"{len(item)} items" if isinstance(item, (list, tuple)) else _shown(item)
            raise StructureError(f"{what}: ragged nesting: {path or 'the list'} has {found}, "
                                 f"expected {shape[depth]} items")
        for i, sub in enumerate(item):
            collect(sub, depth + 1, f"{path}[{i}]")

    collect(value, 0, "")
    out = np.empty(tuple(shape), dtype=object)
    flat = out.reshape(-1)
    for i, item in enumerate(items):  # one by one: a list would be read as nested sequences
        flat[i] = item
    return out


def is_datasets_array(value: Any) -> bool:
    """Whether ``value`` is a NumPy object array of datasets (a batch of datasets).

    Example:
        >>> import feedline as fl
        >>> is_datasets_array(datasets_array([fl.Dataset.range(1)])), is_datasets_array(b"x")
        (True, False)
    """
    return (isinstance(value, np.ndarray) and value.dtype == object and value.size > 0
            and isinstance(value.flat[0], _dataset_class()))


@dataclass(frozen=True)
class TensorSpec:
    """Shape and dtype of one leaf of a dataset's elements.

    Attributes:
        shape: Dimension sizes; ``None`` where a dimension varies between elements.
        dtype: NumPy dtype of the leaf; ``object`` for ``bytes``/``str`` leaves.
    """

    shape: tuple[int | None, ...]
    dtype: np.dtype

    def __repr__(self) -> str:
        return f"TensorSpec(shape={self.shape}, dtype={np.dtype(self.dtype).name})"

    def is_compatible_with(self, value: Any) -> bool:
        """Whether a leaf value fits this spec (same rank, same known dims, same dtype kind)."""
        array = to_leaf_array(value)
        if array.ndim != len(self.shape):
            return False
        return all(d is None or d == s for d, s in zip(self.shape, array.shape))

    def most_specific_common(self, other: TensorSpec) -> TensorSpec:
        """The spec that admits both: dims that differ become ``None``."""
        if len(self.shape) != len(other.shape):
            raise StructureError(f"leaves of different rank: {self} and {other}")
        shape = tuple(a if a == b else None for a, b in zip(self.shape, other.shape))
        dtype = self.dtype if self.dtype == other.dtype else np.result_type(self.dtype, other.dtype)
        return TensorSpec(shape, dtype)


@dataclass(frozen=True)
class NoneTensorSpec:
    """The spec of a ``None`` component (tf.data's ``NoneTensorSpec``).

    ``None`` is a component of its own: ``batch``, ``unbatch`` and ``rebatch`` keep it
    ``None``. ``shape`` and ``dtype`` are there for code that reads them from every leaf
    spec: a ``None`` is a scalar object.

    Example:
        >>> spec_of((1, None))
        (TensorSpec(shape=(), dtype=int64), NoneTensorSpec())
    """

    shape: ClassVar[tuple[int | None, ...]] = ()
    dtype: ClassVar[np.dtype] = np.dtype(object)

    def __repr__(self) -> str:
        return "NoneTensorSpec()"

    def is_compatible_with(self, value: Any) -> bool:
        """Whether ``value`` is ``None``."""
        return value is None

    def most_specific_common(self, other: Any) -> NoneTensorSpec:
        """``self`` when ``other`` is a :class:`NoneTensorSpec` too."""
        if not isinstance(other, NoneTensorSpec):
            raise StructureError(f"a None component and a {other} cannot be combined")
        return self


@dataclass(frozen=True)
class DatasetSpec:
    """The spec of a component that holds datasets (tf.data's ``DatasetSpec``): one dataset
    (``shape=()``, what ``window`` yields) or a batch of them (a NumPy object array of
    datasets of that shape).

    Attributes:
        element_spec: The spec of the datasets' elements (``None`` when they are empty).
        shape: Dimensions of the batch of datasets; ``()`` for one dataset.

    Example:
        >>> import feedline as fl
        >>> fl.Dataset.range(6).window(2).batch(2, drop_remainder=True).element_spec
        DatasetSpec(TensorSpec(shape=(), dtype=int64), shape=(2,))
    """

    element_spec: Any
    shape: tuple[int | None, ...] = ()
    dtype: ClassVar[np.dtype] = np.dtype(object)

    def __repr__(self) -> str:
        return f"DatasetSpec({self.element_spec!r}, shape={self.shape})"

    def is_compatible_with(self, value: Any) -> bool:
        """Whether ``value`` is a dataset (or an array of them) of this shape."""
        if isinstance(value, _dataset_class()):
            return not self.shape
        if not isinstance(value, np.ndarray) or value.ndim != len(self.shape):
            return False
        return (all(d is None or d == s for d, s in zip(self.shape, value.shape))
                and all(isinstance(x, _dataset_class()) for x in value.ravel().tolist()))

    def most_specific_common(self, other: Any) -> DatasetSpec:
        """The spec admitting both: batch dimensions that differ become ``None``."""
        if not isinstance(other, DatasetSpec) or len(self.shape) != len(other.shape):
            raise StructureError(f"cannot combine {self} and {other}")
        shape = tuple(a if a == b else None for a, b in zip(self.shape, other.shape))
        return DatasetSpec(most_specific_common_spec(self.element_spec, other.element_spec),
                           shape)


LeafSpec = TensorSpec | NoneTensorSpec | DatasetSpec


def most_specific_common_spec(first: Element, second: Element) -> Element:
    """The spec admitting the elements of both specs: dimensions that differ become ``None``.

    ``None`` (an empty dataset's spec) admits anything.

    Raises:
        StructureError: The nests differ, a leaf's dtype or rank differs, or a leaf is
            ``None`` in one and not in the other.

    Example:
        >>> most_specific_common_spec(spec_of(np.zeros(2)), spec_of(np.zeros(3)))
        TensorSpec(shape=(None,), dtype=float64)
    """
    if first is None:
        return second
    if second is None:
        return first
    if not same_structure(first, second):
        raise StructureError(f"specs of different structures: {describe(first)} and "
                             f"{describe(second)}")
    leaves = []
    for (path, a), b in zip(flatten_with_paths(first), flatten(second)):
        if type(a) is not type(b):
            raise StructureError(f"leaf {path} is {a} in one spec and {b} in the other")
        if isinstance(a, TensorSpec) and np.dtype(a.dtype) != np.dtype(b.dtype):
            raise StructureError(f"leaf {path} has dtype {np.dtype(a.dtype).name} in one spec "
                                 f"and {np.dtype(b.dtype).name} in the other")
        leaves.append(a.most_specific_common(b))
    return pack_as(first, leaves)


def leaf_spec(value: Any) -> LeafSpec:
    """The spec of one leaf value: a :class:`TensorSpec`, or for ``None`` and datasets (one,
    or an array of them) a :class:`NoneTensorSpec` or :class:`DatasetSpec`.

    Example:
        >>> import feedline as fl
        >>> leaf_spec(np.zeros((2, 3), np.float32)), leaf_spec(None)
        (TensorSpec(shape=(2, 3), dtype=float32), NoneTensorSpec())
        >>> leaf_spec(fl.Dataset.range(3))
        DatasetSpec(TensorSpec(shape=(), dtype=int64), shape=())
    """
    if value is None:
        return NoneTensorSpec()
    if isinstance(value, _dataset_class()):
        return DatasetSpec(value.element_spec, ())
    if is_datasets_array(value):
        inner = None
        for i, dataset in enumerate(value.ravel().tolist()):
            if not isinstance(dataset, _dataset_class()):
                raise StructureError(f"item {i} of an array of datasets is {_shown(dataset)}")
            try:
                inner = most_specific_common_spec(inner, dataset.element_spec)
            except StructureError as error:
                raise StructureError(f"the datasets of one component must have compatible "
                                     f"elements; dataset {i}'s differ from those before it: "
                                     f"{error}") from None
        return DatasetSpec(inner, tuple(value.shape))
    array = to_leaf_array(value)
    return TensorSpec(tuple(array.shape), array.dtype)


def spec_of(element: Element) -> Element:
    """The element spec (same structure, :class:`TensorSpec` leaves) of one element.

    Example:
        >>> spec_of((np.zeros((2, 3), np.float32), b"x"))
        (TensorSpec(shape=(2, 3), dtype=float32), TensorSpec(shape=(), dtype=object))
    """
    return pack_as(element, [leaf_spec(leaf) for leaf in flatten(element)])


def batched_spec(spec: Element, batch_dim: int | None) -> Element:
    """The spec of a batch of elements of ``spec``, with a leading dimension ``batch_dim``.

    ``None`` components stay ``None``; datasets become batches of datasets.

    Example:
        >>> batched_spec((TensorSpec((2,), np.dtype("int64")), NoneTensorSpec()), None)
        (TensorSpec(shape=(None, 2), dtype=int64), NoneTensorSpec())
    """
    return pack_as(spec, [_batched_leaf(s, batch_dim) for s in flatten(spec)])


def _batched_leaf(spec: LeafSpec, batch_dim: int | None) -> LeafSpec:
    if isinstance(spec, NoneTensorSpec):
        return spec
    if isinstance(spec, DatasetSpec):
        return DatasetSpec(spec.element_spec, (batch_dim, *spec.shape))
    return TensorSpec((batch_dim, *spec.shape), spec.dtype)


def unbatched_spec(spec: Element) -> Element:
    """The spec of the rows of elements of ``spec`` (leading dimension removed).

    ``None`` components stay ``None``.

    Raises:
        StructureError: A leaf is a scalar (for one dataset, tf.data's "Slicing dataset
            elements is not supported for rank 0").
    """
    leaves = flatten(spec)
    out: list[LeafSpec] = []
    for leaf in leaves:
        if isinstance(leaf, NoneTensorSpec):
            out.append(leaf)
            continue
        if not leaf.shape:
            if isinstance(leaf, DatasetSpec):
                raise StructureError("Slicing dataset elements is not supported for rank 0 "
                                     f"({leaf}: one dataset, not a batch of datasets)")
            raise StructureError(f"cannot unbatch a scalar leaf ({leaf})")
        if isinstance(leaf, DatasetSpec):
            out.append(DatasetSpec(leaf.element_spec, leaf.shape[1:]))
        else:
            out.append(TensorSpec(leaf.shape[1:], leaf.dtype))
    return pack_as(spec, out)


def element_bytes(element: Element) -> int:
    """Approximate memory of one element: array buffers and byte strings, 64 bytes per scalar
    (what buffers, budgets and statistics count).

    Example:
        >>> element_bytes((np.zeros(10, np.float32), b"abc"))
        43
    """
    total = 0
    for leaf in flatten(element):
        if isinstance(leaf, np.ndarray):
            total += leaf.nbytes
        elif isinstance(leaf, bytes | str):
            total += len(leaf)
        else:
            total += 64
    return total
