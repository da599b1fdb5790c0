"""The feedline namespace the cases are built with when the tests run (NumPy ops).

Every name here has a twin in :mod:`tfcases.ns_tf` with TensorFlow's ops; a case's
functions use ``ns.<op>`` wherever TF needs its own op, so one definition runs on both.

Example:
    >>> [int(x) for x in NS.Dataset.range(3).map(NS.square)]
    [0, 1, 4]
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Iterator
from typing import Any

import numpy as np

import feedline as fl
from tfcases.harness import UserError


class FeedlineNamespace:
    """feedline's ``Dataset`` and NumPy versions of the TF ops the cases use."""

    name = "feedline"
    Dataset = fl.Dataset
    AUTOTUNE = fl.AUTOTUNE
    INFINITE = fl.INFINITE
    UNKNOWN = fl.UNKNOWN
    TFRecordDataset = fl.TFRecordDataset
    TextLineDataset = fl.TextLineDataset
    FixedLengthRecordDataset = fl.FixedLengthRecordDataset
    UserError = UserError

    # ------------------------------------------------------------ running
    @staticmethod
    def TensorSpec(shape: Any, dtype: Any) -> fl.TensorSpec:  # noqa: N802 - mirrors the class
        """``bytes``/``"string"`` (TF's tf.string) is an object dtype here."""
        if dtype is bytes or dtype == "string":
            dtype = object
        return fl.TensorSpec(tuple(shape), np.dtype(dtype))

    @staticmethod
    def is_dataset(value: Any) -> bool:
        return isinstance(value, fl.Dataset)

    @staticmethod
    def read_all(dataset: fl.Dataset) -> list[Any]:
        with iter(dataset) as iterator:
            return list(iterator)

    @staticmethod
    def iterate(dataset: fl.Dataset) -> Iterator[Any]:
        iterator = iter(dataset)
        try:
            yield from iterator
        finally:
            iterator.close()

    @staticmethod
    def open(dataset: fl.Dataset) -> Any:
        return iter(dataset)

    @staticmethod
    def close(iterator: Any) -> None:
        iterator.close()

    @staticmethod
    def head(dataset: fl.Dataset, n: int) -> list[Any]:
        """The first ``n`` elements; the iterator is then closed, unfinished."""
        with iter(dataset) as iterator:
            return [next(iterator) for _ in range(n)]

    @staticmethod
    def next_of(iterator: Any) -> Any:
        return next(iterator)

    @staticmethod
    def check_numerics(x: Any, message: str) -> Any:
        """TF's ``check_numerics``: an invalid-argument error on NaN or infinity."""
        if not np.all(np.isfinite(x)):
            raise ValueError(f"{message}: tensor had NaN or Inf values")
        return x

    @staticmethod
    def map_fn(fn: Callable[[Any], Any], elems: Any) -> Any:
        return np.stack([fn(x) for x in elems])

    @staticmethod
    def checkpointed(dataset: fl.Dataset, variant: str) -> Iterator[Any]:
        """The elements read through saved and restored states, as TF's ``verify_fn``s do."""
        yield from _checkpointed(dataset, variant)

    @staticmethod
    def category(error: BaseException) -> str:
        return category(error)

    # ------------------------------------------------------------ dataset helpers
    @staticmethod
    def cardinality(dataset: fl.Dataset) -> int:
        return int(dataset.cardinality())

    @staticmethod
    def at(dataset: fl.Dataset, index: int) -> Any:
        """tf.data.experimental.at's twin (``dataset[index]`` is Python indexing)."""
        from feedline.core.random_access import at

        return at(dataset, index)

    @staticmethod
    def global_shuffle(dataset: fl.Dataset, seed: int | None = None,
                       reshuffle_each_iteration: bool = True) -> fl.Dataset:
        return dataset.global_shuffle(seed, reshuffle_each_iteration)

    @staticmethod
    def range(*args: int, dtype: Any = np.int64) -> fl.Dataset:
        return fl.Dataset.range(*args, dtype=dtype)

    @staticmethod
    def spec(dataset: fl.Dataset) -> Any:
        """The element spec as ``(shape, dtype name)`` leaves (``bytes`` for strings)."""
        def leaf(spec: fl.TensorSpec) -> Any:
            dtype = np.dtype(spec.dtype)
            return (tuple(spec.shape), "bytes" if dtype == object else dtype.name)
        return _map_specs(leaf, dataset.element_spec)

    @staticmethod
    def lazy(dataset: fl.Dataset) -> fl.Dataset:
        """No read-ahead the pipeline did not ask for (TF injects a prefetch by default)."""
        return dataset.with_options(fl.Options(
            optimization=fl.OptimizationOptions(inject_prefetch=False)))

    @staticmethod
    def options(**settings: Any) -> fl.Options:
        return fl.Options(**settings)

    @staticmethod
    def from_generator(generator: Callable[..., Any], signature: Any,
                       args: tuple[Any, ...] = ()) -> fl.Dataset:
        return fl.Dataset.from_generator(generator, output_signature=signature, args=args)

    # ------------------------------------------------------------ ops (NumPy)
    @staticmethod
    def square(x: Any) -> Any:
        return np.square(x)

    @staticmethod
    def cast(x: Any, dtype: Any) -> Any:
        return np.asarray(x).astype(dtype)[()]

    @staticmethod
    def constant(value: Any, dtype: Any = None) -> Any:
        return np.asarray(value, dtype=dtype)

    @staticmethod
    def fill(shape: Any, value: Any) -> Any:
        return np.full(tuple(int(d) for d in np.atleast_1d(shape)), value)

    @staticmethod
    def zeros(shape: Any, dtype: Any) -> Any:
        return np.zeros(tuple(int(d) for d in shape), dtype)

    @staticmethod
    def arange(*args: Any, dtype: Any = np.int64) -> Any:
        return np.arange(*[int(a) for a in args], dtype=dtype)

    @staticmethod
    def reshape(x: Any, shape: Any) -> Any:
        return np.reshape(x, shape)

    @staticmethod
    def stack(xs: Any, axis: int = 0) -> Any:
        return np.stack(xs, axis)

    @staticmethod
    def concat(xs: Any, axis: int = 0) -> Any:
        return np.concatenate(xs, axis)

    @staticmethod
    def expand_dims(x: Any, axis: int) -> Any:
        return np.expand_dims(x, axis)

    @staticmethod
    def tile(x: Any, multiples: Any) -> Any:
        return np.tile(x, multiples)

    @staticmethod
    def size(x: Any) -> Any:
        return np.int32(np.size(x))

    @staticmethod
    def shape(x: Any) -> Any:
        return np.asarray(np.shape(x), dtype=np.int32)

    @staticmethod
    def equal(a: Any, b: Any) -> Any:
        return np.equal(a, b)

    @staticmethod
    def not_equal(a: Any, b: Any) -> Any:
        return np.not_equal(a, b)

    @staticmethod
    def less(a: Any, b: Any) -> Any:
        return np.less(a, b)

    @staticmethod
    def greater(a: Any, b: Any) -> Any:
        return np.greater(a, b)

    @staticmethod
    def logical_and(a: Any, b: Any) -> Any:
        return np.logical_and(a, b)

    @staticmethod
    def logical_or(a: Any, b: Any) -> Any:
        return np.logical_or(a, b)

    @staticmethod
    def logical_not(a: Any) -> Any:
        return np.logical_not(a)

    @staticmethod
    def mod(a: Any, b: Any) -> Any:
        return np.mod(a, b)

    @staticmethod
    def floordiv(a: Any, b: Any) -> Any:
        return np.floor_divide(a, b)

    @staticmethod
    def maximum(a: Any, b: Any) -> Any:
        return np.maximum(a, b)

    @staticmethod
    def reduce_sum(x: Any, axis: Any = None) -> Any:
        x = np.asarray(x)
        return np.sum(x, axis=axis, dtype=x.dtype)

    @staticmethod
    def reduce_all(x: Any) -> Any:
        return np.all(x)

    @staticmethod
    def where(cond: Any, a: Any, b: Any) -> Any:
        return np.where(cond, a, b)[()]

    @staticmethod
    def cond(pred: Any, true_fn: Callable[[], Any], false_fn: Callable[[], Any]) -> Any:
        return true_fn() if bool(pred) else false_fn()

    @staticmethod
    def as_string(x: Any) -> Any:
        """TF's ``as_string`` of integers: decimal text, element by element."""
        array = np.asarray(x)
        out = np.array([str(int(v)).encode() for v in array.reshape(-1)], dtype=object)
        return out.reshape(array.shape) if array.ndim else out[0]

    @staticmethod
    def string_join(parts: list[Any], separator: str = "") -> Any:
        return separator.encode().join(p if isinstance(p, bytes) else bytes(p) for p in parts)

    @staticmethod
    def divide(a: Any, b: Any) -> Any:
        """IEEE division (TF's ``/``): 1/0 is inf, without NumPy's warning."""
        with np.errstate(divide="ignore", invalid="ignore"):
            return np.true_divide(a, b)

    @staticmethod
    def read_file(path: Any) -> bytes:
        """TF's ``tf.io.read_file``: the file's bytes (a missing file raises)."""
        name = path.decode() if isinstance(path, bytes) else str(path)
        with open(name, "rb") as f:
            return f.read()

    @staticmethod
    def fail(x: Any, message: str = "user function failed") -> Any:
        """Raise :class:`UserError` (TF: a ``py_function`` raising it)."""
        raise UserError(message)

    @staticmethod
    def fail_if(x: Any, bad: Any, message: str = "bad element") -> Any:
        """``x``, or :class:`UserError` when ``x == bad`` (one scalar)."""
        if np.asarray(x == bad).all():
            raise UserError(f"{message}: {x!r}")
        return x

    @staticmethod
    def sleep_then(x: Any, seconds: float) -> Any:
        time.sleep(seconds)
        return x

    @staticmethod
    def call_python(fn: Callable[..., Any], args: list[Any], dtypes: Any) -> Any:
        """Run a plain Python/NumPy function (TF: ``tf.numpy_function``)."""
        return fn(*args)


