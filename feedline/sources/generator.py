"""``Dataset.from_generator``: elements from a Python generator, called anew for every epoch."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Sequence
from typing import Any

import numpy as np

from feedline.core.constants import UNKNOWN
from feedline.core.dataset import Dataset
from feedline.core.element_dtypes import DtypeGuard
from feedline.core.errors import CheckpointError, StructureError
from feedline.core.functions import annotate_error, function_name
from feedline.core.iterator import DatasetIterator, IteratorContext, State
from feedline.core.registry import operation
from feedline.core.structure import (
    Element,
    TensorSpec,
    describe,
    flatten,
    flatten_with_paths,
    is_nest,
    pack_as,
    to_leaf_array,
)
from feedline.core.traits import SOURCE
from feedline.core.unary import require_callable
from feedline.core.validation import validate_int

_STRING_KINDS = "OSU"


def normalize_signature(signature: Element) -> Element:
    """Check that every leaf of ``signature`` is a :class:`TensorSpec`; return it with shapes as
    tuples and dtypes as ``np.dtype`` (string dtypes become ``object``, feedline's bytes dtype).
    """
    specs = []
    for path, spec in flatten_with_paths(signature):
        if not isinstance(spec, TensorSpec):
            raise TypeError(f"from_generator(output_signature): leaf {path} must be a "
                            f"feedline.TensorSpec, got {type(spec).__name__}")
        dtype = np.dtype(spec.dtype)
        if dtype.kind in _STRING_KINDS:
            dtype = np.dtype(object)
        if spec.shape is None or isinstance(spec.shape, str | bytes):
            raise TypeError(f"from_generator(output_signature): leaf {path} needs a shape "
                            f"tuple such as (None, 3), got {spec.shape!r} (feedline specs "
                            "always have a known rank)")
        shape = tuple(None if d is None else
                      validate_int(d, f"from_generator(output_signature) leaf {path} shape",
                                   minimum=0)
                      for d in spec.shape)
        specs.append(TensorSpec(shape, dtype))
    return pack_as(signature, specs)


def _as_leaf(value: Any) -> Any:
    """A yielded leaf as feedline stores it: 0-d values as NumPy scalars (or ``bytes``)."""
    array = to_leaf_array(value)
    return array[()] if array.ndim == 0 else array


def _conform_leaf(value: Any, spec: TensorSpec, index: int, path: str) -> Any:
    """Convert one yielded leaf to ``spec`` or raise a :class:`StructureError` saying why.

    Values take the spec's dtype when that is a same-kind conversion (``1`` fits ``float32``
    and ``uint8``, ``float64`` arrays fit ``float32``, ``1.5`` does not fit ``int32``), as
    ``tf.convert_to_tensor`` converts them; an integer that does not fit (``300`` for
    ``uint8``) is refused rather than wrapped.
    """
    where = f"from_generator(): element {index}, leaf {path}"
    if value is None:
        raise StructureError(f"{where}: got None, expected {spec}")
    if spec.dtype.kind in _STRING_KINDS:
        array = to_leaf_array(value)
        if array.dtype.kind not in _STRING_KINDS:
            raise StructureError(f"{where}: expected bytes/str ({spec}), got {array.dtype} "
                                 f"value {value!r}")
        if array.dtype.kind != "O":
            array = array.astype(object)
    else:
        try:
            natural = np.asarray(value)
        except (TypeError, ValueError) as error:
            raise StructureError(f"{where}: cannot convert {value!r} to an array: {error}") \
                from error
        integers = natural.dtype.kind in "iu" and spec.dtype.kind in "iu"
        if natural.dtype.kind in _STRING_KINDS or not (
                integers or np.can_cast(natural.dtype, spec.dtype, casting="same_kind")):
            raise StructureError(f"{where}: expected dtype {spec.dtype.name} ({spec}), got "
                                 f"{natural.dtype.name} value {value!r}")
        array = natural
        if natural.dtype != spec.dtype:
            array = natural.astype(spec.dtype)
            if integers and not np.can_cast(natural.dtype, spec.dtype) \
                    and not np.array_equal(array, natural):
                raise StructureError(f"{where}: {value!r} does not fit {spec.dtype.name}")
    if array.ndim != len(spec.shape) or any(
            d is not None and d != s for d, s in zip(spec.shape, array.shape)):
        raise StructureError(f"{where}: expected shape {spec.shape} ({spec}), got shape "
                             f"{array.shape}")
    return array[()] if array.ndim == 0 else array


def normalize_element(value: Any, signature: Element, index: int,
                      dtypes: Element = None) -> Element:
    """Turn a yielded value into an element, checked against ``signature`` when given (or
    converted to ``dtypes``, the older ``output_types`` without shapes)."""
    if signature is None and dtypes is None:
        leaves = flatten(value)
        for path, leaf in flatten_with_paths(value):
            if leaf is None:
                raise StructureError(f"from_generator(): element {index}, leaf {path} is None")
        return pack_as(value, [_as_leaf(leaf) for leaf in leaves])
    structure = signature if signature is not None else dtypes
    # As tf.data: the value is taken apart down to the signature's leaves only, so a tuple
    # or list where the signature has one spec is that spec's value ((1,) for shape (1,)).
    parts = _flatten_up_to(structure, value)
    if parts is None:
        raise StructureError(
            f"from_generator(): element {index} does not match output_signature: expected "
            f"{describe(structure)}, got {describe(value)}")
    leaves = []
    for (path, spec), leaf in zip(flatten_with_paths(structure), parts):
        if signature is None:  # a dtype only: any shape
            spec = TensorSpec(tuple(np.shape(leaf)), spec)
        leaves.append(_conform_leaf(leaf, spec, index, path))
    return pack_as(structure, leaves)


def _flatten_up_to(structure: Element, value: Any) -> list[Any] | None:
    """``value``'s parts at the leaves of ``structure`` (``None`` if the nests differ)."""
    if not is_nest(structure):
        return [value]
    if isinstance(structure, dict):
        if not isinstance(value, dict) or set(value) != set(structure):
            return None
        parts = [_flatten_up_to(structure[k], value[k]) for k in sorted(structure)]
    else:
        if not isinstance(value, tuple) or len(value) != len(structure):
            return None  # a list is one tensor's value in tf.data, never a tuple's parts
        parts = [_flatten_up_to(s, v) for s, v in zip(structure, value)]
    if any(p is None for p in parts):
        return None
    return [leaf for part in parts for leaf in part]


