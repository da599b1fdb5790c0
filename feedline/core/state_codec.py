"""Encode elements inside iterator states as JSON-safe values, and decode them safely.

Most states are a few integers. A few iterators must remember elements they hold
(a shuffle buffer, in-flight inputs of a parallel map, a prefetch buffer); they encode
them here: arrays as base64 ``.npy`` bytes (no pickle), ``bytes`` as base64, nested
tuples, namedtuples and dicts kept as tagged lists.

States and cache files are data that travel between machines and users, so decoding never
imports, looks up or calls anything the data names. It builds only:

* namedtuple classes the pipeline itself declares (:class:`~feedline.core.fingerprint.
  DeclaredTypes`, given to :func:`decode` or installed with :func:`declared_types_in_use`);
* classes registered in code with :func:`register_state_type`, which store their instances
  with ``__feedline_encode__(self)`` (a JSON-safe value) and the classmethod
  ``__feedline_decode__(value)``.

Anything else in a state is a :class:`~feedline.core.errors.CheckpointError`.
"""

from __future__ import annotations

import base64
import binascii
import contextlib
import contextvars
import io
import itertools
from collections.abc import Callable, Iterator, Sequence
from typing import Any, TypeVar

import numpy as np

from feedline.core.errors import CheckpointError
from feedline.core.fingerprint import DeclaredTypes

_T = TypeVar("_T", bound=type)

_RAW_KINDS = frozenset("biufcmMSUV")
"""Array kinds stored as raw bytes with their dtype string (structured ones go through .npy)."""

_REGISTERED: dict[str, type] = {}
_DECLARED: contextvars.ContextVar[DeclaredTypes | None] = contextvars.ContextVar(
    "feedline_declared_types", default=None)


def _qualified_name(cls: type) -> str:
    return f"{cls.__module__}:{cls.__qualname__}"


def register_state_type(cls: _T) -> _T:
    """Class decorator: instances of ``cls`` may appear in states (decoded by its
    ``__feedline_decode__``). Registration happens in code, never from a state.

    Example:
        >>> @register_state_type
        ... class Pair:
        ...     def __init__(self, a, b): self.a, self.b = a, b
        ...     def __feedline_encode__(self): return [self.a, self.b]
        ...     @classmethod
        ...     def __feedline_decode__(cls, value): return cls(*value)
        >>> decode(encode(Pair(1, 2))).b
        2
    """
    if not (hasattr(cls, "__feedline_encode__") and hasattr(cls, "__feedline_decode__")):
        raise TypeError(f"{cls.__qualname__} needs __feedline_encode__ and __feedline_decode__")
    _REGISTERED[_qualified_name(cls)] = cls
    return cls


@contextlib.contextmanager
def declared_types_in_use(types: DeclaredTypes) -> Iterator[None]:
    """Within the block, :func:`decode` may build the namedtuple classes in ``types``."""
    token = _DECLARED.set(types)
    try:
        yield
    finally:
        _DECLARED.reset(token)


def encode(element: Any) -> Any:
    """A JSON-safe value that :func:`decode` turns back into ``element``.

    Example:
        >>> decode(encode((np.arange(3), b"ab", {"k": 1.5})))
        (array([0, 1, 2]), b'ab', {'k': 1.5})
    """
    # One dict lookup on the element's exact type: a shuffle buffer encodes thousands of
    # elements per state (and read-ahead stages take states often).
    encoder = _ENCODERS.get(type(element))
    if encoder is None:
        encoder = _encoder_for(type(element))
    return encoder(element)


def encode_elements(elements: Sequence[Any]) -> Any:
    """Encode a buffer of elements (a shuffle buffer, say): :func:`decode` gives the list back.

    A buffer of ``bytes`` only (serialized records) is stored as one base64 payload and the
    lengths, not one tagged value per element: encoding, the state's checksum (canonical
    JSON) and :func:`~feedline.core.state_file.save_state` (which writes the payload raw)
    then cost about half as much. Any other buffer is ``encode(list(elements))``.

    Example:
        >>> encode_elements([b"ab", b"", b"c"])
        {'bl': 'YWJj', 'n': [2, 0, 1]}
        >>> decode(encode_elements([b"ab", b"", b"c"])), decode(encode_elements([1, b"x"]))
        ([b'ab', b'', b'c'], [1, b'x'])
    """
    if elements and set(map(type, elements)) == {bytes}:
        return {"bl": _b64(b"".join(elements)), "n": list(map(len, elements))}
    return _encode_list(list(elements))


