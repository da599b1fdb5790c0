"""Fixed element dtypes: a stage's later elements must have its first element's dtypes.

tf.data fixes a dataset's dtypes when it builds the graph (a function is traced once), so a
map cannot yield float32 for one element and int64 for the next. feedline reads a stage's
spec from its first element instead; :class:`DtypeGuard` keeps the later elements to it, so
that a batch never silently becomes another dtype than the ``element_spec`` says.

Example:
    >>> import numpy as np
    >>> guard = DtypeGuard("map(f)")
    >>> guard.check(np.float32(1), 0)
    np.float32(1.0)
    >>> guard.check(np.int64(2), 1)
    Traceback (most recent call last):
    ...
    feedline.core.errors.StructureError: map(f): element 1 has dtype int64 where the dataset's elements have float32 (its element_spec, from element 0); a dataset's dtypes are fixed, as in tf.data: convert the value (np.float32(...), .astype(np.float32)) in the function
"""

from __future__ import annotations

from typing import Any

import numpy as np

from feedline.core.errors import StructureError
from feedline.core.structure import Element, flatten, flatten_with_paths, is_registered_leaf



def leaf_dtype(leaf: Any) -> str:
    """A leaf's dtype as :class:`DtypeGuard` compares it: a NumPy dtype's type string
    (``bytes`` are ``"|O"``), ``"None"`` for a ``None`` component, ``"Dataset"`` for a
    dataset (of any class), else the leaf's type's name. Strings, not dtypes: ``np.dtype("float64") == None`` is true, and
    ``dtype.str`` is read in C where ``dtype.name`` runs Python.

    Example:
        >>> leaf_dtype(np.zeros(2, np.uint8)), leaf_dtype(b"x"), leaf_dtype(None)
        ('|u1', '|O', 'None')
    """
    if isinstance(leaf, np.ndarray | np.generic):
        return leaf.dtype.str
    if leaf is None:
        return "None"
    if isinstance(leaf, bytes):
        return "|O"
    if isinstance(leaf, complex):
        return _COMPLEX
    from feedline.core.dataset import Dataset  # here: dataset.py imports structure, as this

    if isinstance(leaf, Dataset):
        # Of any class (tf.data's DatasetSpec, whatever built it; range's has a dtype).
        return "Dataset"
    dtype = getattr(leaf, "dtype", None)  # RaggedValues, SparseValues: their values'
    if isinstance(dtype, np.dtype):
        return dtype.str
    return type(leaf).__qualname__


_COMPLEX = np.dtype(np.complex128).str


def _name(key: str) -> str:
    """A :func:`leaf_dtype` key as errors show it (``"float32"``, ``"object"``)."""
    try:
        return np.dtype(key).name
    except TypeError:
        return key