def signature_from_types(output_types: Element, output_shapes: Element) -> Element:
    """The ``output_signature`` that tf.data's older ``output_types`` and ``output_shapes``
    describe (shapes ``None``: the dtypes alone, returned as they are).

    Example:
        >>> signature_from_types((np.int64, "float32"), ((), (2,)))
        (TensorSpec(shape=(), dtype=int64), TensorSpec(shape=(2,), dtype=float32))
    """
    if output_shapes is None:
        return None
    types = flatten(output_types)
    shapes = _flatten_up_to(output_types, output_shapes) if is_nest(output_types) \
        else [output_shapes]
    if shapes is None or len(shapes) != len(types):
        raise TypeError(f"from_generator(): output_shapes {output_shapes!r} does not match the "
                        f"structure of output_types {output_types!r}")
    return pack_as(output_types, [
        TensorSpec(tuple(shape) if shape is not None else (), np.dtype(dtype))
        for dtype, shape in zip(types, shapes)])


class YieldedDtypeGuard(DtypeGuard):
    """Keeps a ``from_generator`` without ``output_signature`` (or ``output_types``) to the
    dtypes of its first element, which its ``element_spec`` reports.

    tf.data's generator always has fixed dtypes (``output_signature``, or the deprecated
    ``output_types``), and a yielded value of another type is its ``InvalidArgumentError``
    "TypeError: `generator` yielded an element of type ... where an element of type ...
    was expected."; feedline words its :class:`~feedline.StructureError` (an
    ``InvalidArgumentError``) the same way, naming the element and the component.

    Example:
        >>> guard = YieldedDtypeGuard("from_generator(gen)")
        >>> guard.check(np.float32(1), 0)
        np.float32(1.0)
        >>> guard.check(np.int64(2), 1)
        Traceback (most recent call last):
        ...
        feedline.core.errors.StructureError: from_generator(gen): element 1: TypeError: `generator` yielded an element of type int64 where an element of type float32 was expected (its element_spec, from element 0); a dataset's dtypes are fixed, as in tf.data (without output_signature, by the first element): yield np.float32(...) values (.astype(np.float32)), or give output_signature, which converts them
    """

    __slots__ = ()

    def mismatch(self, index: int, path: str, got: str, want: str) -> Exception:
        at = "" if path == "<element>" else f", component {path}"
        hint = (f": yield np.{want}(...) values (.astype(np.{want})), or give "
                "output_signature, which converts them" if _is_numeric(want)
                else ": yield values of one type")
        return StructureError(
            f"{self._stage}: element {index}{at}: TypeError: `generator` yielded an element "
            f"of type {got} where an element of type {want} was expected ({self.origin}); "
            "a dataset's dtypes are fixed, as in tf.data (without output_signature, by the "
            f"first element){hint}")


