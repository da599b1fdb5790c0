"""Random access: element ``i`` of a dataset without reading the ``i`` elements before it.

Some pipelines can compute any element from its index: ``range``, ``from_tensor_slices``,
TFRecord files through an index of record offsets, and ``map``, ``batch``, ``take``,
``skip``, ``shard``, ``prefetch``, ``with_options``, ``global_shuffle``, a finite
``repeat`` and an ``unbatch`` of batches of a statically known size over those. For them
``len(ds)`` and ``ds[i]`` work, ``global_shuffle`` can permute the indices instead of
filling a buffer, and a data-parallel replica reads only its own elements
(:mod:`feedline.distribute.index_shard`), so a checkpoint is an index, not a buffer.

Two ways to read one element: ``ds[i]`` indexes like a Python sequence (``ds[-1]`` is the
last element), and :func:`at` is tf.data's ``tf.data.experimental.at`` (a negative index
is out of range, an ``OutOfRangeError``).

A node offers random access through two methods of :class:`~feedline.core.dataset.Dataset`:
``_offers_random_access()`` (decided from the graph alone, opening nothing) and
``_random_reader(ctx)``, which opens a :class:`RandomAccessReader`. Readers may hold open
files; ``get`` may be called from several threads at once.
"""

from __future__ import annotations

import abc
import operator
from collections.abc import Sequence
from typing import Any, Protocol, Self, TypeVar

from feedline.core.errors import OutOfRangeError
from feedline.core.graph import Node, graph_nodes
from feedline.core.iterator import IteratorContext
from feedline.core.options import Options
from feedline.core.traits import OperationTraits

State = dict[str, Any]


class RandomAccessNode(Protocol):
    """What random access asks of a dataset node (every :class:`~feedline.core.dataset.
    Dataset` is one; this module is below it, which imports it)."""

    @property
    def _inputs(self) -> Sequence[RandomAccessNode]: ...
    def traits(self) -> OperationTraits: ...
    def options(self) -> Options: ...
    def _offers_random_access(self) -> bool: ...
    def _random_reader(self, ctx: IteratorContext) -> RandomAccessReader: ...


NodeT = TypeVar("NodeT", bound=RandomAccessNode)

RANDOM_ACCESS_STAGES = ("range", "from_tensor_slices", ("TFRecordDataset (uncompressed, a list "
                        "of file names)"), "map", "batch", "take", "skip", "shard", "prefetch",
                        "with_options", "global_shuffle", "repeat (a finite count)",
                        "unbatch (of batches of a static size)")
"""The stages that can offer random access, for error messages."""


class RandomAccessReader(abc.ABC):
    """Element ``i`` of a dataset for any ``i`` in ``[0, len(reader))``.

    Subclasses implement ``__len__`` and ``get``; ``get_many`` has a loop as default and
    readers override it where a whole list is cheaper (NumPy fancy indexing, sorted file
    reads). ``state``/``load_state`` carry what a reader's elements depend on besides the
    index (the epoch of a reshuffled ``global_shuffle``), nested through its inputs.

    Example:
        >>> import feedline as fl
        >>> with open_reader(fl.Dataset.range(10, 20)) as reader:
        ...     len(reader), int(reader.get(3)), [int(x) for x in reader.get_many([0, 9])]
        (10, 13, [10, 19])
    """

    def __init__(self, inputs: Sequence[RandomAccessReader] = ()) -> None:
        self._inputs = tuple(inputs)

    @abc.abstractmethod
    def __len__(self) -> int:
        """Number of elements."""

    @abc.abstractmethod
    def get(self, index: int) -> Any:
        """Element ``index`` (``0 <= index < len(self)``, checked by the caller)."""

    def get_many(self, indices: Sequence[int]) -> list[Any]:
        """Elements ``indices``, in that order."""
        get = self.get
        return [get(int(i)) for i in indices]

    def state(self) -> State:
        """What this reader's elements depend on besides the index (inputs' included)."""
        nested = [reader.state() for reader in self._inputs]
        return {"inputs": nested} if any(nested) else {}

    def load_state(self, state: State) -> None:
        """Restore what :meth:`state` returned."""
        for reader, saved in zip(self._inputs, state.get("inputs", ()), strict=False):
            reader.load_state(saved)

    def close(self) -> None:
        """Release files and other resources (inputs' included); idempotent."""
        for reader in self._inputs:
            reader.close()

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()