def _map_specs(fn: Callable[[Any], Any], spec: Any) -> Any:
    if isinstance(spec, dict):
        return {k: _map_specs(fn, v) for k, v in spec.items()}
    if isinstance(spec, tuple) and not isinstance(spec, fl.TensorSpec):
        items = [_map_specs(fn, v) for v in spec]
        return type(spec)(*items) if hasattr(type(spec), "_fields") else tuple(items)
    return fn(spec)


def category(error: BaseException) -> str:
    """The category of an error raised by a feedline pipeline (see ``ns_tf.category``)."""
    seen: BaseException | None = error
    while seen is not None:
        if isinstance(seen, UserError):
            return "user"
        seen = seen.__cause__ or seen.__context__
    if isinstance(error, fl.StopIterationError):
        return "invalid"  # TF: InvalidArgumentError for StopIteration in a function
    if isinstance(error, (fl.OutOfRangeError, IndexError, StopIteration)):
        return "out_of_range"
    if isinstance(error, FileNotFoundError):
        return "not_found"
    if isinstance(error, fl.DataLossError):
        return "data_loss"
    if isinstance(error, FileExistsError):
        return "already_exists"
    if isinstance(error, NotImplementedError):
        return "unimplemented"
    if isinstance(error, (ValueError, TypeError)):
        return "invalid"
    return f"other:{type(error).__name__}"


