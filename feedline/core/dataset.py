"""The :class:`Dataset` graph node and its fluent API.

A dataset is an immutable, picklable description of a pipeline: it holds no threads and
no open files. Iterating it builds a tree of :class:`~feedline.core.iterator.DatasetIterator`
that does the work. Each operation lives in its own module under ``feedline.sources`` or
``feedline.transforms`` (a few elsewhere: ``distribute``, ``multiprocess``, ``save``/``load``);
the methods here keep their signatures and documentation and only build those nodes, through
:mod:`feedline.core.registry`, where each operation attaches itself: the core imports none.
"""

from __future__ import annotations

import abc
import functools
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import TYPE_CHECKING, Any, ClassVar

from feedline.core.constants import AUTOTUNE, INFINITE, UNKNOWN
from feedline.core.graph import Node
from feedline.core.iterator import DatasetIterator, IteratorContext
from feedline.core.options import Options
from feedline.core.registry import build
from feedline.core.runner import RunningPipeline, run
from feedline.core.structure import Element
from feedline.core.traits import POSITIONAL, OperationTraits, with_legacy_flags

if TYPE_CHECKING:
    from feedline.core.input_context import InputContext
    from feedline.core.options import AutoShardPolicy
    from feedline.core.random_access import RandomAccessReader