def _b64(data: Any) -> str:
    return binascii.b2a_base64(data, newline=False).decode("ascii")


def _encode_plain(element: Any) -> Any:
    return element


def _encode_str(element: str) -> Any:
    return {"u": element}


def _encode_bytes(element: bytes) -> Any:
    return {"b": _b64(element)}


def _encode_tuple(element: tuple[Any, ...]) -> Any:
    return {"t": [encode(x) for x in element]}


def _encode_namedtuple(element: tuple[Any, ...]) -> Any:
    cls = type(element)
    return {"nt": _qualified_name(cls), "f": list(cls._fields),  # type: ignore[attr-defined]
            "v": [encode(x) for x in element]}


def _encode_dict(element: dict[Any, Any]) -> Any:
    return {"d": [[encode(k), encode(v)] for k, v in element.items()]}


def _encode_list(element: list[Any]) -> Any:
    return {"l": [encode(x) for x in element]}


def _encode_scalar(element: np.generic) -> Any:
    if element.dtype.kind in "biuf":
        return {"n": element.dtype.str, "v": element.item()}
    return _encode_array(element)


def _encode_array(element: np.ndarray | np.generic) -> Any:
    array = np.asarray(element)
    if array.dtype == object:
        return {"oa": list(array.shape), "v": [encode(x) for x in array.ravel().tolist()],
                "s": isinstance(element, np.generic)}
    if array.dtype.fields is None and array.dtype.kind in _RAW_KINDS:
        # Raw bytes plus dtype and shape: no .npy header (128 bytes) per element, and
        # save_state() stores the bytes unencoded. Viewed as bytes, not copied (tobytes).
        raw = np.ascontiguousarray(array).reshape(-1).view(np.uint8)
        return {"A": array.dtype.str, "sh": list(array.shape), "raw": _b64(raw),
                "s": isinstance(element, np.generic)}
    buffer = io.BytesIO()
    np.save(buffer, array, allow_pickle=False)
    return {"a": _b64(buffer.getbuffer()), "s": isinstance(element, np.generic)}


def _encode_registered(element: Any) -> Any:
    # Values that know how to store themselves, e.g. the small datasets window() yields.
    return {"o": _qualified_name(type(element)), "v": element.__feedline_encode__()}


def _encoder_for(cls: type) -> Callable[[Any], Any]:
    """The encoder of instances of ``cls`` (remembered: the choice depends on the type only)."""
    encoder: Callable[[Any], Any]
    if issubclass(cls, tuple):
        encoder = _encode_namedtuple if hasattr(cls, "_fields") else _encode_tuple
    elif issubclass(cls, dict):
        encoder = _encode_dict
    elif issubclass(cls, list):
        encoder = _encode_list
    elif issubclass(cls, bytes):
        encoder = _encode_bytes
    elif issubclass(cls, np.generic):
        encoder = _encode_scalar
    elif issubclass(cls, np.ndarray):
        encoder = _encode_array
    elif issubclass(cls, str):
        encoder = _encode_str
    elif cls is type(None) or issubclass(cls, bool | int | float):
        encoder = _encode_plain
    elif _qualified_name(cls) in _REGISTERED:
        return _encode_registered  # not remembered: registration is by name
    else:
        raise CheckpointError(f"cannot store a {cls.__name__} in an iterator state")
    _ENCODERS[cls] = encoder
    return encoder


_ENCODERS: dict[type, Callable[[Any], Any]] = {}
"""Encoder of each exact type met so far."""


