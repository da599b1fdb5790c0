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
    feedline.core.errors.StructureError: map(f): element 1 has dtype int64 at <element> where the dataset's elements have float32 (element 0's, its element_spec); a dataset's dtypes are fixed, as in tf.data: convert the value (np.float32(...), .astype(np.float32)) in the function
"""

from __future__ import annotations

from typing import Any

import numpy as np

from feedline.core.errors import StructureError
from feedline.core.structure import Element, flatten, flatten_with_paths



def leaf_dtype(leaf: Any) -> str:
    """A leaf's dtype as :class:`DtypeGuard` compares it: a NumPy dtype's type string
    (``bytes`` are ``"|O"``), ``"None"`` for a ``None`` component, else the leaf's type's
    name (a dataset). Strings, not dtypes: ``np.dtype("float64") == None`` is true, and
    ``dtype.str`` is read in C where ``dtype.name`` runs Python.

    Example:
        >>> leaf_dtype(np.zeros(2, np.uint8)), leaf_dtype(b"x"), leaf_dtype(None)
        ('|u1', '|O', 'None')
    """
    dtype = getattr(leaf, "dtype", None)
    if isinstance(dtype, np.dtype):
        return dtype.str
    if leaf is None:
        return "None"
    if isinstance(leaf, bytes):
        return "|O"
    if isinstance(leaf, complex):
        return _COMPLEX
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

    One guard belongs to one iterator of one stage; ``check`` costs one pass over the leaves.
    Structure changes are left to the stages that stack or compare elements (batch, zip),
    which name them already.

    Args:
        stage: The stage's name as errors show it (``"map(parse)"``).
        dtypes: The leaf dtypes to hold to, as :func:`leaf_dtype` keys them (in
            :func:`~feedline.core.structure.flatten` order); by default the first element's.

    Example:
        >>> guard = DtypeGuard("map(f)")
        >>> [type(guard.check((np.int32(i), b"x"), i)).__name__ for i in range(2)]
        ['tuple', 'tuple']
    """

    __slots__ = ("_dtypes", "_first", "_stage")

    def __init__(self, stage: str, dtypes: list[str] | None = None) -> None:
        self._stage = stage
        self._dtypes = dtypes
        self._first: int | None = None

    def check(self, element: Element, index: int) -> Element:
        """Return ``element`` when its leaf dtypes are the stage's, else raise.

        Raises:
            StructureError: A leaf's dtype differs, naming the stage, the element's index,
                the leaf's position and both dtypes.
        """
        dtypes = [leaf_dtype(leaf) for leaf in flatten(element)]
        if self._dtypes is None:
            self._dtypes, self._first = dtypes, index
            return element
        if dtypes != self._dtypes and len(dtypes) == len(self._dtypes):
            self._raise(element, dtypes, index)
        return element

    def _raise(self, element: Element, dtypes: list[str], index: int) -> None:
        paths = [path for path, _ in flatten_with_paths(element)]
        for path, got, want in zip(paths, dtypes, self._dtypes or []):
            if got != want:
                origin = (f"element {self._first}'s, its element_spec"
                          if self._first is not None else "its element_spec")
                got, want = _name(got), _name(want)
                hint = (f": convert the value (np.{want}(...), .astype(np.{want})) in the "
                        "function" if want in _NUMERIC_NAMES else "")
                raise StructureError(
                    f"{self._stage}: element {index} has dtype {got} at {path} where the "
                    f"dataset's elements have {want} ({origin}); a dataset's dtypes are "
                    f"fixed, as in tf.data{hint}")


_NUMERIC_NAMES = frozenset(np.dtype(t).name for t in np.sctypeDict.values()
                           if issubclass(t, np.number | np.bool_))