class Dataset(Node, abc.ABC):
    """A lazy, immutable pipeline of elements with tf.data's semantics.

    Example:
        >>> import feedline as fl
        >>> ds = fl.Dataset.range(10).map(lambda x: x * 2).filter(lambda x: x % 3 == 0).batch(2)
        >>> [b.tolist() for b in ds]
        [[0, 6], [12, 18]]
    """

    TRAITS: ClassVar[OperationTraits] = POSITIONAL
    """How this operation treats elements (:mod:`feedline.core.traits`): every feedline
    operation declares its own; a subclass that does not is taken as positional."""

    def __init__(self, inputs: Sequence[Dataset] = ()) -> None:
        self._inputs: tuple[Dataset, ...] = tuple(inputs)

    def traits(self) -> OperationTraits:
        """What this node is for the planners (its class's ``TRAITS``, unless its settings
        change them)."""
        return self.TRAITS

    def __init_subclass__(cls, **kwargs: Any) -> None:
        # Every node's own _make_iterator goes through the pipeline's statistics collector
        # when statistics are on (IteratorContext.statistics), so each stage, also those
        # built while running (repeat's epochs, interleave's files), is measured. Off, the
        # cost is one attribute test per iterator built, none per element.
        super().__init_subclass__(**kwargs)
        # Operations that still say a trait by an underscore flag get it in their TRAITS:
        # the planners ask only the traits.
        traits = with_legacy_flags(cls, cls.TRAITS)
        if traits != cls.TRAITS:
            cls.TRAITS = traits
        make = cls.__dict__.get("_make_iterator")
        if make is not None and not getattr(make, "_routes_statistics", False):
            cls._make_iterator = _routing_statistics(make)  # type: ignore[method-assign]

    # ----------------------------------------------------------------- graph protocol
    @abc.abstractmethod
    def _make_iterator(self, ctx: IteratorContext) -> DatasetIterator:
        """Build the iterator of this stage (and, through it, of its inputs)."""

    def _element_spec(self) -> Element | None:
        """The spec when known without running anything; ``None`` means 'look at an element'."""
        return None

    def _with_inputs(self, inputs: Sequence[Dataset]) -> Dataset:
        """A copy of this node reading from ``inputs`` (used by graph rewrites)."""
        clone = object.__new__(type(self))
        clone.__dict__.update(self.__dict__)
        clone._inputs = tuple(inputs)
        clone.__dict__.pop("_cached_spec", None)
        return clone

    def _offers_random_access(self) -> bool:
        """Whether this node can compute element ``i`` directly (see :mod:`feedline.core.random_access`)."""
        return False

    def _random_reader(self, ctx: IteratorContext) -> RandomAccessReader:
        """Open this node's random-access reader (only when :meth:`_offers_random_access`)."""
        from feedline.core.random_access import require_random_access

        require_random_access(self, "random access")
        raise TypeError(f"{type(self).__name__} offers random access but opens no reader")

    @property
    def element_spec(self) -> Element:
        """Structure, shapes and dtypes of the elements (``None`` for an empty dataset).

        Computed from the graph when possible; a stage that runs user code has the spec of
        its first element, and the stages after it derive theirs from it, as tf.data does
        (:mod:`feedline.core.spec_inference`).

        Example:
            >>> import feedline as fl
            >>> fl.Dataset.range(3).batch(2).element_spec
            TensorSpec(shape=(None,), dtype=int64)
        """
        if "_cached_spec" not in self.__dict__:
            spec = self._element_spec()
            if spec is None:
                spec = build("element_spec", self)  # inferred: core.spec_inference
            self.__dict__["_cached_spec"] = spec
        return self.__dict__["_cached_spec"]

    def cardinality(self) -> int:
        """Number of elements, or :data:`INFINITE` / :data:`UNKNOWN`.

        Example:
            >>> import feedline as fl
            >>> fl.Dataset.range(10).batch(3).cardinality()
            4
        """
        return UNKNOWN

    def options(self) -> Options:
        """The options in force for this pipeline (merged from every ``with_options``)."""
        merged = Options()
        for node in _upstream_first(self):
            own = getattr(node, "_own_options", None)
            if own is not None:
                merged = merged.merge(own)
        return merged

    def __iter__(self) -> RunningPipeline:
        """Run the pipeline. Each new iterator of this dataset object is a new epoch for the
        seeded stages that reshuffle each iteration, as in tf.data
        (:mod:`feedline.core.seed_epochs`); ``PipelineIterator(ds, epoch=e)`` pins the epoch.

        Example:
            >>> import feedline as fl
            >>> ds = fl.Dataset.range(5).shuffle(5, seed=3)
            >>> [int(x) for x in ds] != [int(x) for x in ds]
            True
        """
        return run(self, continue_epochs=True)

    def __len__(self) -> int:
        n = self.cardinality()
        if n == UNKNOWN and self._offers_random_access():
            # TFRecord files: the record count comes from their index.
            from feedline.core.random_access import open_reader

            with open_reader(self) as reader:
                return len(reader)
        if n < 0:
            raise TypeError("the dataset's length is " + ("infinite" if n == INFINITE else "unknown"))
        return n

    def __getitem__(self, index: int) -> Element:
        """Element ``index`` (negative: from the end) of a random-access pipeline.

        ``range``, ``from_tensor_slices`` and uncompressed TFRecord files, and ``map``,
        ``batch``, ``take``, ``skip``, ``shard``, ``prefetch``, ``global_shuffle``, a finite
        ``repeat`` and ``unbatch`` (of a static batch size) over them compute any element
        from its index (:mod:`feedline.core.random_access`); other stages raise a
        ``TypeError`` naming the stage. This is Python indexing; tf.data's
        ``tf.data.experimental.at``, where a negative index is out of range, is
        :func:`feedline.core.random_access.at`.

        Example:
            >>> import feedline as fl
            >>> ds = fl.Dataset.range(10).map(lambda x: x * 3).batch(4)
            >>> ds[1].tolist(), ds[-1].tolist(), len(ds)
            ([12, 15, 18, 21], [24, 27], 3)
        """
        from feedline.core.random_access import element_at

        return element_at(self, index)

    def __bool__(self) -> bool:
        return True

    def as_numpy_iterator(self) -> RunningPipeline:
        """An iterator of NumPy elements (feedline's elements already are NumPy).

        Example:
            >>> import feedline as fl
            >>> list(fl.Dataset.from_tensor_slices([1, 2]).as_numpy_iterator())
            [np.int32(1), np.int32(2)]
        """
        return run(self, continue_epochs=True)

    # ----------------------------------------------------------------- sources
    @staticmethod
    def range(*args: int, dtype: Any = None, name: str | None = None) -> Dataset:
        """``range(stop)``, ``range(start, stop)`` or ``range(start, stop, step)`` as int64 scalars.

        Example:
            >>> import feedline as fl
            >>> [int(x) for x in fl.Dataset.range(1, 8, 3)]
            [1, 4, 7]
        """
        return build("range", *args, dtype=dtype, name=name)

    @staticmethod
    def from_tensor_slices(structure: Element, name: str | None = None) -> Dataset:
        """One element per row of the leading dimension of every leaf.

        Example:
            >>> import feedline as fl
            >>> [(int(a), b) for a, b in fl.Dataset.from_tensor_slices(([1, 2], [b"x", b"y"]))]
            [(1, b'x'), (2, b'y')]
        """
        return build("from_tensor_slices", structure, name)

    @staticmethod
    def from_tensors(structure: Element, name: str | None = None) -> Dataset:
        """A dataset of exactly one element, ``structure``.

        Example:
            >>> import feedline as fl
            >>> [x.tolist() for x in fl.Dataset.from_tensors([1, 2])]
            [[1, 2]]
        """
        return build("from_tensors", structure, name)

    @staticmethod
    def from_generator(generator: Callable[..., Iterable[Any]], output_signature: Element = None,
                       args: Sequence[Any] = (), *, restorable: bool = True,
                       output_types: Element = None, output_shapes: Element = None) -> Dataset:
        """Elements from ``generator(*args)``, called anew for every epoch.

        A restored iterator re-runs the generator and skips the elements already produced;
        pass ``restorable=False`` if the generator cannot be replayed, and restoring raises.
        tf.data's older ``output_types`` (and ``output_shapes``) keywords are accepted in
        place of ``output_signature``.

        Example:
            >>> import feedline as fl
            >>> [int(x) for x in fl.Dataset.from_generator(lambda n: range(n), args=(3,))]
            [0, 1, 2]
            >>> ds = fl.Dataset.from_generator(lambda: iter([(1,), (2,)]),
            ...                                output_types="int64", output_shapes=(1,))
            >>> [x.tolist() for x in ds]
            [[1], [2]]
        """
        return build("from_generator", generator, output_signature, args, restorable=restorable,
                     output_types=output_types, output_shapes=output_shapes)

    @staticmethod
    def list_files(file_pattern: str | Sequence[str], shuffle: bool | None = None,
                   seed: int | None = None, name: str | None = None) -> Dataset:
        """File names matching glob pattern(s), local or fsspec URLs; shuffled by default.

        Example:
            >>> import feedline as fl, fsspec
            >>> fs = fsspec.filesystem("memory"); fs.pipe({"/lf/a.txt": b"", "/lf/b.txt": b""})
            >>> sorted(fl.Dataset.list_files("memory:///lf/*.txt").as_numpy_iterator())
            [b'memory:///lf/a.txt', b'memory:///lf/b.txt']
        """
        return build("list_files", file_pattern, shuffle=shuffle, seed=seed, name=name)

    @staticmethod
    def zip(*datasets: Dataset | Element, name: str | None = None) -> Dataset:
        """Tuples (or the given nest) of one element from each dataset; ends with the shortest.

        Example:
            >>> import feedline as fl
            >>> [(int(a), int(b)) for a, b in fl.Dataset.zip(fl.Dataset.range(3), fl.Dataset.range(5, 7))]
            [(0, 5), (1, 6)]
        """
        # As tf.data: one argument (a dataset or a nest of them) is the structure itself.
        structure = datasets[0] if len(datasets) == 1 else tuple(datasets)
        return build("zip", structure, name)

    @staticmethod
    def sample_from_datasets(datasets: Sequence[Dataset],
                             weights: Sequence[float] | Dataset | None = None,
                             seed: int | None = None, stop_on_empty_dataset: bool = False,
                             rerandomize_each_iteration: bool | None = None) -> Dataset:
        """Draw each element from a dataset picked at random with ``weights``.

        Args:
            datasets: The datasets to draw from; their elements must have one structure.
            weights: One probability weight per dataset (``None``: uniform), or a dataset of
                such vectors, one consumed per draw.
            seed: Makes the draws reproducible (else ``Options.seed``, else random).
            stop_on_empty_dataset: End when the picked dataset is exhausted, instead of
                dropping it and drawing among the others.
            rerandomize_each_iteration: ``True`` draws a new sequence of picks each epoch
                (each iteration of this dataset in a run), still reproducible for a given
                seed; ``None``/``False`` (tf.data's default) repeats the same picks.

        Example:
            >>> import feedline as fl
            >>> ds = fl.Dataset.sample_from_datasets([fl.Dataset.range(3), fl.Dataset.range(10, 13)], seed=1)
            >>> sorted(int(x) for x in ds)
            [0, 1, 2, 10, 11, 12]
        """
        return build("sample_from_datasets", datasets, weights, seed, stop_on_empty_dataset,
                     rerandomize_each_iteration=rerandomize_each_iteration)

    @staticmethod
    def choose_from_datasets(datasets: Sequence[Dataset], choice_dataset: Dataset,
                             stop_on_empty_dataset: bool = True) -> Dataset:
        """Take each element from ``datasets[i]`` for successive ``i`` of ``choice_dataset``
        (int64 scalars, as tf.data requires).

        Example:
            >>> import feedline as fl, numpy as np
            >>> choice = fl.Dataset.from_tensor_slices(np.array([0, 1, 0], np.int64))
            >>> [int(x) for x in fl.Dataset.choose_from_datasets([fl.Dataset.range(3), fl.Dataset.range(10, 13)], choice)]
            [0, 10, 1]
        """
        return build("choose_from_datasets", datasets, choice_dataset, stop_on_empty_dataset)

    @staticmethod
    def load(path: str, element_spec: Any = None, compression: str | None = None,
             reader_func: Callable[[list[Dataset]], Dataset] | None = None) -> Dataset:
        """The dataset :meth:`save` wrote at ``path``; its structure and size are stored.

        Example:
            >>> import feedline as fl, tempfile
            >>> folder = tempfile.mkdtemp(); fl.Dataset.range(3).save(folder)
            >>> [int(x) for x in fl.Dataset.load(folder)]
            [0, 1, 2]
        """
        return build("load", path, element_spec, compression, reader_func)

    @staticmethod
    def random(seed: int | None = None, rerandomize_each_iteration: bool | None = None,
               name: str | None = None) -> Dataset:
        """An infinite dataset of pseudo-random int64 scalars (reproducible with ``seed``).

        ``rerandomize_each_iteration=True`` draws a new sequence for each iteration (each
        epoch of a ``repeat``, each new ``iter(ds)``), reproducibly for a given seed;
        ``None``/``False`` (tf.data's default) repeats the same one.

        Example:
            >>> import feedline as fl
            >>> a = [int(x) for x in fl.Dataset.random(seed=7).take(3)]
            >>> a == [int(x) for x in fl.Dataset.random(seed=7).take(3)]
            True
        """
        return build("random", seed, rerandomize_each_iteration, name)

    @staticmethod
    def counter(start: Any = 0, step: Any = 1, dtype: Any = "int64",
                name: str | None = None) -> Dataset:
        """An endless count ``start, start + step, ...`` of ``dtype`` scalars (tf.data's
        ``counter``: integers wrap around at the dtype's bounds, floats accumulate).

        Example:
            >>> import feedline as fl
            >>> [int(x) for x in fl.Dataset.counter(start=3, step=-2).take(4)]
            [3, 1, -1, -3]
        """
        return build("counter", start, step, dtype, name)

    # ----------------------------------------------------------------- transformations
    def map(self, map_func: Callable[..., Any], num_parallel_calls: int | None = None,
            deterministic: bool | None = None, name: str | None = None, *,
            executor: str | None = None) -> Dataset:
        """Apply ``map_func`` to every element (tuple components become positional arguments).

        Args:
            map_func: The function; returns the new element.
            num_parallel_calls: ``None`` runs inline; an int or ``AUTOTUNE`` runs that many calls
                at once.
            deterministic: ``False`` lets results come out in completion order.
            name: Shown in errors and profiles.
            executor: ``"thread"`` (NumPy, I/O and codecs release the GIL), ``"process"`` for
                pure-Python functions that hold the GIL, or ``None`` (default): threads, and
                with ``AUTOTUNE`` a measurement of the first calls may move the rest to
                processes (:mod:`feedline.placement.map_executor`).

        Example:
            >>> import feedline as fl
            >>> [int(x) for x in fl.Dataset.range(4).map(lambda x: x * x, num_parallel_calls=2)]
            [0, 1, 4, 9]
        """
        return build("map", self, map_func, num_parallel_calls, deterministic, name,
                     executor=executor)

    def filter(self, predicate: Callable[..., Any], name: str | None = None) -> Dataset:
        """Keep the elements for which ``predicate`` is true.

        Example:
            >>> import feedline as fl
            >>> [int(x) for x in fl.Dataset.range(6).filter(lambda x: x % 2 == 1)]
            [1, 3, 5]
        """
        return build("filter", self, predicate, name)

    def flat_map(self, map_func: Callable[..., Dataset], name: str | None = None) -> Dataset:
        """Map each element to a dataset and concatenate them in order.

        Example:
            >>> import feedline as fl
            >>> [int(x) for x in fl.Dataset.range(3).flat_map(lambda x: fl.Dataset.range(x))]
            [0, 0, 1]
        """
        return build("flat_map", self, map_func, name)

    def interleave(self, map_func: Callable[..., Dataset], cycle_length: int | None = None,
                   block_length: int = 1, num_parallel_calls: int | None = None,
                   deterministic: bool | None = None, name: str | None = None) -> Dataset:
        """Map elements to datasets and take ``block_length`` elements from each of
        ``cycle_length`` open ones in turn (tf.data's order, element for element).

        Example:
            >>> import feedline as fl
            >>> ds = fl.Dataset.range(1, 4).interleave(
            ...     lambda x: fl.Dataset.from_tensors(x).repeat(3), cycle_length=2, block_length=2)
            >>> [int(x) for x in ds]
            [1, 1, 2, 2, 1, 2, 3, 3, 3]
        """
        return build("interleave", self, map_func, cycle_length, block_length, num_parallel_calls,
                     deterministic, name)

    def batch(self, batch_size: int, drop_remainder: bool = False,
              num_parallel_calls: int | None = None, deterministic: bool | None = None,
              name: str | None = None) -> Dataset:
        """Stack ``batch_size`` consecutive elements leaf by leaf.

        Example:
            >>> import feedline as fl
            >>> [b.tolist() for b in fl.Dataset.range(5).batch(2)]
            [[0, 1], [2, 3], [4]]
        """
        return build("batch", self, batch_size, drop_remainder, num_parallel_calls, deterministic,
                     name)

    def padded_batch(self, batch_size: int, padded_shapes: Element = None,
                     padding_values: Element = None, drop_remainder: bool = False,
                     name: str | None = None) -> Dataset:
        """Batch elements of varying shape, padding each leaf to ``padded_shapes``
        (``None`` dims: the longest in the batch).

        Example:
            >>> import feedline as fl, numpy as np
            >>> ds = fl.Dataset.range(1, 4).map(lambda x: np.full(x, x))
            >>> [b.tolist() for b in ds.padded_batch(2)]
            [[[1, 0], [2, 2]], [[3, 3, 3]]]
        """
        return build("padded_batch", self, batch_size, padded_shapes, padding_values,
                     drop_remainder, name)

    def ragged_batch(self, batch_size: int, drop_remainder: bool = False,
                     name: str | None = None) -> Dataset:
        """Batch elements of varying shape into :class:`~feedline.RaggedValues` (leaves of
        unknown shape; fully known ones are stacked), as tf.data's ``ragged_batch``
        (:mod:`feedline.transforms.ragged_batch`).

        Example:
            >>> import feedline as fl, numpy as np
            >>> ds = fl.Dataset.range(4).map(lambda x: np.arange(x)).ragged_batch(2)
            >>> [b.to_list() for b in ds]
            [[[], [0]], [[0, 1], [0, 1, 2]]]
        """
        return build("ragged_batch", self, batch_size, drop_remainder, name)

    def unbatch(self, name: str | None = None) -> Dataset:
        """Split each element along its first dimension into rows.

        Example:
            >>> import feedline as fl
            >>> [int(x) for x in fl.Dataset.range(5).batch(2).unbatch()]
            [0, 1, 2, 3, 4]
        """
        return build("unbatch", self, name)

    def rebatch(self, batch_size: int | Sequence[int], drop_remainder: bool = False,
                name: str | None = None) -> Dataset:
        """Re-split already batched elements into batches of ``batch_size`` rows (or cycle
        through a list of sizes), like ``tf.data.Dataset.rebatch``: the same as
        ``unbatch().batch(batch_size)``, so a batch may join rows of consecutive inputs.

        Example:
            >>> import feedline as fl
            >>> [b.tolist() for b in fl.Dataset.range(6).batch(4).rebatch(3)]
            [[0, 1, 2], [3, 4, 5]]
        """
        return build("rebatch", self, batch_size, drop_remainder, name)

    def shuffle(self, buffer_size: int, seed: int | None = None,
                reshuffle_each_iteration: bool = True, name: str | None = None) -> Dataset:
        """Sample uniformly from a buffer of ``buffer_size`` elements refilled from the input.

        Example:
            >>> import feedline as fl
            >>> sorted(int(x) for x in fl.Dataset.range(5).shuffle(5, seed=0))
            [0, 1, 2, 3, 4]
        """
        return build("shuffle", self, buffer_size, seed, reshuffle_each_iteration, name)

    def global_shuffle(self, seed: int | None = None, reshuffle_each_iteration: bool = True,
                       name: str | None = None) -> Dataset:
        """Read the whole dataset in a seeded random order, as tf.data's ``global_shuffle``.

        Needs random access (``range``, ``from_tensor_slices``, TFRecord files, and ``map``,
        ``batch``, ``take``, ``skip``, ``shard`` over them): it permutes the indices instead
        of filling a buffer, so every order is equally likely whatever the dataset's size,
        and a checkpoint holds an epoch and a position, not elements
        (:mod:`feedline.transforms.global_shuffle`).

        Example:
            >>> import feedline as fl
            >>> ds = fl.Dataset.range(6).global_shuffle(seed=4)
            >>> sorted(int(x) for x in ds)
            [0, 1, 2, 3, 4, 5]
        """
        return build("global_shuffle", self, seed, reshuffle_each_iteration, name)

    def rejection_resample(self, class_func: Callable[..., Any], target_dist: Sequence[float],
                           initial_dist: Sequence[float] | None = None,
                           seed: int | None = None, name: str | None = None) -> Dataset:
        """Resample towards the class distribution ``target_dist``, yielding ``(class,
        element)`` pairs, with tf.data's algorithm: elements may be dropped or repeated, and
        ``initial_dist=None`` estimates the input's distribution while reading
        (:mod:`feedline.transforms.rejection_resample`).

        Example:
            >>> import feedline as fl, numpy as np
            >>> ds = fl.Dataset.from_tensor_slices(np.array([0, 0, 0, 1] * 250))
            >>> out = ds.rejection_resample(lambda c: c, [0.5, 0.5], [0.75, 0.25], seed=0)
            >>> share = np.mean([int(c) for c, _ in out])
            >>> bool(0.4 < share < 0.6)
            True
        """
        return build("rejection_resample", self, class_func, target_dist, initial_dist, seed, name)

    def repeat(self, count: int | None = None, name: str | None = None) -> Dataset:
        """Repeat the input ``count`` times (``None`` or -1: forever).

        Example:
            >>> import feedline as fl
            >>> [int(x) for x in fl.Dataset.range(2).repeat(2)]
            [0, 1, 0, 1]
        """
        return build("repeat", self, count, name)

    def take(self, count: int, name: str | None = None) -> Dataset:
        """The first ``count`` elements (-1: all).

        Example:
            >>> import feedline as fl
            >>> [int(x) for x in fl.Dataset.range(5).take(2)]
            [0, 1]
        """
        return build("take", self, count, name)

    def skip(self, count: int, name: str | None = None) -> Dataset:
        """All but the first ``count`` elements (-1: skip everything).

        Example:
            >>> import feedline as fl
            >>> [int(x) for x in fl.Dataset.range(5).skip(3)]
            [3, 4]
        """
        return build("skip", self, count, name)

    def take_while(self, predicate: Callable[..., Any], name: str | None = None) -> Dataset:
        """Elements up to (not including) the first for which ``predicate`` is false.

        Example:
            >>> import feedline as fl
            >>> [int(x) for x in fl.Dataset.range(10).take_while(lambda x: x < 3)]
            [0, 1, 2]
        """
        return build("take_while", self, predicate, name)

    def shard(self, num_shards: int, index: int, name: str | None = None) -> Dataset:
        """Every ``num_shards``-th element starting at ``index``.

        Example:
            >>> import feedline as fl
            >>> [int(x) for x in fl.Dataset.range(10).shard(3, 1)]
            [1, 4, 7]
        """
        return build("shard", self, num_shards, index, name)

    def distribute(self, input_context: InputContext, policy: AutoShardPolicy | None = None
                   ) -> Dataset:
        """This input pipeline's share of a data-parallel job (tf.data's auto-sharding).

        Every input pipeline builds the same dataset and calls ``distribute`` with its
        :class:`~feedline.InputContext`; the shares are disjoint and together hold every
        element. ``policy`` (an :class:`~feedline.AutoShardPolicy`; ``None``: the pipeline's
        ``Options.distribute``) picks FILE, DATA or, by default, AUTO: a random-access
        pipeline is read by index -- equal shares, elastic checkpoints -- else by file,
        else by element (:mod:`feedline.distribute.distribute`).

        Example:
            >>> import feedline as fl
            >>> ctx = fl.InputContext(num_input_pipelines=2, input_pipeline_id=1)
            >>> [int(x) for x in fl.Dataset.range(7).distribute(ctx)]
            [1, 3, 5]
        """
        return build("distribute", self, input_context, policy)

    def enumerate(self, start: int = 0, name: str | None = None) -> Dataset:
        """Pairs ``(index, element)`` with index counting from ``start``.

        Example:
            >>> import feedline as fl
            >>> [(int(i), x) for i, x in fl.Dataset.from_tensor_slices([b"a", b"b"]).enumerate(5)]
            [(5, b'a'), (6, b'b')]
        """
        return build("enumerate", self, start, name)

    def window(self, size: int, shift: int | None = None, stride: int = 1,
               drop_remainder: bool = False, name: str | None = None) -> Dataset:
        """Windows of ``size`` elements as datasets, each starting ``shift`` after the last.

        Example:
            >>> import feedline as fl
            >>> ds = fl.Dataset.range(5).window(3, shift=2).flat_map(lambda w: w.batch(3))
            >>> [b.tolist() for b in ds]
            [[0, 1, 2], [2, 3, 4], [4]]
        """
        return build("window", self, size, shift, stride, drop_remainder, name)

    def group_by_window(self, key_func: Callable[..., Any],
                        reduce_func: Callable[[Any, Dataset], Dataset],
                        window_size: int | None = None,
                        window_size_func: Callable[[Any], Any] | None = None,
                        name: str | None = None) -> Dataset:
        """Group elements by ``key_func``'s integer key; each window of ``window_size`` (or
        ``window_size_func(key)``) elements of one key goes to ``reduce_func(key, window)``,
        a dataset whose elements are the output. Groups left at the end are reduced in key
        order, as tf.data does (:mod:`feedline.transforms.group_by_window`).

        Example:
            >>> import feedline as fl
            >>> ds = fl.Dataset.range(10).group_by_window(
            ...     lambda x: x % 2, lambda key, window: window.batch(4), window_size=4)
            >>> [b.tolist() for b in ds]
            [[0, 2, 4, 6], [1, 3, 5, 7], [8], [9]]
        """
        return build("group_by_window", self, key_func, reduce_func, window_size, window_size_func,
                     name)

    def bucket_by_sequence_length(self, element_length_func: Callable[..., Any],
                                  bucket_boundaries: Sequence[int],
                                  bucket_batch_sizes: Sequence[int],
                                  padded_shapes: Element = None, padding_values: Element = None,
                                  pad_to_bucket_boundary: bool = False,
                                  no_padding: bool = False, drop_remainder: bool = False,
                                  name: str | None = None) -> Dataset:
        """Batch elements of similar length together: a bucket per length range
        (``bucket_boundaries``), each with its batch size, padded per batch
        (:mod:`feedline.transforms.bucket_by_sequence_length`).

        Example:
            >>> import feedline as fl, numpy as np
            >>> ds = fl.Dataset.from_tensor_slices([1, 4, 2, 5]).map(lambda n: np.ones(n))
            >>> ds = ds.bucket_by_sequence_length(len, bucket_boundaries=[3],
            ...                                   bucket_batch_sizes=[2, 2])
            >>> [b.shape for b in ds]
            [(2, 2), (2, 5)]
        """
        return build("bucket_by_sequence_length", self, element_length_func, bucket_boundaries,
                     bucket_batch_sizes, padded_shapes, padding_values, pad_to_bucket_boundary,
                     no_padding, drop_remainder, name)

    def scan(self, initial_state: Element, scan_func: Callable[[Any, Any], tuple[Any, Any]],
             name: str | None = None) -> Dataset:
        """Carry a state through the elements: ``scan_func(state, element) -> (state, output)``.

        Example:
            >>> import numpy as np, feedline as fl
            >>> ds = fl.Dataset.range(4).scan(np.int64(0), lambda s, x: (s + x, s + x))
            >>> [int(x) for x in ds]
            [0, 1, 3, 6]
        """
        return build("scan", self, initial_state, scan_func, name)

    def pack_sequences(self, length: int | Mapping[str, int], method: str = "first_fit",
                       num_bins: int = 16, overflow: str = "split",
                       padding_value: int | float = 0) -> Dataset:
        """Pack dicts of 1-D token sequences into rows of ``length`` tokens, with
        ``<feature>_segment_ids`` and ``<feature>_positions`` (first fit over ``num_bins``
        open rows, or ``method="concat_and_split"``). Checkpoints resume exactly.

        See :class:`~feedline.transforms.pack_sequences.PackSequencesDataset`.

        Example:
            >>> import feedline as fl
            >>> ds = fl.Dataset.from_list([{"t": [1, 2]}, {"t": [3]}])
            >>> row = next(iter(ds.pack_sequences(4)))
            >>> row["t"].tolist(), row["t_segment_ids"].tolist(), row["t_positions"].tolist()
            ([1, 2, 3, 0], [1, 1, 2, 0], [0, 1, 0, 0])
        """
        return build("pack_sequences", self, length, method, num_bins, overflow, padding_value)

    def unique(self, name: str | None = None) -> Dataset:
        """Drop elements seen before (scalar int or bytes elements, as in tf.data).

        Example:
            >>> import feedline as fl
            >>> [int(x) for x in fl.Dataset.from_tensor_slices([1, 2, 1, 3, 2]).unique()]
            [1, 2, 3]
        """
        return build("unique", self, name)

    def prefetch(self, buffer_size: int | None, name: str | None = None) -> Dataset:
        """Produce up to ``buffer_size`` elements ahead on a background thread (``AUTOTUNE``
        or ``None``, as tf.data: tuned).

        Example:
            >>> import feedline as fl
            >>> [int(x) for x in fl.Dataset.range(3).prefetch(2)]
            [0, 1, 2]
        """
        return build("prefetch", self, buffer_size, name)

    def multiprocess(self, num_workers: int = AUTOTUNE, *, deterministic: bool | None = None,
                     buffer_size: int = 2, name: str | None = None) -> Dataset:
        """Run this pipeline in ``num_workers`` worker processes, each on a shard of the input.

        Every core can then run the pipeline's Python (parsing, shuffling, batching, user
        functions) instead of one, under the GIL, competing with the training loop. Put it
        at the end of the pipeline, after ``batch``: each worker sends finished batches, and
        their arrays reach the consumer through shared memory, without copies. The input is
        sharded by file when the pipeline reads files, else by element; what that changes in
        element order, and how to get output identical for any ``num_workers``, is in
        :mod:`feedline.placement.multiprocess`.

        Args:
            num_workers: Processes; ``AUTOTUNE``: one per CPU (within the CPU budget).
            deterministic: ``False`` takes elements from whichever worker has one ready;
                ``None`` defers to ``Options.deterministic`` (default: workers in turn).
            buffer_size: Elements each worker may have ready ahead of the consumer.
            name: Shown in errors and process names.

        Example:
            >>> import feedline as fl
            >>> ds = fl.Dataset.range(8).map(lambda x: x * 10).batch(2).multiprocess(2)
            >>> [b.tolist() for b in ds]
            [[0, 10], [20, 30], [40, 50], [60, 70]]
        """
        return build("multiprocess", self, num_workers, deterministic, buffer_size, name)

    def snapshot(self, path: str, compression: str | None = "AUTO",
                 reader_func: Callable[[list[Dataset]], Dataset] | None = None,
                 shard_func: Callable[[Any], Any] | None = None,
                 name: str | None = None) -> Dataset:
        """Compute this pipeline once into ``path/<fingerprint>/`` and read it back after.

        The first iteration writes while producing; later ones (any run, any process)
        read; a changed pipeline writes a new snapshot beside the old; a crashed write is
        resumed, never read as complete (:mod:`feedline.transforms.snapshot`).

        Example:
            >>> import feedline as fl, tempfile
            >>> ds = fl.Dataset.range(3).map(lambda x: x + 1).snapshot(tempfile.mkdtemp())
            >>> [int(x) for x in ds.repeat(2)]
            [1, 2, 3, 1, 2, 3]
        """
        return build("snapshot", self, path, compression, reader_func, shard_func, name)

    def cache(self, filename: str = "", name: str | None = None) -> Dataset:
        """Keep the elements of the first complete pass in memory and replay them afterwards.

        Example:
            >>> import feedline as fl
            >>> ds = fl.Dataset.range(3).cache()
            >>> [int(x) for x in ds.repeat(2)]
            [0, 1, 2, 0, 1, 2]
        """
        return build("cache", self, filename, name)

    def ignore_errors(self, log_warning: bool = False, name: str | None = None) -> Dataset:
        """Drop elements whose computation raised an error, counting them.

        Example:
            >>> import feedline as fl
            >>> ds = fl.Dataset.from_tensor_slices([1.0, 0.0, 2.0]).map(lambda x: 1 / int(x))
            >>> [float(x) for x in ds.ignore_errors()]
            [1.0, 0.5]
        """
        return build("ignore_errors", self, log_warning, name)

    def concatenate(self, dataset: Dataset, name: str | None = None) -> Dataset:
        """This dataset's elements followed by ``dataset``'s.

        Example:
            >>> import feedline as fl
            >>> [int(x) for x in fl.Dataset.range(2).concatenate(fl.Dataset.range(5, 7))]
            [0, 1, 5, 6]
        """
        return build("concatenate", self, dataset, name)

    def apply(self, transformation_func: Callable[[Dataset], Dataset]) -> Dataset:
        """``transformation_func(self)``: lets reusable pipeline pieces chain fluently.

        Example:
            >>> import feedline as fl
            >>> [int(x) for x in fl.Dataset.range(5).apply(lambda ds: ds.skip(3))]
            [3, 4]
        """
        result = transformation_func(self)
        if not isinstance(result, Dataset):
            raise TypeError(f"apply(): the function returned {type(result).__name__}, not a Dataset")
        return result

    def with_options(self, options: Options, name: str | None = None) -> Dataset:
        """The same dataset with ``options`` in force for the whole pipeline.

        Example:
            >>> import feedline as fl
            >>> fl.Dataset.range(3).with_options(fl.Options(seed=4)).options().seed
            4
        """
        return build("with_options", self, options, name)

    def save(self, path: str, compression: str | None = None,
             shard_func: Callable[[Any], Any] | None = None,
             checkpoint_args: dict[str, Any] | None = None) -> None:
        """Write every element to ``path`` (a folder, local or fsspec) for :meth:`load`.

        Writing is chunked and committed in rounds: after a crash, ``save`` again with the
        same pipeline resumes after the last committed round
        (:mod:`feedline.snapshot.save_load`). ``compression``: ``None``, ``"AUTO"``/``"ZSTD"``,
        ``"LZ4"``, ``"GZIP"``.

        Example:
            >>> import feedline as fl, tempfile
            >>> folder = tempfile.mkdtemp()
            >>> fl.Dataset.range(4).map(lambda x: x * x).save(folder, compression="AUTO")
            >>> [int(x) for x in fl.Dataset.load(folder)]
            [0, 1, 4, 9]
        """
        build("save", self, path, compression, shard_func, checkpoint_args)

    def reduce(self, initial_state: Element, reduce_func: Callable[[Any, Any], Any]) -> Element:
        """Fold every element into a state: ``state = reduce_func(state, element)``.

        As in tf.data, the state keeps the structure and dtypes of ``initial_state``: a
        ``reduce_func`` returning others is a ``TypeError`` naming the element (shapes may
        change).

        Example:
            >>> import feedline as fl, numpy as np
            >>> int(fl.Dataset.range(5).reduce(np.int64(0), lambda s, x: s + x))
            10
        """
        return build("reduce", self, initial_state, reduce_func)

    def __repr__(self) -> str:
        """The pipeline: the calls that build it, with their key arguments.

        Example:
            >>> import feedline as fl
            >>> fl.Dataset.range(8).batch(4, drop_remainder=True)
            <feedline.Dataset range(0, 8).batch(4, drop_remainder=True)>
        """
        return build("__repr__", self)

    def get_single_element(self, name: str | None = None) -> Element:
        """The dataset's only element (tf.data's ``get_single_element``): an empty dataset or
        a second element is an :class:`~feedline.InvalidArgumentError`.

        Example:
            >>> import feedline as fl
            >>> int(fl.Dataset.range(3).skip(2).get_single_element())
            2
        """
        return build("get_single_element", self, name)

    @staticmethod
    def from_list(elements: list[Any], name: str | None = None) -> Dataset:
        """One element per item of ``elements`` (tf.data's ``from_list``): items may differ
        in shape, not in structure or dtype; random access.

        Example:
            >>> import feedline as fl
            >>> [(int(a), b) for a, b in fl.Dataset.from_list([(1, b"x"), (2, b"y")])]
            [(1, b'x'), (2, b'y')]
        """
        return build("from_list", elements, name)

    def assert_cardinality(self, expected_cardinality: int, name: str | None = None) -> Dataset:
        """The same elements, reporting ``expected_cardinality`` (tf.data's
        ``assert_cardinality``); reading checks it (an input ending early, or longer, is an
        :class:`~feedline.InvalidArgumentError` in tf.data's words).

        Example:
            >>> import feedline as fl
            >>> fl.Dataset.range(9).filter(lambda x: x % 3 == 0).assert_cardinality(3).cardinality()
            3
        """
        return build("assert_cardinality", self, expected_cardinality, name)

    def pad_to_cardinality(self, cardinality: int, mask_key: str = "valid",
                           name: str | None = None) -> Dataset:
        """Dict elements padded with zero elements up to ``cardinality`` elements, ``mask_key``
        saying which are real (tf.data's ``pad_to_cardinality``).

        Example:
            >>> import feedline as fl, numpy as np
            >>> ds = fl.Dataset.from_tensor_slices({"x": np.array([7], np.int32)})
            >>> [(int(e["x"]), bool(e["valid"])) for e in ds.pad_to_cardinality(2)]
            [(7, True), (0, False)]
        """
        return build("pad_to_cardinality", self, cardinality, mask_key, name)

    def group_by_reducer(self, key_func: Callable[..., Any], reducer: Any,
                         name: str | None = None) -> Dataset:
        """Fold the elements of each int64 key into a state with ``reducer``
        (:class:`feedline.Reducer`); one output per key at the input's end (tf.data's
        ``group_by_reducer``).

        Example:
            >>> import feedline as fl, numpy as np
            >>> r = fl.Reducer(lambda k: np.int64(0), lambda s, x: s + 1, lambda s: s)
            >>> [int(n) for n in fl.Dataset.range(5).group_by_reducer(lambda x: x % 2, r)]
            [3, 2]
        """
        return build("group_by_reducer", self, key_func, reducer, name)

    def sparse_batch(self, batch_size: int, row_shape: Any,
                     name: str | None = None) -> Dataset:
        """Batch arrays of up to ``row_shape`` into one :class:`~feedline.SparseValues` per
        batch (tf.data's ``sparse_batch``; ``None``/-1 dims: the largest in the batch).

        Example:
            >>> import feedline as fl, numpy as np
            >>> ds = fl.Dataset.range(3).map(lambda n: np.full(n, n)).sparse_batch(3, [2])
            >>> next(iter(ds)).to_dense().tolist()
            [[0, 0], [1, 0], [2, 2]]
        """
        return build("sparse_batch", self, batch_size, row_shape, name)


def _upstream_first(dataset: Dataset) -> list[Dataset]:
    """Every node of the graph, inputs before the nodes reading them (each node once)."""
    order: list[Dataset] = []
    seen: set[int] = set()
    stack: list[tuple[Dataset, bool]] = [(dataset, False)]
    while stack:
        node, expanded = stack.pop()
        if expanded:
            order.append(node)
            continue
        if id(node) in seen:
            continue
        seen.add(id(node))
        stack.append((node, True))
        stack.extend((child, False) for child in reversed(node._inputs))
    return order


def _routing_statistics(make: Callable[[Any, IteratorContext], DatasetIterator]
                        ) -> Callable[[Any, IteratorContext], DatasetIterator]:
    @functools.wraps(make)
    def _make_iterator(self: Dataset, ctx: IteratorContext) -> DatasetIterator:
        statistics = ctx.statistics
        if statistics is None:
            return make(self, ctx)
        return statistics.build(self, ctx, make)

    _make_iterator._routes_statistics = True  # type: ignore[attr-defined]
    return _make_iterator

