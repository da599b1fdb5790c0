"""Stable fingerprints of a pipeline, and the element types the pipeline declares.

A checkpoint or a cache file is only valid for the pipeline that wrote it. A
:class:`PipelineFingerprint` describes a dataset graph stage by stage (operation, arguments,
file names, functions by their code, constants and closures) so that loading into another
pipeline fails naming the first stage that differs. It is stable across runs and processes:
nothing in it depends on object ids, memory addresses or ``PYTHONHASHSEED``. Functions are
described by their bytecode, and so are the functions they call through their globals (up to
a depth of 12), so a fingerprint may change with the Python version. Functions of installed
libraries (feedline's own, the standard library's, anything in site-packages) count by their
qualified name only: a library's release or an internal refactor (``parse_example`` moved
when ``formats/example.py`` became a package) must not invalidate every checkpoint of the
pipelines that call it, while a change to your own code does.

Execution settings are left out on purpose (``num_parallel_calls``, ``deterministic``, the
executor, stage names, options, ``prefetch`` stages): tuning them between runs must not
invalidate a checkpoint, since they do not change which elements come out (for a
``deterministic`` pipeline).

The same walk collects the namedtuple classes that the pipeline itself names (in its
arguments, element specs and functions). Decoding a state may build only those
(:mod:`feedline.core.state_codec`): data from a file must never choose what code runs.
"""

from __future__ import annotations

import functools
import hashlib
import json
import os
import sysconfig
import types
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import numpy as np

from feedline.core.errors import CheckpointError
from feedline.core.stage_names import stage_name

if TYPE_CHECKING:
    from feedline.core.dataset import Dataset

EXECUTION_ARGUMENTS = frozenset({
    "num_parallel_calls", "deterministic", "executor", "name", "_cached_spec", "_own_options",
    "_inputs",
})
"""Node attributes that never enter a fingerprint: execution settings and graph plumbing.
A node class adds its own with a ``_NOT_FINGERPRINTED`` class attribute."""

_MAX_DEPTH = 12
"""How deep the walk follows objects referenced by functions (globals of globals ...)."""

_SHORT = 60
"""Longest argument text shown in a stage's readable description."""


_LIBRARY_DIRECTORIES = tuple(sorted({
    os.path.join(os.path.realpath(path), "")
    for key in ("stdlib", "platstdlib", "purelib", "platlib")
    if (path := sysconfig.get_paths().get(key))}))


def _is_library_function(fn: types.FunctionType) -> bool:
    """Whether ``fn`` belongs to feedline or to an installed library rather than to the user."""
    module = fn.__module__ or ""
    if module == "feedline" or module.startswith("feedline."):
        return True
    filename = fn.__code__.co_filename
    return bool(filename) and os.path.realpath(filename).startswith(_LIBRARY_DIRECTORIES)


_JSON = json.JSONEncoder().encode
"""``json.dumps`` with its default arguments, without building an encoder per call."""
_SORTED_JSON = json.JSONEncoder(sort_keys=True).encode
"""``json.dumps(value, sort_keys=True)``, likewise."""


def canonical_json(value: Any) -> str:
    """The JSON text that checksums cover: sorted keys, no spaces, NaN allowed.

    Example:
        >>> canonical_json({"b": [1, 2.5], "a": None})
        '{"a":null,"b":[1,2.5]}'
    """
    return _CANONICAL(value)


_CANONICAL = json.JSONEncoder(sort_keys=True, separators=(",", ":"), allow_nan=True).encode