class DerivedReader(RandomAccessReader):
    """A reader computing its elements from one input reader (map, shard, take, ...).

    Example:
        >>> import feedline as fl
        >>> class Doubled(DerivedReader):
        ...     def get(self, index):
        ...         return 2 * self.input.get(index)
        >>> with Doubled(open_reader(fl.Dataset.range(5))) as reader:
        ...     int(reader.get(4))
        8
    """

    def __init__(self, input_reader: RandomAccessReader) -> None:
        super().__init__([input_reader])
        self.input = input_reader

    def __len__(self) -> int:
        return len(self.input)

    def get(self, index: int) -> Any:
        return self.input.get(index)

    def get_many(self, indices: Sequence[int]) -> list[Any]:
        return self.input.get_many(indices)


class WindowReader(DerivedReader):
    """Input elements ``start`` to ``start + count`` (``count`` -1: to the end): skip, take.

    Example:
        >>> import feedline as fl
        >>> reader = WindowReader(open_reader(fl.Dataset.range(10)), 7, -1)
        >>> len(reader), int(reader.get(0))
        (3, 7)
    """

    def __init__(self, input_reader: RandomAccessReader, start: int, count: int) -> None:
        super().__init__(input_reader)
        available = max(0, len(input_reader) - start)
        self._start = min(start, len(input_reader))
        self._length = available if count < 0 else min(count, available)

    def __len__(self) -> int:
        return self._length

    def get(self, index: int) -> Any:
        return self.input.get(self._start + index)

    def get_many(self, indices: Sequence[int]) -> list[Any]:
        start = self._start
        return self.input.get_many([start + int(i) for i in indices])


class StrideReader(DerivedReader):
    """Input elements ``offset``, ``offset + stride``, ... (``shard``).

    Example:
        >>> import feedline as fl
        >>> reader = StrideReader(open_reader(fl.Dataset.range(10)), 1, 4)
        >>> len(reader), [int(x) for x in reader.get_many([0, 1, 2])]
        (3, [1, 5, 9])
    """

    def __init__(self, input_reader: RandomAccessReader, offset: int, stride: int) -> None:
        super().__init__(input_reader)
        n = len(input_reader)
        self._offset, self._stride = offset, stride
        self._length = n // stride + (1 if offset < n % stride else 0)

    def __len__(self) -> int:
        return self._length

    def get(self, index: int) -> Any:
        return self.input.get(self._offset + index * self._stride)

    def get_many(self, indices: Sequence[int]) -> list[Any]:
        offset, stride = self._offset, self._stride
        return self.input.get_many([offset + int(i) * stride for i in indices])


def reads_vary_by_epoch(dataset: Node) -> bool:
    """Whether the elements a reader of ``dataset`` gives depend on the epoch it is opened in
    (a ``global_shuffle`` that reshuffles each iteration), so that one reader cannot stand
    for several epochs (``repeat``).

    Example:
        >>> import feedline as fl
        >>> reads_vary_by_epoch(fl.Dataset.range(4).global_shuffle(seed=1).map(abs))
        True
        >>> reads_vary_by_epoch(fl.Dataset.range(4).global_shuffle(1, False))
        False
    """
    return any(getattr(node, "_reads_vary_by_epoch", False) for node in graph_nodes(dataset))
    return False


def supports_random_access(dataset: RandomAccessNode) -> bool:
    """Whether ``ds[i]`` works for ``dataset`` (decided from the graph, nothing is opened).

    Example:
        >>> import feedline as fl
        >>> supports_random_access(fl.Dataset.range(5).map(lambda x: x + 1).batch(2))
        True
        >>> supports_random_access(fl.Dataset.range(5).filter(lambda x: x > 1))
        False
    """
    return dataset._offers_random_access()


def random_access_blocker(dataset: NodeT) -> NodeT | None:
    """The stage that keeps ``dataset`` from random access (``None`` if it has it).

    Example:
        >>> import feedline as fl
        >>> random_access_blocker(fl.Dataset.range(5).filter(lambda x: x > 1).map(abs)).name
        'filter(<lambda>)'
    """
    node = dataset
    while not node._offers_random_access():
        inputs = node._inputs
        if (len(inputs) == 1 and node.traits().random_access_from_input
                and not inputs[0]._offers_random_access()):
            node = inputs[0]  # type: ignore[assignment]  # a node's inputs are of its kind
            continue
        return node
    return None


