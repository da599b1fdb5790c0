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
from feedline.core.graph import Node

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
    if isinstance(element, TensorSpec | NoneTensorSpec | DatasetSpec | RaggedTensorSpec
                  | SparseTensorSpec):
        return repr(element)
    return "leaf"


_NUMERIC_SCALARS = frozenset(
    t for t in set(np.sctypeDict.values()) if issubclass(t, np.number | np.bool_))
_PLAIN_LEAVES = frozenset({bool, int, float, complex, bytes}) | _NUMERIC_SCALARS
"""Leaf types that need no structure conversion (Python numbers still take tf.data's dtypes)."""
_KEPT_LEAVES = frozenset({complex, bytes}) | _NUMERIC_SCALARS
"""Leaf types that are elements as they are: the fast path of :func:`normalize_output`
(Python ``complex`` is complex128 in tf.data, as in NumPy)."""
_INT32_MIN, _INT32_MAX = -(2**31), 2**31 - 1
_INT64_MIN, _INT64_MAX = -(2**63), 2**63 - 1
_FLOAT32_MAX = float(np.finfo(np.float32).max)
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
    * Python numbers take tf.data's dtypes (:func:`python_number`): ``int`` is int32 (int64
      when it does not fit), ``float`` float32, ``bool`` bool; NumPy values keep theirs.
    * A list nested in the result becomes one NumPy array (tf.data converts it to a tensor,
      with the dtype :func:`sequence_array` gives it);
      a list returned as the whole result is a tuple of components (tf.data's
      ``_should_pack``), whose own lists become arrays.
    * Tuples, namedtuples and dicts keep their structure; ``None`` inside them is a component
      of its own (tf.data's ``NoneTensorSpec``), kept as it is.
    * Anything else (``None`` as the whole result, a class, an arbitrary object) is a
      ``TypeError`` naming its type and its position in the result.

    NumPy numbers, ``bytes`` and numeric arrays are returned at the cost of one type check:
    this runs for every element a function produces.

    Example:
        >>> normalize_output(([np.int64(1), np.int64(5)], "id"))
        (array([1, 5]), b'id')
        >>> normalize_output([1, {"k": [2.0, 3]}])
        (np.int32(1), {'k': array([2., 3.], dtype=float32)})
        >>> normalize_output(np.float64(0.5))
        np.float64(0.5)
        >>> normalize_output({"x": None})
        {'x': None}
        >>> normalize_output(None)
        Traceback (most recent call last):
        ...
        TypeError: a function returned None (NoneType), which cannot be part of an element: expected NumPy arrays, numbers, bytes or str, nested in tuples, dicts, namedtuples or lists
    """
    kind = type(value)
    if kind in _KEPT_LEAVES:
        return value
    if kind is float or kind is int or kind is bool:
        return python_number(value)
    if kind is np.ndarray and value.dtype.kind in _NUMERIC_KINDS:
        return value
    if kind is list:
        return tuple(_normalize(item, f"[{i}]") for i, item in enumerate(value))
    return _normalize(value, "")


def _normalize(value: Any, path: str) -> Any:
    kind = type(value)
    if kind in _KEPT_LEAVES:
        return value
    if kind is float or kind is int or kind is bool:
        return python_number(value)
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
    if isinstance(value, np.generic | complex):  # other NumPy scalars
        return value
    if isinstance(value, int | float):  # int enums, float subclasses: as tf.data converts them
        return python_number(_plain_number(value))
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


def python_number(value: bool | float) -> np.generic:
    """A Python ``bool``, ``int`` or ``float`` as the NumPy scalar of tf.data's tensor of it.

    As ``tf.convert_to_tensor`` converts them: ``int`` is int32, or int64 when it does not
    fit in int32; ``float`` is float32; ``bool`` is bool.

    Raises:
        ValueError: An ``int`` beyond int64, or a finite ``float`` beyond float32's range
            (TensorFlow refuses both).

    Example:
        >>> python_number(3), python_number(2**40), python_number(0.5), python_number(True)
        (np.int32(3), np.int64(1099511627776), np.float32(0.5), np.True_)
    """
    kind = type(value)
    if kind is float:
        if -_FLOAT32_MAX <= value <= _FLOAT32_MAX or value != value or value in _INFINITIES:
            return np.float32(value)
        raise ValueError(f"cannot convert the Python float {value!r} to float32 (tf.data's "
                         "dtype for Python floats): it is beyond float32's range; pass a "
                         "NumPy float64 value to keep it")
    if kind is bool:
        return np.bool_(value)
    if _INT32_MIN <= value <= _INT32_MAX:
        return np.int32(value)
    if _INT64_MIN <= value <= _INT64_MAX:
        return np.int64(value)
    raise ValueError(f"cannot convert the Python int {value} to a tensor: it is beyond "
                     "int64's range (as tf.data refuses it)")


_INFINITIES = (float("inf"), float("-inf"))


def _plain_number(value: float) -> bool | int | float:
    """A subclass of ``bool``/``int``/``float`` (an ``IntEnum``) as the plain value."""
    if isinstance(value, bool):
        return bool(value)
    return int(value) if isinstance(value, int) else float(value)


class RaggedListError(StructureError):
    """A list whose rows differ in length was given where tf.data makes one tensor of it."""


def _ragged_where(value: Any, path: str = "") -> str:
    """Where a nested list first changes length: ``"[1] has 1 item, [0] has 2"``."""
    if not isinstance(value, list | tuple) or not value:
        return "its rows differ in length"
    lengths = [len(item) if isinstance(item, list | tuple | np.ndarray) else None
               for item in value]
    first = lengths[0]
    for i, length in enumerate(lengths):
        if length != first:
            def items(n: int | None) -> str:
                return "a scalar" if n is None else f"{n} item{'s' if n != 1 else ''} long"
            return f"{path}[{i}] is {items(length)}, {path}[0] {items(first)}"
    for i, item in enumerate(value):
        if isinstance(item, list | tuple):
            found = _ragged_where(item, f"{path}[{i}]")
            if found != "its rows differ in length":
                return found
    return "its rows differ in length"


def _first_scalar(value: Any) -> Any:
    """The first number of a (nested) list, depth first, or ``_END`` when it has none."""
    while True:
        if isinstance(value, list | tuple):
            if not value:
                return _END
            value = value[0]
        elif isinstance(value, np.ndarray):
            if value.ndim == 0:
                return value[()]
            if value.size == 0:
                return _END
            value = value.flat[0]
        else:
            return value


def sequence_array(value: list[Any] | tuple[Any, ...]) -> np.ndarray:
    """A (nested) list of numbers as the array tf.data makes of it.

    TensorFlow takes a list's dtype from its first number, depth first: a Python or NumPy
    integer makes int32 (int64 when a value does not fit, float32 when a float follows), a
    NumPy float64 makes float64 (float16 float16), any other float float32, a bool bool, a
    complex complex128; a list without numbers is float32. The other items are converted
    to that dtype, so ``[np.float64(1), 2.0]`` is float64 and ``[2.0, np.float64(1)]``
    float32. Lists of text or datasets are not numbers: see :func:`to_leaf_array`.

    Raises:
        RaggedListError: The nesting is ragged (a ``ValueError``, as TensorFlow raises).
        ValueError: A value is beyond the dtype's range, or bools are mixed with other
            numbers (as TensorFlow raises).

    Example:
        >>> sequence_array([1, 2]), sequence_array([1, 2.5])
        (array([1, 2], dtype=int32), array([1. , 2.5], dtype=float32))
        >>> sequence_array([[], []])
        array([], shape=(2, 0), dtype=float32)
        >>> sequence_array([np.float64(1), 2.0]).dtype, sequence_array([2**40]).dtype
        (dtype('float64'), dtype('int64'))
    """
    try:
        array = np.asarray(value)
    except ValueError:
        raise RaggedListError(
            f"a ragged (non-rectangular) list cannot become one array ({_ragged_where(value)};"
            " TensorFlow: \"Can't convert non-rectangular Python sequence to Tensor\"): make "
            "one element per row with Dataset.from_list(rows), slice ragged rows as "
            "tf.ragged.constant's (Dataset.from_tensor_slices(RaggedValues.from_row_lengths("
            "values, lengths))), or pad the rows (RaggedValues.from_row_lengths(values, "
            "lengths).to_padded(0))") from None
    kind = array.dtype.kind
    if kind == "O" and any(type(x) is int and not _INT64_MIN <= x <= _INT64_MAX
                           for x in array.ravel().tolist()):
        # NumPy holds integers beyond 64 bits as Python objects.
        raise ValueError("cannot convert a list holding an integer beyond int64's range to "
                         "one array (as TensorFlow refuses it)")
    if kind not in "biuf":
        return array  # complex, text and objects: handled (or refused) by the callers
    first = _first_scalar(value)
    if first is _END:
        return array.astype(np.float32)
    if isinstance(first, bool | np.bool_):
        if kind != "b":
            raise ValueError("cannot convert a list that mixes bools with other numbers "
                             "to one array (as TensorFlow refuses it)")
        return array
    if isinstance(first, int | np.integer):
        if kind == "f":
            return _as_float32(array)
        if array.size and not (_INT32_MIN <= array.min() and array.max() <= _INT32_MAX):
            if kind == "u" and array.max() > _INT64_MAX:
                raise ValueError("cannot convert a list holding an integer beyond int64's "
                                 "range to one array (as TensorFlow refuses it)")
            return array.astype(np.int64)
        return array.astype(np.int32)
    if isinstance(first, np.float64 | np.float16):
        return array.astype(first.dtype)
    return _as_float32(array)


def _as_float32(array: np.ndarray) -> np.ndarray:
    if array.dtype.itemsize > 4 and array.size:
        finite = array[np.isfinite(array)]
        if finite.size and np.abs(finite).max() > _FLOAT32_MAX:
            raise ValueError("cannot convert a list holding a float beyond float32's range "
                             "to float32 (tf.data's dtype for lists of Python floats); "
                             "give a NumPy float64 array to keep float64")
    return array.astype(np.float32)


def _numpy_dtypes(value: Any, found: set[np.dtype]) -> None:
    """Collect the dtypes of the NumPy values in a (nested) list."""
    for item in value:
        if isinstance(item, list | tuple):
            _numpy_dtypes(item, found)
        elif isinstance(item, np.ndarray | np.generic) and item.dtype.kind in "biufc":
            found.add(item.dtype)


def _packed(value: list[Any], dtypes: set[np.dtype], path: str) -> np.ndarray:
    """A list holding NumPy values, packed as tf.data packs a list of tensors in a function's
    result: the NumPy values (a function's tensors) share one dtype, which the Python numbers
    among them take (``[x, 2]`` with an int64 ``x`` is int64)."""
    array = np.asarray(value)
    (dtype,) = dtypes if len(dtypes) == 1 else (None,)
    if dtype is None or array.dtype.kind not in "biufc" or not np.can_cast(
            array.dtype, dtype, "same_kind"):
        kinds = ", ".join(sorted(d.name for d in dtypes))
        raise TypeError(f"a function returned a list at {path} that mixes NumPy values of "
                        f"dtype {kinds} with {'each other' if dtype is None else 'Python '}"
                        f"{'' if dtype is None else _python_kind(value)}: tf.data packs a "
                        "list of tensors only when they share one dtype (which Python numbers "
                        "among them take); convert them first")
    return array if array.dtype == dtype else array.astype(dtype)


def _python_kind(value: Any) -> str:
    kinds = set()
    stack = [value]
    while stack:
        item = stack.pop()
        if isinstance(item, list | tuple):
            stack.extend(item)
        elif type(item) in (bool, int, float, complex):
            kinds.add(f"{type(item).__name__}s")
    return " and ".join(sorted(kinds)) or "other values"


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
        tensor_dtypes: set[np.dtype] = set()
        _numpy_dtypes(value, tensor_dtypes)
        array = (sequence_array(value) if not tensor_dtypes
                 else _packed(value, tensor_dtypes, path))
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

    Python numbers and lists of them take tf.data's dtypes (:func:`python_number`,
    :func:`sequence_array`: ``1.5`` is float32, ``[1, 2]`` int32); NumPy values keep theirs.
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
        array = sequence_array(value)
        return text_as_bytes(array) if array.dtype.kind in "USO" else array
    if isinstance(value, _dataset_class()):
        out = np.empty((), dtype=object)
        out[()] = value
        return out
    if isinstance(value, int | float) and not isinstance(value, np.generic):
        return np.asarray(python_number(_plain_number(value)))
    array = np.asarray(value)
    return text_as_bytes(array) if array.dtype.kind in "USO" else array


def _contains_bytes(value: Any) -> bool:
    if isinstance(value, (bytes, str)):
        return True
    if isinstance(value, (list, tuple)) and value:
        return _contains_bytes(value[0])
    return False


def _dataset_class() -> type:
    # Node, not Dataset: core.dataset imports this module (every Dataset is a Node).
    return Node


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
        (TensorSpec(shape=(), dtype=int32), NoneTensorSpec())
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


@dataclass(frozen=True)
class RaggedTensorSpec:
    """The spec of a ragged leaf (tf.data's ``RaggedTensorSpec``): a
    :class:`~feedline.RaggedValues`, as ``parse_example`` gives for a ``VarLenFeature`` or a
    ``RaggedFeature`` and ``ragged_batch`` for rows of different shapes.

    Attributes:
        shape: ``(rows, None, ..., *uniform inner dims)``: each ragged level is ``None``.
        dtype: NumPy dtype of the values.
        ragged_rank: Number of ragged levels.

    Example:
        >>> import feedline as fl
        >>> spec_of({"tokens": fl.RaggedValues(np.array([4, 5, 6]), [0, 2, 2, 3])})
        {'tokens': RaggedTensorSpec(shape=(3, None), dtype=int64, ragged_rank=1)}
    """

    shape: tuple[int | None, ...]
    dtype: np.dtype
    ragged_rank: int = 1

    def __repr__(self) -> str:
        return (f"RaggedTensorSpec(shape={self.shape}, dtype={np.dtype(self.dtype).name}, "
                f"ragged_rank={self.ragged_rank})")

    def is_compatible_with(self, value: Any) -> bool:
        """Whether ``value`` is ragged values of this dtype, ragged rank and known dims."""
        return _composite_fits(self, value)

    def most_specific_common(self, other: Any) -> RaggedTensorSpec:
        """The spec admitting both: dims that differ become ``None``."""
        if not isinstance(other, RaggedTensorSpec) or other.ragged_rank != self.ragged_rank:
            raise StructureError(f"cannot combine {self} and {other}")
        return RaggedTensorSpec(_common_shape(self, other), self.dtype, self.ragged_rank)


@dataclass(frozen=True)
class SparseTensorSpec:
    """The spec of a sparse leaf (tf.data's ``SparseTensorSpec``): a
    :class:`~feedline.SparseValues`, as ``parse_example`` gives for a ``SparseFeature`` (or
    a ``VarLenFeature`` with ``var_len_as_sparse=True``) and ``sparse_batch`` gives.

    Attributes:
        shape: The dense shape; ``None`` where it varies.
        dtype: NumPy dtype of the values.

    Example:
        >>> import feedline as fl
        >>> spec_of(fl.SparseValues([[0, 1]], np.array([5.0], np.float32), [2, 3]))
        SparseTensorSpec(shape=(2, 3), dtype=float32)
    """

    shape: tuple[int | None, ...]
    dtype: np.dtype

    def __repr__(self) -> str:
        return f"SparseTensorSpec(shape={self.shape}, dtype={np.dtype(self.dtype).name})"

    def is_compatible_with(self, value: Any) -> bool:
        """Whether ``value`` is sparse values of this dtype, rank and known dims."""
        return _composite_fits(self, value)

    def most_specific_common(self, other: Any) -> SparseTensorSpec:
        """The spec admitting both: dims that differ become ``None``."""
        if not isinstance(other, SparseTensorSpec):
            raise StructureError(f"cannot combine {self} and {other}")
        return SparseTensorSpec(_common_shape(self, other), self.dtype)


def _common_shape(a: Any, b: Any) -> tuple[int | None, ...]:
    if len(a.shape) != len(b.shape):
        raise StructureError(f"leaves of different rank: {a} and {b}")
    if np.dtype(a.dtype) != np.dtype(b.dtype):
        raise StructureError(f"leaves of different dtypes: {a} and {b}")
    return tuple(x if x == y else None for x, y in zip(a.shape, b.shape))


def _composite_fits(spec: RaggedTensorSpec | SparseTensorSpec, value: Any) -> bool:
    own = getattr(value, "_leaf_spec", None)
    if type(value) not in _LEAF_TYPES or own is None:
        return False
    found = own()
    if type(found) is not type(spec) or len(found.shape) != len(spec.shape):
        return False
    if np.dtype(found.dtype) != np.dtype(spec.dtype) or \
            getattr(found, "ragged_rank", 0) != getattr(spec, "ragged_rank", 0):
        return False
    return all(d is None or d == f for d, f in zip(spec.shape, found.shape))


LeafSpec = TensorSpec | NoneTensorSpec | DatasetSpec | RaggedTensorSpec | SparseTensorSpec


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
    or an array of them) a :class:`NoneTensorSpec` or :class:`DatasetSpec`; ragged and
    sparse values give their own (:class:`RaggedTensorSpec`, :class:`SparseTensorSpec`).

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
    if type(value) in _LEAF_TYPES and hasattr(value, "_leaf_spec"):
        return value._leaf_spec()  # RaggedValues, SparseValues: their composite specs
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
    if isinstance(spec, RaggedTensorSpec):  # the rows gain a ragged level (tf.data)
        return RaggedTensorSpec((batch_dim, *spec.shape), spec.dtype, spec.ragged_rank + 1)
    if isinstance(spec, SparseTensorSpec):
        return SparseTensorSpec((batch_dim, *spec.shape), spec.dtype)
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
        elif isinstance(leaf, RaggedTensorSpec) and leaf.ragged_rank > 1:
            out.append(RaggedTensorSpec(leaf.shape[1:], leaf.dtype, leaf.ragged_rank - 1))
        elif isinstance(leaf, SparseTensorSpec):
            out.append(SparseTensorSpec(leaf.shape[1:], leaf.dtype))
        else:  # a ragged level of one: its rows are arrays
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


def elements_equal(a: Any, b: Any) -> bool:
    """Whether two elements have the same structure, leaf dtypes kinds, shapes and values.

    NaNs compare equal to NaNs.

    Example:
        >>> elements_equal((np.arange(3), b"x"), (np.arange(3), b"x"))
        True
    """
    if not same_structure(a, b):
        return False
    for x, y in zip(flatten(a), flatten(b)):
        if is_registered_leaf(x) or is_registered_leaf(y):  # RaggedValues: its own equality
            if type(x) is not type(y) or x != y:
                return False
            continue
        if isinstance(x, bytes | str) or isinstance(y, bytes | str):
            if x != y:
                return False
            continue
        x_array, y_array = np.asarray(x), np.asarray(y)
        if x_array.shape != y_array.shape:
            return False
        if x_array.dtype == object or y_array.dtype == object:
            if x_array.tolist() != y_array.tolist():
                return False
        elif x_array.dtype != y_array.dtype or not np.array_equal(x_array, y_array,
                                                                   equal_nan=x_array.dtype.kind == "f"):
            return False
    return True
