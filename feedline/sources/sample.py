"""``Dataset.sample_from_datasets`` and ``Dataset.choose_from_datasets``.

Both interleave several datasets element by element, the way tf.data's
``DirectedInterleaveDataset`` does: a selector (random draws or a dataset of indices) says
which input gives the next element. An exhausted input either ends the whole dataset
(``stop_on_empty_dataset=True``) or is dropped while the others go on.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from feedline.core.constants import INFINITE, UNKNOWN
from feedline.core.dataset import Dataset
from feedline.core.errors import CheckpointError
from feedline.core.iterator import DatasetIterator, IteratorContext, State
from feedline.core.registry import operation
from feedline.core.seed_epochs import EpochCounter, restored_epoch, start_epoch
from feedline.core.seeds import (
    fallback_seed,
    make_rng,
    resolve_seed,
    rng_from_json,
    rng_state_to_json,
)
from feedline.core.structure import Element, TensorSpec
from feedline.core.traits import POSITIONAL
from feedline.core.validation import validate_seed
from feedline.transforms.concatenate import common_spec

_OPTIONS_TAG = 0x5A4D
_EPOCH_TAG = 0xE90C  # separates the epoch from the seed words it is appended to


def _check_datasets(datasets: Sequence[Dataset], what: str) -> tuple[Dataset, ...]:
    if isinstance(datasets, Dataset) or not isinstance(datasets, Sequence):
        raise TypeError(f"{what}: `datasets` must be a list or tuple of datasets, "
                        f"got {type(datasets).__name__}")
    datasets = tuple(datasets)
    if not datasets:
        raise ValueError(f"{what}: `datasets` must not be empty")
    for i, dataset in enumerate(datasets):
        if not isinstance(dataset, Dataset):
            raise TypeError(f"{what}: datasets[{i}] is a {type(dataset).__name__}, not a Dataset")
    first = datasets[0]._element_spec()
    for i, dataset in enumerate(datasets[1:], start=1):
        # Raises StructureError naming the pair when structures or dtypes differ.
        common_spec(first, dataset._element_spec(), f"{what}: datasets[0] and datasets[{i}]")
    return datasets


def _merged_spec(datasets: Sequence[Dataset], what: str) -> Element | None:
    spec = datasets[0]._element_spec()
    for dataset in datasets[1:]:
        spec = common_spec(spec, dataset._element_spec(), what)
    return spec


def _weights_vector(weights: Any, n: int, what: str) -> np.ndarray:
    """Weights as a float64 vector: ``n`` finite non-negative values."""
    try:
        vector = np.asarray(weights, dtype=np.float64)
    except (TypeError, ValueError) as error:
        raise TypeError(f"{what}: weights must be {n} numbers, got {weights!r}") from error
    if vector.shape != (n,):
        raise ValueError(f"{what}: weights must have shape ({n},) (one per dataset), "
                         f"got shape {vector.shape}")
    if not np.all(np.isfinite(vector)) or np.any(vector < 0):
        raise ValueError(f"{what}: weights must be finite and >= 0, got {vector.tolist()}")
    return vector


def _check_weights(weights: Any, n: int, what: str) -> np.ndarray:
    """One element of a weights dataset as a float64 vector: ``n`` finite non-negative
    floats, not all zero (there would be nothing to draw from)."""
    vector = _weights_vector(weights, n, what)
    if np.asarray(weights).dtype.kind != "f":
        raise TypeError(f"{what}: weights must be floats (float32 or float64, as tf.data), "
                        f"got {np.asarray(weights).dtype} {vector.tolist()}")
    if not vector.sum() > 0:
        raise ValueError(f"{what}: at least one weight must be positive, got {vector.tolist()}")
    return vector


def constant_weights(weights: Any, n: int, what: str) -> np.ndarray:
    """Constant weights as tf.data reads them, as a float64 vector.

    A dataset of weight 0 is never drawn; when every weight is 0 nothing is, and the
    result is empty (tf.data: ``datasets[0].take(0)``). The positive weights must be floats,
    as tf.data requires (``[1, 1]``: ``TypeError``); tf.data checks only those, so
    ``[0, 0.5]`` passes and ``[1, 0.0]`` does not.

    Example:
        >>> constant_weights([0.25, 0.75], 2, "sample").tolist()
        [0.25, 0.75]
        >>> constant_weights([0, 0], 2, "sample").tolist()  # nothing to draw: empty
        [0.0, 0.0]
        >>> constant_weights([1, 1], 2, "sample")
        Traceback (most recent call last):
        ...
        TypeError: sample: weights must be floats (float32 or float64, as tf.data), got int64 [1, 1]
    """
    vector = _weights_vector(weights, n, what)
    items = list(weights)
    kept = [item for item, value in zip(items, vector.tolist()) if value > 0]
    if kept:
        dtype = np.asarray(kept).dtype
        if dtype not in (np.float32, np.float64):
            raise TypeError(f"{what}: weights must be floats (float32 or float64, as tf.data), "
                            f"got {dtype} {np.asarray(kept).tolist()}")
    return vector


class _SelectIterator(DatasetIterator):
    """What both operations share: the inputs, which are still active, and the end state."""

    def __init__(self, ctx: IteratorContext, datasets: tuple[Dataset, ...],
                 extra: list[DatasetIterator], stop_on_empty: bool) -> None:
        self._datasets = datasets
        self._data: list[DatasetIterator | None] = [d._make_iterator(ctx) for d in datasets]
        self._extra = extra
        super().__init__(ctx, [*self._data, *extra])  # type: ignore[list-item]
        self._stop_on_empty = stop_on_empty
        self._done = False

    def _sync_inputs(self) -> None:
        self._inputs = [it for it in self._data if it is not None] + self._extra

    def _drop(self, i: int) -> None:
        iterator, self._data[i] = self._data[i], None
        if iterator is not None:
            iterator.close()
        self._sync_inputs()

    def _pull(self, i: int) -> tuple[bool, Any]:
        """``(True, element)`` from input ``i``, or ``(False, None)`` when it has ended (then
        the whole dataset ends, or input ``i`` is dropped, as ``stop_on_empty`` says)."""
        iterator = self._data[i]
        assert iterator is not None
        try:
            return True, next(iterator)
        except StopIteration:
            if self._stop_on_empty:
                self._done = True
            else:
                self._drop(i)
                if all(it is None for it in self._data):
                    self._done = True
            return False, None

    def _inputs_state(self) -> list[State | None]:
        return [None if it is None else it.state_dict() for it in self._data]

    def _restore_inputs(self, states: list[State | None]) -> None:
        if not isinstance(states, list) or len(states) != len(self._datasets):
            raise CheckpointError(f"{type(self).__name__}: the state has "
                                  f"{len(states) if isinstance(states, list) else states!r} "
                                  f"inputs, expected {len(self._datasets)}")
        for i, state in enumerate(states):
            if state is None:
                self._drop(i)
                continue
            if self._data[i] is None:
                self._data[i] = self._datasets[i]._make_iterator(self._ctx)
            self._data[i].load_state_dict(state)  # type: ignore[union-attr]
        self._sync_inputs()


@operation("sample_from_datasets")
class SampleFromDatasetsDataset(Dataset):
    """The node of ``Dataset.sample_from_datasets(datasets, weights, seed, stop_on_empty_dataset)``.

    Each element comes from ``datasets[i]`` with probability ``weights[i] / sum(weights)``
    (uniform without weights). ``weights`` may also be a dataset whose elements are such
    vectors, one consumed per draw. When an input is exhausted: with
    ``stop_on_empty_dataset=True`` the dataset ends; otherwise that input is dropped and the
    draws continue among the others with their weights renormalized, until every input with a
    positive weight is exhausted.

    The draws come from NumPy's PCG64 seeded with ``seed`` (else ``Options.seed``, else a seed
    drawn when the dataset is built). With ``rerandomize_each_iteration`` false (the default,
    as in tf.data) every iterator of one dataset makes the same draws, so every epoch of a
    ``repeat()`` picks the inputs in the same order. With it true, iteration ``e`` of this
    dataset object (its ``e``-th epoch under ``repeat``, or in a later ``iter(ds)``: see
    :mod:`feedline.core.seed_epochs`) draws from a generator seeded with the seed and ``e``:
    a new sequence every epoch, the same sequences on every run with the same seed. The
    sequence differs from TensorFlow's, the distribution does not. The state saves the
    generator's state, the epoch and every input's state.

    Constant weights are read as tf.data reads them: a dataset of weight 0 is never drawn,
    all weights 0 give an empty dataset, and the positive weights must be floats (``[1,
    1]`` is a ``TypeError``, as in tf.data); a weights dataset must give float vectors.

    Example:
        >>> import feedline as fl
        >>> a, b = fl.Dataset.from_tensors(b"a").repeat(), fl.Dataset.from_tensors(b"b").repeat()
        >>> picks = list(fl.Dataset.sample_from_datasets([a, b], [0.9, 0.1], seed=0).take(1000))
        >>> 850 < picks.count(b"a") < 950
        True
        >>> x, y = fl.Dataset.range(0, 4), fl.Dataset.range(10, 14)
        >>> epochs = fl.Dataset.sample_from_datasets([x, y], seed=5,
        ...                                          rerandomize_each_iteration=True).repeat(2)
        >>> out = [int(v) for v in epochs]
        >>> sorted(out[:8]) == sorted(out[8:]) == [0, 1, 2, 3, 10, 11, 12, 13]
        True
    """

    TRAITS = POSITIONAL

    # Drawn anew for every dataset object; a checkpoint holds the generator itself. The
    # epoch counter is where this object's iterators are, not what the pipeline is.
    _NOT_FINGERPRINTED = frozenset({"_fallback", "_epochs"})

    def __init__(self, datasets: Sequence[Dataset],
                 weights: Sequence[float] | Dataset | None = None, seed: int | None = None,
                 stop_on_empty_dataset: bool = False,
                 rerandomize_each_iteration: bool | None = None) -> None:
        what = "sample_from_datasets()"
        datasets = _check_datasets(datasets, what)
        self.weights_dataset = weights if isinstance(weights, Dataset) else None
        if self.weights_dataset is not None:
            spec = self.weights_dataset._element_spec()
            if isinstance(spec, TensorSpec) and np.dtype(spec.dtype).kind != "f":
                # tf.data takes their logarithm: a TypeError for integers, as here.
                raise TypeError(f"{what}: the weights dataset must give float vectors "
                                f"(float32 or float64, as tf.data), its elements are {spec}")
            self.weights: np.ndarray | None = None
        elif weights is None:
            self.weights = np.full(len(datasets), 1.0 / len(datasets))
        else:
            self.weights = constant_weights(weights, len(datasets), what)
        extra = [self.weights_dataset] if self.weights_dataset is not None else []
        super().__init__([*datasets, *extra])
        self.num_datasets = len(datasets)
        self.seed = validate_seed(seed, "sample_from_datasets(seed)")
        self._fallback = fallback_seed()
        self.stop_on_empty_dataset = bool(stop_on_empty_dataset)
        # tf.data treats None as False: the same draws every epoch.
        self.rerandomize_each_iteration = bool(rerandomize_each_iteration)
        self._epochs = EpochCounter()

    def _datasets(self) -> tuple[Dataset, ...]:
        return self._inputs[:self.num_datasets]

    def _element_spec(self) -> Element | None:
        return _merged_spec(self._datasets(), "sample_from_datasets()")

    def cardinality(self) -> int:
        cards = [d.cardinality() for d in self._datasets()]
        if self.weights is not None:
            cards = [n for n, w in zip(cards, self.weights) if w > 0]
            if not cards:
                return 0  # every weight is 0: nothing is drawn
            if len(cards) == 1:
                return cards[0]  # tf.data samples from the one input left: it is that input
        elif self._inputs[-1].cardinality() != INFINITE:
            return UNKNOWN  # the weights dataset may end first
        if all(n == INFINITE for n in cards):
            return INFINITE
        if INFINITE in cards and not self.stop_on_empty_dataset:
            return INFINITE  # the finite inputs run out, the infinite one goes on
        # As tf.data: finite inputs give an unknown cardinality, even where every input is
        # drained to its end (stop_on_empty_dataset=False), so that len() and the stages
        # reading the cardinality behave as in a ported pipeline. (With
        # stop_on_empty_dataset=True and an infinite input, tf.data says INFINITE although
        # the first exhausted input ends the draws; UNKNOWN is the truth there.)
        return UNKNOWN

    def _make_iterator(self, ctx: IteratorContext) -> DatasetIterator:
        weights_iterator = (None if self.weights_dataset is None
                            else self._inputs[-1]._make_iterator(ctx))
        seed_words = resolve_seed(self, self.seed, self._fallback, ctx, _OPTIONS_TAG)
        epoch = None
        if self.rerandomize_each_iteration:
            # Counted as shuffle's epochs: each iterator of this node draws anew, and a rerun
            # with the same seed repeats the same epochs.
            epoch = start_epoch(self, self._epochs, ctx)
            seed_words = [*seed_words, _EPOCH_TAG, epoch]
        return SampleIterator(ctx, self._datasets(), self.weights, weights_iterator,
                              make_rng(*seed_words), self.stop_on_empty_dataset, self, epoch)


class SampleIterator(_SelectIterator):
    """Draws an input per element; ``epoch`` is set when the node rerandomizes each iteration."""

    def __init__(self, ctx: IteratorContext, datasets: tuple[Dataset, ...],
                 weights: np.ndarray | None, weights_iterator: DatasetIterator | None,
                 rng: np.random.Generator, stop_on_empty: bool,
                 node: SampleFromDatasetsDataset | None = None, epoch: int | None = None) -> None:
        super().__init__(ctx, datasets, [] if weights_iterator is None else [weights_iterator],
                         stop_on_empty)
        self._weights = weights
        self._weights_iterator = weights_iterator
        self._rng = rng
        self._draws = 0
        self._node = node
        self._epoch = epoch

    def _next_weights(self) -> np.ndarray:
        if self._weights is not None:
            return self._weights
        assert self._weights_iterator is not None
        element = next(self._weights_iterator)  # StopIteration ends the dataset
        try:
            return _check_weights(element, len(self._data), "sample_from_datasets()")
        except (TypeError, ValueError) as error:
            error.add_note(f"feedline: in weights element {self._draws}")
            raise

    def __next__(self) -> Any:
        while not self._done:
            try:
                weights = self._next_weights()
            except StopIteration:
                self._done = True
                break
            finally:
                self._draws += 1  # also counts a draw whose weights were invalid
            active = np.array([it is not None for it in self._data])
            live = np.where(active, weights, 0.0)
            cumulative = np.cumsum(live)
            total = cumulative[-1]
            if total <= 0:
                # Only inputs with zero weight are left: none can ever be drawn again.
                self._done = True
                break
            i = int(np.searchsorted(cumulative, self._rng.random() * total, side="right"))
            i = min(i, int(np.flatnonzero(live)[-1]))  # guards the rounding at the top end
            ok, element = self._pull(i)
            if ok:
                return element
        raise StopIteration

    def _get_state(self) -> State:
        return {"rng": rng_state_to_json(self._rng), "done": self._done, "draws": self._draws,
                "epoch": self._epoch, "inputs": self._inputs_state(),
                "weights": None if self._weights_iterator is None
                else self._weights_iterator.state_dict()}

    def _set_state(self, state: State) -> None:
        self._restore_inputs(state["inputs"])
        if self._weights_iterator is not None:
            self._weights_iterator.load_state_dict(state["weights"])
        self._rng = rng_from_json(state["rng"])
        self._done = bool(state["done"])
        self._draws = int(state["draws"])
        epoch = state.get("epoch")
        if (epoch is None) != (self._epoch is None) or not isinstance(epoch, int | None):
            raise CheckpointError(
                "sample_from_datasets(): the state was saved with rerandomize_each_iteration="
                f"{epoch is not None}, this pipeline has {self._epoch is not None}")
        if epoch is not None and self._node is not None:
            # The next iterator of this node (the next epoch under repeat) continues from here.
            self._epoch = restored_epoch(self._node, self._node._epochs, self._ctx, epoch)


@operation("choose_from_datasets")
class ChooseFromDatasetsDataset(Dataset):
    """The node of ``Dataset.choose_from_datasets(datasets, choice_dataset, stop_on_empty)``.

    Each element of ``choice_dataset`` (an integer scalar ``i`` in ``[0, len(datasets))``)
    takes the next element of ``datasets[i]``. A choice out of range raises ``ValueError``
    (that choice is consumed, so iterating on continues with the next one). A choice of an
    input that was dropped earlier is skipped. The dataset ends with ``choice_dataset``, or
    when a chosen input is exhausted if ``stop_on_empty_dataset`` (the default); otherwise
    that input is dropped and later choices of it are skipped.

    Example:
        >>> import feedline as fl
        >>> x, y = fl.Dataset.from_tensors(b"x").repeat(), fl.Dataset.from_tensors(b"y").repeat()
        >>> choice = fl.Dataset.range(2).repeat(2)
        >>> list(fl.Dataset.choose_from_datasets([x, y], choice))
        [b'x', b'y', b'x', b'y']
    """

    TRAITS = POSITIONAL

    def __init__(self, datasets: Sequence[Dataset], choice_dataset: Dataset,
                 stop_on_empty_dataset: bool = True) -> None:
        what = "choose_from_datasets()"
        datasets = _check_datasets(datasets, what)
        if not isinstance(choice_dataset, Dataset):
            raise TypeError(f"{what}: choice_dataset must be a Dataset, got "
                            f"{type(choice_dataset).__name__}")
        spec = choice_dataset._element_spec()
        if spec is not None and not (isinstance(spec, TensorSpec) and spec.shape == ()
                                     and np.dtype(spec.dtype) == np.int64):
            # tf.data's words; int32 choices too are refused (cast them: .map(np.int64)).
            raise TypeError(f"{what}: Invalid `choice_dataset`. Elements of `choice_dataset` "
                            f"must be scalar int64 tensors but are {spec}.")
        super().__init__([*datasets, choice_dataset])
        self.num_datasets = len(datasets)
        self.stop_on_empty_dataset = bool(stop_on_empty_dataset)

    def _datasets(self) -> tuple[Dataset, ...]:
        return self._inputs[:self.num_datasets]

    def _element_spec(self) -> Element | None:
        return _merged_spec(self._datasets(), "choose_from_datasets()")

    def cardinality(self) -> int:
        choices = self._inputs[-1].cardinality()
        if choices == 0:
            return 0
        if all(d.cardinality() == INFINITE for d in self._datasets()):
            return choices  # every choice gives exactly one element
        return UNKNOWN

    def _make_iterator(self, ctx: IteratorContext) -> DatasetIterator:
        return ChooseIterator(ctx, self._datasets(), self._inputs[-1]._make_iterator(ctx),
                              self.stop_on_empty_dataset)


class ChooseIterator(_SelectIterator):
    def __init__(self, ctx: IteratorContext, datasets: tuple[Dataset, ...],
                 choices: DatasetIterator, stop_on_empty: bool) -> None:
        super().__init__(ctx, datasets, [choices], stop_on_empty)
        self._choices = choices
        self._index = 0

    def _choice(self, value: Any, index: int) -> int:
        array = np.asarray(value)
        if array.shape != () or array.dtype != np.int64:
            raise TypeError(f"choose_from_datasets(): Invalid `choice_dataset`. Elements of "
                            "`choice_dataset` must be scalar int64 tensors but choice element "
                            f"{index} is {array.tolist()!r} ({array.dtype.name}, shape "
                            f"{array.shape}).")
        choice = int(array)
        if not 0 <= choice < len(self._data):
            raise ValueError(f"choose_from_datasets(): choice element {index} is {choice}, "
                             f"outside [0, {len(self._data)}) (there are {len(self._data)} "
                             "datasets)")
        return choice

    def __next__(self) -> Any:
        while not self._done:
            try:
                value = next(self._choices)
            except StopIteration:
                self._done = True
                break
            index = self._index
            self._index += 1
            i = self._choice(value, index)
            if self._data[i] is None:
                continue  # an input dropped earlier: tf.data skips such choices
            ok, element = self._pull(i)
            if ok:
                return element
        raise StopIteration

    def _get_state(self) -> State:
        return {"done": self._done, "index": self._index, "inputs": self._inputs_state(),
                "choice": self._choices.state_dict()}

    def _set_state(self, state: State) -> None:
        self._restore_inputs(state["inputs"])
        self._choices.load_state_dict(state["choice"])
        self._done = bool(state["done"])
        self._index = int(state["index"])