def _is_numeric(name: str) -> bool:
    """Whether ``name`` (a dtype's as errors show it, or a type's) names a numeric dtype."""
    try:
        return np.dtype(name).kind in "biufc"
    except TypeError:
        return False


def _convert_arg(arg: Any) -> Any:
    """Pass ``args`` the way tf.data does: as NumPy values, ``str`` as UTF-8 ``bytes``."""
    if isinstance(arg, str):
        return arg.encode("utf-8")
    if isinstance(arg, bool | int | float | complex):
        return np.asarray(arg)[()]
    if isinstance(arg, list | tuple):
        items = [a.encode("utf-8") if isinstance(a, str) else a for a in arg]
        return to_leaf_array(items)
    return arg


@operation("from_generator")
class GeneratorDataset(Dataset):
    """The node of ``Dataset.from_generator(generator, output_signature, args, restorable)``.

    ``generator(*args)`` is called for every new iterator (so once per epoch under ``repeat``)
    and must return an iterable. ``args`` are passed as NumPy values, ``str`` as UTF-8 bytes,
    as tf.data passes them. Yielded values become elements: Python scalars and lists become
    NumPy values, tuples and dicts stay nests. With ``output_signature`` (a nest of
    :class:`~feedline.TensorSpec`), every element is checked and converted to it, and a
    mismatch raises :class:`~feedline.StructureError` naming the element index and the leaf.

    Checkpoints store how many values were taken from the generator (a value whose
    production raised counts too). Restoring calls ``generator(*args)`` again and skips that
    many values, so the generator must yield the same values every time it is called;
    exceptions it raises while being replayed are not raised again (they were reported when
    first met). With ``restorable=False`` restoring raises :class:`~feedline.CheckpointError`
    instead of silently starting over.

    Example:
        >>> import feedline as fl
        >>> def gen():
        ...     yield 1, b"a"
        ...     yield 2, b"b"
        >>> ds = fl.Dataset.from_generator(
        ...     gen, output_signature=(fl.TensorSpec((), np.int32), fl.TensorSpec((), bytes)))
        >>> [(int(i), s) for i, s in ds]
        [(1, b'a'), (2, b'b')]
        >>> ds.element_spec
        (TensorSpec(shape=(), dtype=int32), TensorSpec(shape=(), dtype=object))
    """

    TRAITS = SOURCE

    def __init__(self, generator: Callable[..., Iterable[Any]], output_signature: Element = None,
                 args: Sequence[Any] = (), restorable: bool = True,
                 output_types: Element = None, output_shapes: Element = None) -> None:
        super().__init__()
        if output_signature is not None and (output_types is not None
                                             or output_shapes is not None):
            raise TypeError("from_generator(): give output_signature, or the older "
                            "output_types (with output_shapes), not both")
        if output_shapes is not None and output_types is None:
            raise TypeError("from_generator(): output_shapes needs output_types")
        if output_types is not None:
            output_signature = signature_from_types(output_types, output_shapes)
        # Without shapes, the older form gives the dtypes only (tf.data: unknown shapes).
        self.output_dtypes = None if output_types is None or output_signature is not None \
            else pack_as(output_types, [np.dtype(object) if np.dtype(t).kind in _STRING_KINDS
                                        else np.dtype(t) for t in flatten(output_types)])
        require_callable(generator, "from_generator()", "generator",
                         " returning an iterable (pass the generator function, not a "
                         "generator object)")
        if args is None:
            args = ()
        if not isinstance(args, Sequence) or isinstance(args, str | bytes):
            raise TypeError(f"from_generator(args) must be a tuple or list, got {args!r}")
        self.generator = generator
        self.output_signature = (None if output_signature is None
                                 else normalize_signature(output_signature))
        self.args = tuple(_convert_arg(a) for a in args)
        self.restorable = bool(restorable)
        self.name = f"from_generator({function_name(generator)})"

    def _element_spec(self) -> Element | None:
        return self.output_signature

    def cardinality(self) -> int:
        return UNKNOWN

    def _make_iterator(self, ctx: IteratorContext) -> DatasetIterator:
        return GeneratorIterator(ctx, self)