def decode(value: Any, types: DeclaredTypes | None = None) -> Any:
    """Inverse of :func:`encode`; a malformed or hostile value is a ``CheckpointError``.

    Args:
        value: What :func:`encode` returned (possibly after a JSON round trip).
        types: The namedtuple classes that may be built; default: those installed with
            :func:`declared_types_in_use`, else none.

    Example:
        >>> decode({"nt": "os:system", "f": ["command"], "v": [{"u": "echo hi"}]})
        Traceback (most recent call last):
        ...
        feedline.core.errors.CheckpointError: the state holds a namedtuple 'os:system' that ...
    """
    try:
        return _decode(value, types if types is not None else _DECLARED.get() or DeclaredTypes())
    except CheckpointError:
        raise
    except (KeyError, TypeError, ValueError, IndexError, AttributeError, OverflowError,
            binascii.Error) as error:
        raise CheckpointError(f"damaged element in the state: {error!r}") from None
    except RecursionError:
        raise CheckpointError("damaged element in the state: nested deeper than the "
                              "interpreter's stack allows (not an encoded element)") from None


def _decode(value: Any, types: DeclaredTypes) -> Any:
    if not isinstance(value, dict):
        if isinstance(value, list):
            raise CheckpointError("damaged element in the state: an untagged list")
        return value
    if len(value) == 1 and "t" in value:
        return tuple(_decode(x, types) for x in value["t"])
    if "nt" in value:
        cls = types.namedtuple(str(value["nt"]), value.get("f"))
        values = [_decode(x, types) for x in value["v"]]
        if len(values) != len(cls._fields):
            raise CheckpointError(f"namedtuple {value['nt']!r} needs {len(cls._fields)} values, "
                                  f"the state has {len(values)}")
        return cls(*values)
    if "l" in value:
        return [_decode(x, types) for x in value["l"]]
    if "d" in value:
        return {_hashable(_decode(k, types)): _decode(v, types) for k, v in value["d"]}
    if "b" in value:
        return base64.b64decode(value["b"], validate=True)
    if "bl" in value:
        return _split(base64.b64decode(value["bl"], validate=True), value["n"])
    if "u" in value:
        if not isinstance(value["u"], str):
            raise CheckpointError("damaged element in the state: a string that is not one")
        return value["u"]
    if "n" in value:
        dtype = np.dtype(value["n"])
        if dtype.kind not in "biuf":
            raise CheckpointError(f"damaged element in the state: scalar dtype {value['n']!r}")
        return dtype.type(value["v"])
    if "A" in value:
        dtype = np.dtype(str(value["A"]))
        if dtype.kind not in _RAW_KINDS or dtype.fields is not None:
            raise CheckpointError(f"damaged element in the state: array dtype {value['A']!r}")
        shape = [int(n) for n in value["sh"]]
        array = np.frombuffer(base64.b64decode(value["raw"], validate=True), dtype=dtype)
        array = array.reshape(shape).copy()  # writable, as the element was
        return array[()] if value.get("s") else array
    if "a" in value:
        # allow_pickle=False: object arrays in .npy are pickles; they are refused here.
        array = np.load(io.BytesIO(base64.b64decode(value["a"], validate=True)),
                        allow_pickle=False)
        return array[()] if value.get("s") else array
    if "oa" in value:
        array = np.empty(len(value["v"]), dtype=object)
        for i, item in enumerate(value["v"]):
            array[i] = _decode(item, types)
        array = array.reshape([int(n) for n in value["oa"]])
        return array[()] if value.get("s") else array
    if "o" in value:
        cls = _REGISTERED.get(str(value["o"]))
        if cls is None:
            raise CheckpointError(f"{value['o']!r} is not a type feedline restores from a state")
        return cls.__feedline_decode__(value["v"])
    raise CheckpointError(f"unrecognised encoded element {sorted(value)}")


def _split(data: bytes, lengths: Any) -> list[bytes]:
    """``data`` cut into pieces of ``lengths`` (which must add up to all of it)."""
    if not isinstance(lengths, list) or not all(
            type(n) is int and n >= 0 for n in lengths) or sum(lengths) != len(data):
        raise CheckpointError(f"damaged element in the state: {len(data)} bytes do not split "
                              "into the lengths given")
    ends = list(itertools.accumulate(lengths))
    return [data[end - n:end] for n, end in zip(lengths, ends)]


def _hashable(key: Any) -> Any:
    try:
        hash(key)
    except TypeError:
        raise CheckpointError(f"damaged element in the state: unhashable dict key {key!r}") \
            from None
    return key
