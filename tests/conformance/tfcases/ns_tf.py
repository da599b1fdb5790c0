"""The TensorFlow namespace the cases are built with when their results are recorded.

Only ``record_expected.py`` uses it, in the TF environment; importing this module does not
import TensorFlow (the tests never need it): :func:`make` does.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import numpy as np

from tfcases.harness import UserError


def make() -> Any:
    """Import TensorFlow and return the namespace twin of ``ns_fl.NS``."""
    import tensorflow as tf

    class TensorFlowNamespace:
        name = "tensorflow"
        Dataset = tf.data.Dataset
        AUTOTUNE = tf.data.AUTOTUNE
        INFINITE = int(tf.data.INFINITE_CARDINALITY)
        UNKNOWN = int(tf.data.UNKNOWN_CARDINALITY)
        TFRecordDataset = tf.data.TFRecordDataset
        TextLineDataset = tf.data.TextLineDataset
        FixedLengthRecordDataset = tf.data.FixedLengthRecordDataset
        UserError = UserError
        tf_module = tf

        @staticmethod
        def TensorSpec(shape: Any, dtype: Any) -> Any:  # noqa: N802 - mirrors the class
            return tf.TensorSpec(shape, _tf_dtype(dtype))

        # -------------------------------------------------------- running
        @staticmethod
        def is_dataset(value: Any) -> bool:
            return isinstance(value, tf.data.Dataset)

        @staticmethod
        def read_all(dataset: Any) -> list[Any]:
            return list(iter(dataset))

        @staticmethod
        def iterate(dataset: Any) -> Iterator[Any]:
            return iter(dataset)

        @staticmethod
        def open(dataset: Any) -> Any:
            return iter(dataset)

        @staticmethod
        def close(iterator: Any) -> None:
            del iterator

        @staticmethod
        def head(dataset: Any, n: int) -> list[Any]:
            iterator = iter(dataset)
            return [next(iterator) for _ in range(n)]

        @staticmethod
        def next_of(iterator: Any) -> Any:
            return iterator.get_next()

        @staticmethod
        def check_numerics(x: Any, message: str) -> Any:
            return tf.debugging.check_numerics(x, message)

        @staticmethod
        def map_fn(fn: Callable[[Any], Any], elems: Any) -> Any:
            return tf.map_fn(fn, elems)

        @staticmethod
        def checkpointed(dataset: Any, variant: str) -> Iterator[Any]:
            # TF's checkpoint tests assert that saving and restoring changes nothing: the
            # expected elements are those of a plain run.
            return iter(dataset)

        @staticmethod
        def category(error: BaseException) -> str:
            return category(error, tf)

        # -------------------------------------------------------- dataset helpers
        @staticmethod
        def cardinality(dataset: Any) -> int:
            return int(dataset.cardinality())

        @staticmethod
        def at(dataset: Any, index: int) -> Any:
            return tf.data.experimental.at(dataset, index)

        @staticmethod
        def global_shuffle(dataset: Any, seed: int | None = None,
                           reshuffle_each_iteration: bool = True) -> Any:
            from tensorflow.python.data.experimental.ops import global_shuffle_op

            return global_shuffle_op._global_shuffle(  # noqa: SLF001 - TF's only spelling
                dataset, seed=seed, reshuffle_each_iteration=reshuffle_each_iteration)

        @staticmethod
        def range(*args: int, dtype: Any = np.int64) -> Any:
            return tf.data.Dataset.range(*args, output_type=_tf_dtype(dtype))

        @staticmethod
        def spec(dataset: Any) -> Any:
            def leaf(spec: Any) -> Any:
                shape = None if spec.shape.rank is None else tuple(spec.shape.as_list())
                return (shape, "bytes" if spec.dtype == tf.string else spec.dtype.name)
            return tf.nest.map_structure(leaf, dataset.element_spec)

        @staticmethod
        def lazy(dataset: Any) -> Any:
            options = tf.data.Options()
            options.experimental_optimization.inject_prefetch = False
            options.autotune.enabled = False
            return dataset.with_options(options)

        @staticmethod
        def options(**settings: Any) -> Any:
            options = tf.data.Options()
            for key, value in settings.items():
                setattr(options, _OPTION_NAMES.get(key, key), value)
            return options

        @staticmethod
        def from_generator(generator: Callable[..., Any], signature: Any,
                           args: tuple[Any, ...] = ()) -> Any:
            return tf.data.Dataset.from_generator(generator, output_signature=signature,
                                                  args=args or None)

        # -------------------------------------------------------- ops
        square = staticmethod(tf.math.square)
        equal = staticmethod(tf.math.equal)
        not_equal = staticmethod(tf.math.not_equal)
        less = staticmethod(tf.math.less)
        greater = staticmethod(tf.math.greater)
        logical_and = staticmethod(tf.math.logical_and)
        logical_or = staticmethod(tf.math.logical_or)
        logical_not = staticmethod(tf.math.logical_not)
        mod = staticmethod(tf.math.floormod)
        floordiv = staticmethod(tf.math.floordiv)
        maximum = staticmethod(tf.math.maximum)
        reshape = staticmethod(tf.reshape)
        stack = staticmethod(tf.stack)
        concat = staticmethod(tf.concat)
        expand_dims = staticmethod(tf.expand_dims)
        tile = staticmethod(tf.tile)
        cond = staticmethod(tf.cond)
        reduce_all = staticmethod(tf.reduce_all)
        where = staticmethod(tf.where)

        @staticmethod
        def cast(x: Any, dtype: Any) -> Any:
            return tf.cast(x, _tf_dtype(dtype))

        @staticmethod
        def constant(value: Any, dtype: Any = None) -> Any:
            return tf.constant(value, dtype=None if dtype is None else _tf_dtype(dtype))

        @staticmethod
        def fill(shape: Any, value: Any) -> Any:
            return tf.fill(shape, value)

        @staticmethod
        def zeros(shape: Any, dtype: Any) -> Any:
            return tf.zeros(shape, _tf_dtype(dtype))

        @staticmethod
        def arange(*args: Any, dtype: Any = np.int64) -> Any:
            return tf.range(*args, dtype=_tf_dtype(dtype))

        @staticmethod
        def size(x: Any) -> Any:
            return tf.size(x)

        @staticmethod
        def shape(x: Any) -> Any:
            return tf.shape(x)

        @staticmethod
        def reduce_sum(x: Any, axis: Any = None) -> Any:
            return tf.reduce_sum(x, axis=axis)

        @staticmethod
        def as_string(x: Any) -> Any:
            return tf.strings.as_string(x)

        @staticmethod
        def string_join(parts: list[Any], separator: str = "") -> Any:
            return tf.strings.join(parts, separator=separator)

        @staticmethod
        def divide(a: Any, b: Any) -> Any:
            return tf.math.truediv(a, b)

        @staticmethod
        def read_file(path: Any) -> Any:
            return tf.io.read_file(path)

        @staticmethod
        def fail(x: Any, message: str = "user function failed") -> Any:
            def raise_(value: Any) -> Any:
                raise UserError(message)
            out = tf.py_function(raise_, [x], x.dtype)
            out.set_shape(x.shape)
            return out

        @staticmethod
        def fail_if(x: Any, bad: Any, message: str = "bad element") -> Any:
            def check(value: Any) -> Any:
                if np.asarray(value.numpy() == bad).all():
                    raise UserError(f"{message}: {value.numpy()!r}")
                return value
            out = tf.py_function(check, [x], x.dtype)
            out.set_shape(x.shape)
            return out

        @staticmethod
        def sleep_then(x: Any, seconds: float) -> Any:
            import time

            def slow(value: Any) -> Any:
                time.sleep(seconds)
                return value
            out = tf.py_function(slow, [x], x.dtype)
            out.set_shape(x.shape)
            return out

        @staticmethod
        def call_python(fn: Callable[..., Any], args: list[Any], dtypes: Any) -> Any:
            if isinstance(dtypes, (list, tuple)):
                return tuple(tf.numpy_function(fn, args, [_tf_dtype(d) for d in dtypes]))
            return tf.numpy_function(fn, args, _tf_dtype(dtypes))

    return TensorFlowNamespace()


_OPTION_NAMES = {"seed": "experimental_seed"}


def _tf_dtype(dtype: Any) -> Any:
    import tensorflow as tf

    if dtype is bytes or dtype is object or dtype == "string":
        return tf.string
    return tf.as_dtype(np.dtype(dtype)) if not isinstance(dtype, tf.DType) else dtype


def category(error: BaseException, tf: Any) -> str:
    """The category of an error TF raised, matched against feedline's (``ns_fl.category``).

    ``user``: a user function raised :class:`UserError` (TF wraps it in another error);
    ``invalid``: a bad argument or element (``InvalidArgumentError``, ``ValueError``,
    ``TypeError``, ``FailedPreconditionError``, ``InternalError``); ``out_of_range``,
    ``not_found``, ``data_loss``, ``already_exists``, ``unimplemented`` as TF's errors of
    those names.
    """
    if "UserError" in str(error):
        return "user"
    errors = tf.errors
    if isinstance(error, errors.OutOfRangeError):
        return "out_of_range"
    if isinstance(error, errors.NotFoundError):
        return "not_found"
    if isinstance(error, errors.DataLossError):
        return "data_loss"
    if isinstance(error, errors.AlreadyExistsError):
        return "already_exists"
    if isinstance(error, errors.UnimplementedError):
        return "unimplemented"
    # TF 2.21 reports a negative padded shape met at run time as InternalError where its own
    # test (group_by_window_test.testReduceFuncError) expects InvalidArgumentError.
    if isinstance(error, (errors.InvalidArgumentError, errors.FailedPreconditionError,
                          errors.InternalError, ValueError, TypeError)):
        return "invalid"
    return f"other:{type(error).__name__}"