def describe_stage(node: object) -> str:
    """A stage's name for messages: its ``name`` if it has one, else its class."""
    return str(getattr(node, "name", None) or type(node).__name__)


def require_random_access(dataset: RandomAccessNode, operation: str) -> None:
    """Raise a ``TypeError`` naming the stage that keeps ``dataset`` from random access.

    Example:
        >>> import feedline as fl
        >>> require_random_access(fl.Dataset.range(3).repeat(), "global_shuffle")
        Traceback (most recent call last):
        ...
        TypeError: global_shuffle needs random access to its input, but stage 'repeat' ...
    """
    blocker = random_access_blocker(dataset)
    if blocker is None:
        return
    explain = getattr(blocker, "_no_random_access_reason", None)
    reason = explain() if callable(explain) else None
    raise TypeError(
        f"{operation} needs random access to its input, but stage {describe_stage(blocker)!r} "
        f"({type(blocker).__name__}) does not offer it: "
        + (reason or "it cannot compute element i without the elements before it (or has "
                     "no known length)")
        + f". Random access comes from {', '.join(RANDOM_ACCESS_STAGES)} over a "
        "random-access input")


def open_reader(dataset: RandomAccessNode, ctx: IteratorContext | None = None,
                operation: str = "random access") -> RandomAccessReader:
    """Open a reader of ``dataset`` (a ``TypeError`` if it has no random access).

    Example:
        >>> import feedline as fl
        >>> with open_reader(fl.Dataset.from_tensor_slices([5, 6, 7])) as reader:
        ...     int(reader.get(2))
        7
    """
    require_random_access(dataset, operation)
    return dataset._random_reader(ctx or IteratorContext(options=dataset.options()))


def _as_index(index: Any) -> int:
    if isinstance(index, (bool, slice)):
        raise TypeError(f"dataset indices must be integers, not {type(index).__name__}")
    try:
        return operator.index(index)
    except TypeError:
        raise TypeError(
            f"dataset indices must be integers, not {type(index).__name__}") from None


def element_at(dataset: RandomAccessNode, index: Any) -> Any:
    """``dataset[index]``: negative indices count from the end, as for a list.

    Raises:
        OutOfRangeError: (an ``IndexError``) The index is outside the dataset.
        TypeError: The index is not an integer, or ``dataset`` has no random access.

    Example:
        >>> import feedline as fl
        >>> int(element_at(fl.Dataset.range(10).map(lambda x: x * x), -2))
        64
    """
    position = _as_index(index)
    with open_reader(dataset, operation="ds[i]") as reader:
        length = len(reader)
        if position < 0:
            position += length
        if not 0 <= position < length:
            raise OutOfRangeError(f"dataset index {index} out of range for {length} elements")
        return reader.get(position)


def at(dataset: RandomAccessNode, index: Any) -> Any:
    """Element ``index`` of ``dataset``, as tf.data's ``tf.data.experimental.at``.

    Unlike ``dataset[index]``, a negative index does not count from the end: like any index
    outside ``[0, len(dataset))`` it is out of range, as in tf.data.

    Raises:
        OutOfRangeError: (an ``IndexError``) ``index`` is negative or not below the length.
        TypeError: ``index`` is not an integer, or ``dataset`` has no random access (an
            infinite ``repeat``, a ``filter``, ...; tf.data's ``FailedPreconditionError``).

    Example:
        >>> import feedline as fl
        >>> ds = fl.Dataset.range(3).repeat(2)
        >>> int(at(ds, 4)), int(ds[-1])
        (1, 2)
        >>> at(ds, -1)
        Traceback (most recent call last):
        ...
        feedline.core.errors.OutOfRangeError: index -1 is out of range [0, 6)
    """
    position = _as_index(index)
    with open_reader(dataset, operation="at()") as reader:
        length = len(reader)
        if not 0 <= position < length:
            raise OutOfRangeError(f"index {index} is out of range [0, {length})")
        return reader.get(position)