def _digest(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8", "surrogatepass")).hexdigest()


def _qualified_name(obj: Any) -> str:
    return f"{getattr(obj, '__module__', None) or '?'}:{getattr(obj, '__qualname__', None) or type(obj).__qualname__}"


def is_namedtuple_class(value: object) -> bool:
    """Whether ``value`` is a namedtuple class (a tuple subclass with ``_fields``).

    Example:
        >>> import collections
        >>> is_namedtuple_class(collections.namedtuple("P", "x y")), is_namedtuple_class(tuple)
        (True, False)
    """
    return isinstance(value, type) and issubclass(value, tuple) and \
        isinstance(getattr(value, "_fields", None), tuple)


@dataclass
class DeclaredTypes:
    """The namedtuple classes a pipeline names, by ``module:qualname``.

    Only these may be rebuilt when a state or cache file is decoded.
    """

    namedtuples: dict[str, type] = field(default_factory=dict)

    def add(self, cls: type) -> None:
        self.namedtuples.setdefault(_qualified_name(cls), cls)

    def namedtuple(self, name: str, fields: list[str] | None) -> type:
        """The declared class called ``name`` with these ``fields``; else ``CheckpointError``."""
        cls = self.namedtuples.get(name)
        if cls is None:
            raise CheckpointError(
                f"the state holds a namedtuple {name!r} that this pipeline does not declare "
                "(feedline rebuilds only namedtuple classes named in the pipeline's own "
                "arguments, element specs or functions)")
        if fields is not None and list(cls._fields) != list(fields):
            raise CheckpointError(
                f"namedtuple {name!r} has fields {list(cls._fields)} in this pipeline, but the "
                f"state was saved with fields {list(fields)}")
        return cls


class _Walker:
    """Turns objects into canonical JSON-able descriptions, collecting namedtuple classes."""

    def __init__(self) -> None:
        self.types = DeclaredTypes()
        self._active: set[int] = set()  # objects on the current path, against cycles
        self._datasets: dict[int, str] = {}  # digests of datasets already described
        # Stage digests of nodes described outside any object (the usual case), so that
        # each node is described once however many consumers ask for its digest.
        self._stage_digests: dict[int, tuple[str, dict[str, Any]]] = {}
        # Per node: a sha256 fed with the JSON text of its graph's stage-digest list, less
        # the closing bracket, and that list's length (see _prefix).
        self._prefixes: dict[int, tuple[Any, int]] = {}
        self._keep: list[Dataset] = []  # the ids above stay those of live nodes

    def describe(self, value: Any, depth: int = 0) -> Any:
        if value is None or isinstance(value, bool | int | str):
            return value
        if isinstance(value, float):
            return repr(value)  # nan and inf are not JSON
        if isinstance(value, bytes | bytearray):
            return {"bytes": _digest(bytes(value).hex()) if len(value) > 64 else bytes(value).hex()}
        if isinstance(value, np.ndarray):
            return self._array(value, depth)
        if isinstance(value, np.generic):
            return {"scalar": value.dtype.str, "v": repr(value.item())}
        if isinstance(value, np.dtype):
            return {"dtype": value.str}
        if depth > _MAX_DEPTH or id(value) in self._active:
            return {"ref": _qualified_name(type(value))}
        if type(value) is range:
            # What the generic walk below gives, without it: every Dataset.range holds one.
            return {"object": "builtins:range", "repr": repr(value)}
        self._active.add(id(value))
        try:
            return self._compound(value, depth + 1)
        finally:
            self._active.discard(id(value))

    def _array(self, array: np.ndarray, depth: int) -> Any:
        if array.dtype == object:
            return {"objects": list(array.shape),
                    "v": [self.describe(x, depth + 1) for x in array.ravel().tolist()]}
        return {"array": array.dtype.str, "shape": list(array.shape),
                "sha256": hashlib.sha256(np.ascontiguousarray(array).tobytes()).hexdigest()}

    def _compound(self, value: Any, depth: int) -> Any:
        from feedline.core.dataset import Dataset

        if isinstance(value, Dataset):
            return {"dataset": self.dataset_digest(value)}
        if isinstance(value, tuple):
            if is_namedtuple_class(type(value)):
                self.types.add(type(value))
                return {"namedtuple": _qualified_name(type(value)),
                        "v": [self.describe(x, depth) for x in value]}
            return [self.describe(x, depth) for x in value]
        if isinstance(value, list):
            return {"list": [self.describe(x, depth) for x in value]}
        if isinstance(value, dict):
            items = [[self.describe(k, depth), self.describe(v, depth)] for k, v in value.items()]
            return {"dict": sorted(items, key=lambda kv: json.dumps(kv, sort_keys=True))}
        if isinstance(value, set | frozenset):
            return {"set": sorted((self.describe(x, depth) for x in value),
                                  key=lambda x: json.dumps(x, sort_keys=True))}
        if isinstance(value, type):
            if is_namedtuple_class(value):
                self.types.add(value)
            return {"class": _qualified_name(value)}
        if isinstance(value, types.ModuleType):
            return {"module": value.__name__}
        if isinstance(value, functools.partial):
            return {"partial": self.describe(value.func, depth),
                    "args": self.referenced(value.args, depth),
                    "keywords": self.referenced(value.keywords, depth)}
        if isinstance(value, types.MethodType):
            return {"method": self.describe(value.__func__, depth),
                    "self": self.referenced(value.__self__, depth)}
        if isinstance(value, types.FunctionType):
            return self._function(value, depth)
        if isinstance(value, types.CodeType):
            return self._code(value, depth)
        if isinstance(value, types.BuiltinFunctionType | np.ufunc):
            return {"builtin": f"{getattr(value, '__module__', None)}:{value.__name__}"}
        attributes = getattr(value, "__dict__", None)
        description: dict[str, Any] = {"object": _qualified_name(type(value))}
        call = next((klass.__dict__["__call__"] for klass in type(value).__mro__
                     if "__call__" in klass.__dict__), None)
        if isinstance(call, types.FunctionType):
            # A callable object counts by its code; its attributes are often counters or
            # caches that change as the pipeline runs.
            description["call"] = self.describe(call, depth)
        elif isinstance(attributes, dict):
            description["attributes"] = self.describe(attributes, depth)
        elif hasattr(type(value), "__slots__"):
            description["slots"] = self.describe(
                {name: getattr(value, name, None) for name in _slot_names(type(value))}, depth)
        elif type(value).__repr__ is not object.__repr__:
            # Small value types (specs, enums) have a repr that is their value.
            description["repr"] = repr(value)
        return description

    def _function(self, fn: types.FunctionType, depth: int) -> Any:
        if _is_library_function(fn):
            return {"function": f"{fn.__module__}:{fn.__qualname__}"}
        code = fn.__code__
        global_names = sorted(_global_names(code))
        referenced = {name: fn.__globals__[name] for name in global_names if name in fn.__globals__}
        closure = [cell.cell_contents if _cell_has_contents(cell) else None
                   for cell in fn.__closure__ or ()]
        return {"function": fn.__qualname__, "code": self._code(code, depth),
                "defaults": self.referenced(fn.__defaults__, depth),
                "kwdefaults": self.referenced(fn.__kwdefaults__, depth),
                "closure": [self.referenced(x, depth) for x in closure],
                "globals": {name: self.referenced(v, depth) for name, v in referenced.items()}}

    def referenced(self, value: Any, depth: int) -> Any:
        """Describe a value a function refers to (closure, global, default, bound ``self``).

        Constants (numbers, strings, arrays, tuples of them), functions, classes and datasets
        count in full. Mutable containers and other objects count by type only: functions
        often keep counters, caches or call logs in them, and a fingerprint must not change
        because the pipeline ran.
        """
        from feedline.core.dataset import Dataset

        if isinstance(value, tuple) and not is_namedtuple_class(type(value)):
            return [self.referenced(x, depth) for x in value]
        if isinstance(value, list | dict | set | bytearray) or (
                hasattr(value, "__dict__") and not isinstance(
                    value, Dataset | type | types.ModuleType | types.FunctionType
                    | types.MethodType | functools.partial | types.BuiltinFunctionType)):
            return {"mutable": _qualified_name(type(value))}
        return self.describe(value, depth)

    def _code(self, code: types.CodeType, depth: int) -> Any:
        return {"bytecode": _digest(code.co_code.hex()),
                "consts": [self._code(c, depth) if isinstance(c, types.CodeType)
                           else self.describe(c, depth) for c in code.co_consts],
                "names": list(code.co_names), "args": code.co_argcount,
                "kwonly": code.co_kwonlyargcount, "flags": code.co_flags}

    def dataset_digest(self, dataset: Dataset) -> str:
        """The digest of a whole graph: of the JSON list of its stage digests, upstream first.

        Also used for datasets referenced inside functions.
        """
        known = self._datasets.get(id(dataset))
        if known is None:
            if self._active:
                # Inside a description (a dataset a function refers to): describe afresh,
                # as the objects on the current path read as references there.
                digests = [self.stage_digest(node) for node in upstream_first(dataset)
                           if not _transparent(node)]
                known = _digest(_JSON(digests))
            else:
                prefix, _ = self._prefix(dataset)
                final = prefix.copy()
                final.update(b"]")
                known = final.hexdigest()
            self._datasets[id(dataset)] = known
        return known

    def _prefix(self, dataset: Dataset) -> tuple[Any, int]:
        """A sha256 of ``json.dumps(stage digests)`` without its final ``]``, and their count.

        A one-input node's list is its input's plus its own digest (``upstream_first`` of
        it is that of its input, then the node), so a chain extends a copy of its input's
        hash in O(1) instead of rewalking the graph above it at every stage.
        """
        known = self._prefixes.get(id(dataset))
        if known is not None:
            return known
        inputs = dataset._inputs
        base = self._prefixes.get(id(inputs[0])) if len(inputs) == 1 else None
        if not inputs:  # a source: its graph is itself (json.dumps of one hex digest)
            text = "[" if _transparent(dataset) else f'["{self.stage_digest(dataset)}"'
            known = (hashlib.sha256(text.encode("ascii")), int(text != "["))
        elif base is not None:
            if _transparent(dataset):
                known = base
            else:
                digest = self.stage_digest(dataset)
                state = base[0].copy()
                state.update((f', "{digest}"' if base[1] else f'"{digest}"').encode("ascii"))
                known = (state, base[1] + 1)
        else:
            digests = [self.stage_digest(node) for node in upstream_first(dataset)
                       if not _transparent(node)]
            known = (hashlib.sha256(_JSON(digests)[:-1].encode("ascii")), len(digests))
        self._prefixes[id(dataset)] = known
        self._keep.append(dataset)
        return known

    def stages(self, dataset: Dataset) -> list[Stage]:
        """The stages of ``dataset``'s graph, upstream first (pass-through stages left out)."""
        stages = []
        for node in upstream_first(dataset):
            if not _transparent(node):
                digest, arguments = self._stage(node)
                stages.append(Stage(None, digest, node, arguments))
        return stages

    def stage_digest(self, node: Dataset) -> str:
        """The digest (16 hex digits) of one node: its operation, arguments and inputs."""
        return self._stage(node)[0]

    def _stage(self, node: Dataset) -> tuple[str, dict[str, Any]]:
        known = self._stage_digests.get(id(node))
        if known is not None:
            return known
        top_level = not self._active
        excluded = _excluded(type(node))
        arguments = {k: v for k, v in sorted(vars(node).items()) if k not in excluded}
        described = {k: self.describe(v) for k, v in arguments.items()}
        inputs = [self.dataset_digest(child) for child in node._inputs]
        digest = _digest(_SORTED_JSON([_operation_name(type(node)), described, inputs]))[:16]
        if top_level:
            self._stage_digests[id(node)] = (digest, arguments)
            self._keep.append(node)
        return digest, arguments


@functools.cache
def _operation_name(cls: type) -> str:
    """A node class's name in stage digests: its operation's, not its module's, so a class
    moved to another module keeps its digests (:mod:`feedline.core.stage_names`)."""
    return stage_name(cls)


@functools.cache
def _excluded(cls: type) -> frozenset[str]:
    """The attributes of a node class that are not part of its fingerprint."""
    return EXECUTION_ARGUMENTS | getattr(cls, "_NOT_FINGERPRINTED", frozenset())


def _slot_names(cls: type) -> list[str]:
    names: list[str] = []
    for klass in cls.__mro__:
        slots = getattr(klass, "__slots__", ())
        names.extend([slots] if isinstance(slots, str) else slots)
    return [n for n in names if n not in ("__dict__", "__weakref__")]


def _cell_has_contents(cell: types.CellType) -> bool:
    try:
        cell.cell_contents  # noqa: B018 -- probing an empty cell raises
    except ValueError:
        return False
    return True


def _global_names(code: types.CodeType) -> Iterator[str]:
    yield from code.co_names
    for const in code.co_consts:
        if isinstance(const, types.CodeType):
            yield from _global_names(const)


def _transparent(node: Dataset) -> bool:
    """Stages that only change how the pipeline runs (prefetch, with_options)."""
    return node.traits().execution_only


def _short(value: Any) -> str:
    text = _text(value)
    return text if len(text) <= _SHORT else text[:_SHORT - 3] + "..."


def _text(value: Any) -> str:
    """``repr`` without memory addresses: functions and datasets (also nested in a
    structure, as zip's) by name."""
    if isinstance(value, types.FunctionType | functools.partial | types.MethodType):
        name = getattr(value, "__qualname__", None) or type(value).__name__
        return f"<function {name}>"
    from feedline.core.dataset import Dataset

    if isinstance(value, Dataset):
        return f"<{type(value).__name__}>"
    if type(value) is tuple:
        return f"({', '.join(_text(v) for v in value)}{',' if len(value) == 1 else ''})"
    if type(value) is list:
        return f"[{', '.join(_text(v) for v in value)}]"
    if type(value) is dict:
        return "{" + ", ".join(f"{k!r}: {_text(v)}" for k, v in value.items()) + "}"
    return repr(value)


def _readable(node: Dataset, arguments: dict[str, Any]) -> str:
    shown = ", ".join(f"{k.lstrip('_')}={_short(v)}" for k, v in arguments.items())
    return f"{type(node).__name__}({shown})"


def upstream_first(dataset: Dataset) -> list[Dataset]:
    """Every node of the graph, inputs before the nodes reading them (each node once).

    Example:
        >>> import feedline as fl
        >>> [type(n).__name__ for n in upstream_first(fl.Dataset.range(3).batch(2))]
        ['RangeDataset', 'BatchDataset']
    """
    from feedline.core.dataset import _upstream_first

    return _upstream_first(dataset)


class Stage:
    """One stage of a fingerprint.

    The readable description is built when first read (only an error message or
    :meth:`PipelineFingerprint.to_json` needs it): a pipeline of 10,000 stages would
    otherwise spend most of its fingerprinting time on ``repr`` of arguments.

    Attributes:
        description: Readable: the operation and its arguments, e.g. ``ShuffleDataset(seed=1)``.
        digest: Hex digest of the operation, its arguments and its inputs' digests.

    Example:
        >>> Stage("RangeDataset(start=0, stop=3)", "0123456789abcdef").description
        'RangeDataset(start=0, stop=3)'
    """

    __slots__ = ("_arguments", "_description", "_node", "digest")

    def __init__(self, description: str | None, digest: str, node: Dataset | None = None,
                 arguments: dict[str, Any] | None = None) -> None:
        self._description = description
        self.digest = digest
        self._node = node
        self._arguments = arguments

    @property
    def description(self) -> str:
        description = self._description
        if description is None:
            node, arguments = self._node, self._arguments
            if node is None or arguments is None:  # another thread has just built it
                return str(self._description)
            description = self._description = _readable(node, arguments)
            self._node = self._arguments = None  # the text is all that is needed now
        return description

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Stage):
            return NotImplemented
        return (self.digest, self.description) == (other.digest, other.description)

    def __hash__(self) -> int:
        return hash((self.digest, self.description))

    def __repr__(self) -> str:
        return f"Stage(description={self.description!r}, digest={self.digest!r})"

    def __reduce__(self) -> tuple[Any, ...]:
        # Pickled as text: the nodes it would describe may not pickle.
        return (Stage, (self.description, self.digest))