def _roundtrip(state: Any) -> Any:
    # A state must survive JSON (files, other processes): restore from the decoded copy.
    return json.loads(json.dumps(state))


def _fresh(dataset: fl.Dataset) -> fl.PipelineIterator:
    """An iterator as that of a newly built copy of ``dataset``: TF's checkpoint tests build
    the dataset anew (``ds_fn()``) for every iterator, so a seeded stage that reshuffles
    starts at its first epoch each time, where ``iter(dataset)`` would go on to the next."""
    return fl.PipelineIterator(dataset)


def _checkpointed(dataset: fl.Dataset, variant: str) -> Iterator[Any]:
    if variant.startswith("save_then_run:"):
        # Read ``run`` elements, keeping the state saved after ``save`` of them; restore it and
        # read the rest (TF's gen_outputs with save_checkpoint_at_end=False).
        save, run = (int(v) for v in variant.split(":")[1].split(","))
        with _fresh(dataset) as first:
            head = []
            for _ in range(run):
                head.append(next(first))
                if len(head) == save:
                    state = _roundtrip(first.state_dict())
            if save == 0:
                state = _roundtrip(first.state_dict())
        yield from head[:save]
        with _fresh(dataset) as restored:
            restored.load_state_dict(state)
            yield from restored
        return
    if variant.startswith("breaks:"):
        # Save and restore into a new iterator at each of these element counts.
        points = [int(v) for v in variant.split(":")[1].split(",")]
        it = _fresh(dataset)
        try:
            produced = 0
            for point in points:
                while produced < point:
                    yield next(it)
                    produced += 1
                state = _roundtrip(it.state_dict())
                it.close()
                it = _fresh(dataset)
                it.load_state_dict(state)
            yield from it
        finally:
            it.close()
        return
    if variant == "reset_restored":
        with _fresh(dataset) as first:
            full = list(first)
        with _fresh(dataset) as it:
            for _ in range(len(full) // 2):
                next(it)
            state = _roundtrip(it.state_dict())
        with _fresh(dataset) as restored:
            restored.load_state_dict(state)
        # Re-initializing after a restore starts over: a fresh iterator of the dataset.
        with _fresh(dataset) as again:
            yield from again
        return
    if variant in ("unused", "exhausted"):
        breaks = [0] if variant == "unused" else [None]
    else:
        with _fresh(dataset) as counting:
            n = sum(1 for _ in counting)
        breaks = [n] if variant == "fully_used" else sorted(
            {int(b) for b in np.linspace(0, n, 10, dtype=int)})
    produced = 0
    it = _fresh(dataset)
    try:
        for point in breaks:
            if point is None:  # exhausted: read to the end, then save and restore
                for element in it:
                    produced += 1
                    yield element
            else:
                while produced < point:
                    yield next(it)
                    produced += 1
            state = _roundtrip(it.state_dict())
            it.close()
            it = _fresh(dataset)
            it.load_state_dict(state)
        yield from it
    finally:
        it.close()


NS = FeedlineNamespace()