class DtypeGuard:
    """Checks that every element a stage yields has the leaf dtypes of the first it yielded
    (what its ``element_spec`` reports), raising :class:`StructureError` otherwise.

    One guard belongs to one iterator of one stage. ``check`` runs for every element, so an
    element is first compared with the first one's structure by dtype identity (NumPy
    keeps one dtype object per builtin dtype), at the cost of an attribute read per leaf;
    a difference (or a leaf without a dtype, such as ``None``) takes a pass over the
    leaves, which decides. Structure changes are left to the stages that stack or compare
    elements (batch, zip), which name them already; a ``None`` component where the first
    element had a value, or the other way round, is one (tf.data's ``NoneTensorSpec`` is a
    component of its own kind, not a dtype).

    Args:
        stage: The stage's name as errors show it (``"map(parse)"``).
        dtypes: The leaf dtypes to hold to, as :func:`leaf_dtype` keys them (in
            :func:`~feedline.core.structure.flatten` order); by default the first element's.
        of: What the index given to :meth:`check` counts, as errors say it before the
            index (``"an element of the dataset made from input element"`` for flat_map).

    Example:
        >>> guard = DtypeGuard("map(f)")
        >>> [type(guard.check((np.int32(i), b"x"), i)).__name__ for i in range(2)]
        ['tuple', 'tuple']
    """

    __slots__ = ("_arrays", "_dtypes", "_first", "_of", "_stage", "_template", "_types")

    def __init__(self, stage: str, dtypes: list[str] | None = None, *,
                 of: str = "element") -> None:
        self._stage = stage
        self._of = of
        self._dtypes = dtypes
        self._first: int | None = None
        # The fast comparison (see _template_of), set from the first element that has one;
        # until then an object no leaf's dtype is.
        self._template: Any = _UNSET
        # A flat tuple's shortcut: its leaves' types, and (position, dtype) of its arrays.
        self._types: tuple[type, ...] | None = None
        self._arrays: tuple[tuple[int, np.dtype], ...] = ()

    def check(self, element: Element, index: int) -> Element:
        """Return ``element`` when its leaf dtypes are the stage's, else raise.

        Raises:
            StructureError: A leaf's dtype differs, naming the stage, the element's index,
                the leaf's position and both dtypes.
        """
        template = self._template
        kind = type(element)
        if type(template) is not tuple:  # one leaf (inlined: the common case)
            if kind is template or (kind is np.ndarray and element.dtype is template) or (
                    is_registered_leaf(element) and getattr(element, "dtype", None) is template):
                return element
        elif kind is tuple and self._types is not None:  # a flat tuple: the types at once
            if tuple(map(type, element)) == self._types:
                for position, dtype in self._arrays:
                    if element[position].dtype is not dtype:
                        break
                else:
                    return element
        elif _fits(element, template):
            return element
        return self._check(element, index)

    def _check(self, element: Element, index: int) -> Element:
        dtypes = [leaf_dtype(leaf) for leaf in flatten(element)]
        if self._dtypes is None:
            self._dtypes, self._first = dtypes, index
        elif dtypes != self._dtypes:
            if len(dtypes) == len(self._dtypes):
                self._raise(element, dtypes, index)
            return element
        if self._template is _UNSET:
            template = _template_of(element)
            if template is not None:
                self._template = template
                kind, children = template if type(template) is tuple else (None, ())
                if kind is tuple and not any(type(child) is tuple for child in children):
                    # Classes compare by identity in ``==``; an array's class is ndarray.
                    self._types = tuple(type(leaf) for leaf in element)
                    self._arrays = tuple((i, child) for i, child in enumerate(children)
                                         if isinstance(child, np.dtype))
        return element

    def _raise(self, element: Element, dtypes: list[str], index: int) -> None:
        paths = [path for path, _ in flatten_with_paths(element)]
        for path, got, want in zip(paths, dtypes, self._dtypes or []):
            if got != want and "None" not in (got, want):
                raise self.mismatch(index, path, _name(got), _name(want))

    @property
    def origin(self) -> str:
        """Where the stage's dtypes come from, as errors say it (``"its element_spec, from
        element 0"``)."""
        return ("its element_spec" if self._first is None
                else f"its element_spec, from {self._of} {self._first}")

    def mismatch(self, index: int, path: str, got: str, want: str) -> Exception:
        """The error :meth:`check` raises for element ``index``, whose leaf at ``path``
        (``"<element>"`` for the element itself) has dtype ``got`` where the stage's have
        ``want`` (dtype names). A stage whose error tf.data words otherwise overrides it.
        """
        hint = (f": convert the value (np.{want}(...), .astype(np.{want})) in the "
                "function" if want in _NUMERIC_NAMES else "")
        at = "" if path == "<element>" else f" at {path}"
        return StructureError(
            f"{self._stage}: {self._of} {index} has dtype {got}{at} where the dataset's "
            f"elements have {want} ({self.origin}); a dataset's dtypes are fixed, as in "
            f"tf.data{hint}")


_UNSET = object()


def _template_of(value: Any) -> Any:
    """What :meth:`DtypeGuard.check` compares elements shaped as ``value`` with, by
    identity: for a leaf, the type of a NumPy number or ``bytes`` (a number type has one
    dtype), or an array's dtype (NumPy keeps one object per builtin dtype), as for ragged
    and sparse values;
    ``(type, children)`` for a tuple or namedtuple, ``(dict, ((key, child), ...))`` for a
    dict. ``None`` where a leaf has no such key (``None``, a dataset, a datetime): those
    elements take the pass over the leaves."""
    if isinstance(value, tuple | dict):
        items = value.items() if isinstance(value, dict) else enumerate(value)
        children = []
        for key, item in items:
            child = _template_of(item)
            if child is None:
                return None
            children.append((key, child) if isinstance(value, dict) else child)
        return (type(value), tuple(children))
    kind = type(value)
    if kind is np.ndarray or (is_registered_leaf(value)
                              and isinstance(getattr(value, "dtype", None), np.dtype)):
        return value.dtype  # RaggedValues, SparseValues: their values' dtype, as leaf_dtype
    if kind is bytes or (isinstance(value, np.generic) and value.dtype.kind in "biufc"):
        return kind
    return None


def _fits(value: Any, template: Any) -> bool:
    """Whether ``value`` has the structure and leaf dtypes ``template`` (of
    :func:`_template_of`) describes. ``False`` says only "not surely": the pass over the
    leaves decides. Leaves are compared here, not in a call each (a call costs what the
    comparison does)."""
    if type(template) is not tuple:
        kind = type(value)
        return kind is template or (kind is np.ndarray or is_registered_leaf(value)) and \
            getattr(value, "dtype", None) is template
    kind, children = template
    if type(value) is not kind or len(value) != len(children):
        return False
    pairs = (((value.get(key), child) for key, child in children) if kind is dict
             else zip(value, children))
    for item, child in pairs:
        leaf = type(item)
        if leaf is child or (leaf is np.ndarray and item.dtype is child):
            continue
        if type(child) is not tuple and is_registered_leaf(item) and getattr(item, "dtype", None) is child:
            continue
        if type(child) is not tuple or not _fits(item, child):
            return False
    return True


_NUMERIC_NAMES = frozenset(np.dtype(t).name for t in np.sctypeDict.values()
                           if issubclass(t, np.number | np.bool_))