def _close(iterator: Iterator[Any]) -> None:
    """Close a generator now: its ``finally`` blocks run here, not at garbage collection.

    Not while another thread runs it, which makes closing impossible ("generator already
    executing": a read-ahead thread abandoned inside a ``next()`` that blocks, when the
    pipeline is closed): that thread closes it when its call returns
    (``GeneratorIterator.__next__``).
    """
    close = getattr(iterator, "close", None)
    if close is None or getattr(iterator, "gi_running", False):
        return
    try:
        close()
    except ValueError:
        if not getattr(iterator, "gi_running", False):
            raise  # not that race: the generator's own error


class GeneratorIterator(DatasetIterator):
    """Calls the generator on first use; state is the number of values taken from it.

    Closing it closes the generator, at once or, when another thread is inside the
    generator's ``next()`` (a read-ahead thread of a closed pipeline, blocked), as soon as
    that call returns: quietly, never "generator already executing".
    """

    def __init__(self, ctx: IteratorContext, node: GeneratorDataset) -> None:
        super().__init__(ctx)
        self._node = node
        self._iterator: Iterator[Any] | None = None
        self._taken = 0
        self._exhausted = False
        # Without a signature or output types, the first element's dtypes are the spec's.
        self._dtypes = (YieldedDtypeGuard(node.name) if node.output_signature is None
                        and node.output_dtypes is None else None)

    def _start(self) -> Iterator[Any]:
        node = self._node
        try:
            iterable = node.generator(*node.args)
        except Exception as error:  # noqa: BLE001 - re-raised with a note naming the stage
            raise annotate_error(error, node.name)
        try:
            self._iterator = iter(iterable)
        except TypeError as error:
            raise TypeError(f"{node.name}: the generator returned a "
                            f"{type(iterable).__name__}, which is not iterable") from error
        return self._iterator

    def __next__(self) -> Any:
        if self._exhausted or self._closed:
            raise StopIteration
        iterator = self._iterator if self._iterator is not None else self._start()
        index = self._taken
        try:
            value = next(iterator)
        except StopIteration:
            self._exhausted = True
            self._stop_generator()
            raise
        except Exception as error:  # noqa: BLE001 - re-raised with a note naming the stage
            self._taken += 1
            raise annotate_error(error, self._node.name, index)
        finally:
            if self._iterator is not iterator and not self._exhausted:
                # Closed from another thread while this call was inside the generator,
                # which could not be closed then (that thread let go of it before looking):
                # it is closed now, here.
                _close(iterator)
        self._taken += 1
        element = normalize_element(value, self._node.output_signature, index,
                                    self._node.output_dtypes)
        return element if self._dtypes is None else self._dtypes.check(element, index)

    def _get_state(self) -> State:
        return {"taken": self._taken, "exhausted": self._exhausted}

    def _set_state(self, state: State) -> None:
        node = self._node
        if not node.restorable:
            raise CheckpointError(
                f"{node.name} was created with restorable=False, so its iterator cannot be "
                "restored: that would mean re-running the generator and skipping the "
                f"{state.get('taken')} values already taken. Pass restorable=True if "
                "generator(*args) yields the same values every time it is called.")
        taken, exhausted = state["taken"], state["exhausted"]
        if not isinstance(taken, int) or taken < 0:
            raise CheckpointError(f"{node.name}: invalid position {taken!r} in saved state")
        self._stop_generator()
        self._taken = 0
        self._exhausted = bool(exhausted)
        if self._exhausted:
            self._taken = taken
            return
        if taken == 0:
            return
        iterator = self._start()
        while self._taken < taken:
            try:
                next(iterator)
            except StopIteration:
                self._stop_generator()
                raise CheckpointError(
                    f"{node.name}: the generator ended after {self._taken} values while "
                    f"being replayed to restore position {taken}; it must yield the same "
                    "values every time it is called (or pass restorable=False)") from None
            except Exception:  # noqa: BLE001, S110 - reported when the value was first taken
                pass
            self._taken += 1

    def _stop_generator(self) -> None:
        # Let go of it first: a thread inside it now sees that when its call returns.
        iterator, self._iterator = self._iterator, None
        if iterator is not None:
            _close(iterator)

    def _release(self) -> None:
        self._stop_generator()