@dataclass(frozen=True)
class PipelineFingerprint:
    """What identifies a pipeline: its stages, upstream first, each with a digest.

    Example:
        >>> import feedline as fl
        >>> a = PipelineFingerprint.of(fl.Dataset.range(8).shuffle(4, seed=1))
        >>> b = PipelineFingerprint.of(fl.Dataset.range(8).shuffle(4, seed=2))
        >>> a == PipelineFingerprint.of(fl.Dataset.range(8).shuffle(4, seed=1))
        True
        >>> print(b.first_difference(a))
        stage 2 differs: the saved pipeline has ShuffleDataset(buffer_size=4, reshuffle_each_iteration=True, seed=1) where this one has ShuffleDataset(..., seed=2)
    """

    stages: tuple[Stage, ...]

    @property
    def digest(self) -> str:
        return self.stages[-1].digest if self.stages else ""

    @classmethod
    def of(cls, dataset: Dataset) -> PipelineFingerprint:
        """Fingerprint ``dataset``'s graph (and the options that change its elements)."""
        walker = _Walker()
        stages = walker.stages(dataset)
        seed = dataset.options().seed
        if seed is not None:
            # Options.seed seeds every unseeded random stage: part of what the pipeline is.
            digest = _digest(json.dumps([stages[-1].digest if stages else "", seed]))
            stages.append(Stage(f"Options(seed={seed})", digest[:16]))
        return cls(tuple(stages))

    def to_json(self) -> dict[str, Any]:
        return {"digest": self.digest, "stages": [[s.description, s.digest] for s in self.stages]}

    @functools.cached_property
    def canonical_json(self) -> str:
        """:meth:`to_json` as canonical JSON (sorted keys, no spaces), built once.

        Every ``state_dict()`` checksums the fingerprint: this is what it checksums.

        Example:
            >>> import feedline as fl
            >>> print(PipelineFingerprint.of(fl.Dataset.range(2)).canonical_json)
            {"digest":"...","stages":[["RangeDataset(dtype=dtype('int64'), range=range(0, 2))","..."]]}
        """
        return canonical_json(self.to_json())

    @classmethod
    def from_json(cls, value: Any) -> PipelineFingerprint:
        """Parse :meth:`to_json`'s output; a malformed value is a ``CheckpointError``."""
        try:
            stages = tuple(Stage(str(d), str(h)) for d, h in value["stages"])
        except (KeyError, TypeError, ValueError) as error:
            raise CheckpointError(f"malformed pipeline fingerprint in the state: {error!r}") \
                from None
        return cls(stages)

    def first_difference(self, saved: PipelineFingerprint) -> str | None:
        """Where ``saved`` (the checkpoint's pipeline) differs from this one, or ``None``."""
        if saved.digest == self.digest:
            return None
        for number, (theirs, ours) in enumerate(zip(saved.stages, self.stages), start=1):
            if theirs.digest != ours.digest:
                return (f"stage {number} differs: the saved pipeline has {theirs.description} "
                        f"where this one has {ours.description}")
        common = min(len(saved.stages), len(self.stages))
        longer, which = (self, "this one") if len(self.stages) > common else (saved, "the saved one")
        extra = longer.stages[common].description if len(longer.stages) > common else "?"
        return (f"the saved pipeline has {len(saved.stages)} stages, this one "
                f"{len(self.stages)}; the first stage only {which} has is {extra}")


def declared_types(dataset: Dataset) -> DeclaredTypes:
    """The namedtuple classes named anywhere in ``dataset``'s graph.

    Sources hold their element structure (``from_tensors``, ``from_generator``'s
    ``output_signature``, ``zip``) and functions name the classes they build, so both count.

    Example:
        >>> import collections, feedline as fl
        >>> Point = collections.namedtuple("Point", "x y")
        >>> sorted(declared_types(fl.Dataset.from_tensors(Point(1, 2))).namedtuples)
        ['feedline.core.fingerprint:Point']
    """
    walker = _Walker()
    walker.stages(dataset)
    return walker.types
