"""``rejection_resample``: resample a dataset towards a target class distribution.

tf.data 2.21's algorithm (``Dataset.rejection_resample`` in ``dataset_ops.py``), stage for
stage, so the output has its distribution (the random draws themselves differ):

* With ``p`` the initial class distribution and ``t`` the target, ``r = t / p``, ``m =
  min(r)`` and the acceptance probability of class ``i`` is ``a_i = (r_i - m) / (max(r) -
  m)`` (float32, as TensorFlow computes them).
* Each element comes, with probability ``m``, from the input as it is and, with ``1 - m``,
  from a rejection-filtered copy of the input that keeps an element of class ``i`` with
  probability ``a_i`` (``sample_from_datasets`` over the two, ending when either ends). The
  two are separate passes over the input, so an element may come out twice, or not at all.
* Given ``initial_dist``: when ``min(t / p)`` is 1 (``t == p``) the input comes out as it is;
  when it is 0 (a class with target 0) only the filtered copy does.
* Without it, ``p`` is estimated while reading: the classes are counted in blocks of 32
  elements, from counts of 10 per class, and each element of a block uses the estimate
  that includes the whole block (TensorFlow's ``_estimate_initial_dist_ds``).

Elements come out as ``(class, element)`` pairs, as tf.data's.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from feedline.core.constants import INFINITE, UNKNOWN
from feedline.core.dataset import Dataset
from feedline.core.functions import (
    annotate_error,
    bind_free_variables,
    call_with_element,
    function_name,
)
from feedline.core.iterator import DatasetIterator, IteratorContext, State
from feedline.core.registry import operation
from feedline.core.seeds import (
    fallback_seed,
    make_rng,
    resolve_seed,
    rng_from_json,
    rng_state_to_json,
)
from feedline.core.structure import Element, normalize_output
from feedline.core.traits import INDEPENDENT, POSITIONAL
from feedline.core.unary import UnaryDataset, require_callable
from feedline.core.validation import validate_seed
from feedline.sources.sample import SampleFromDatasetsDataset
from feedline.transforms.batch import BatchDataset
from feedline.transforms.map import MapDataset
from feedline.transforms.scan import ScanDataset
from feedline.transforms.unbatch import UnbatchDataset

logger = logging.getLogger(__name__)

ESTIMATION_BLOCK = 32
"""Elements per block of the class-distribution estimate (TensorFlow's
``dist_estimation_batch_size``)."""
SMOOTHING = 10
"""Count every class starts from in the estimate (TensorFlow's ``smoothing_constant``)."""

_TAG = 0x5245  # Options.seed mixing tag of this stage
_TINY = np.finfo(np.float32).tiny


def _distribution(value: Any, what: str, classes: int | None = None) -> np.ndarray:
    try:
        dist = np.asarray(value, dtype=np.float64)
    except (TypeError, ValueError):
        raise TypeError(f"rejection_resample({what}) must be a list of probabilities, got "
                        f"{value!r}") from None
    if dist.ndim != 1 or not len(dist) or (classes is not None and len(dist) != classes):
        need = f"{classes} probabilities (one per class of target_dist)" if classes \
            else "a non-empty list of probabilities"
        raise ValueError(f"rejection_resample({what}) must be {need}, got shape {dist.shape}")
    if not np.all(np.isfinite(dist)) or np.any(dist < 0) or abs(dist.sum() - 1) > 1e-3:
        raise ValueError(f"rejection_resample({what}) must hold probabilities >= 0 adding up "
                         f"to 1, got {dist.tolist()}")
    return dist.astype(np.float32)


def acceptance(initial: np.ndarray, target: np.ndarray) -> tuple[np.ndarray, np.float32]:
    """Per-class acceptance probabilities and the probability of taking an element as it is
    (TensorFlow's ``_calculate_acceptance_probs_with_mixing``, in float32).

    Example:
        >>> a, m = acceptance(np.float32([0.5, 0.25, 0.25]), np.float32([0.25, 0.25, 0.5]))
        >>> a.tolist(), float(m)
        ([0.0, 0.3333333432674408, 1.0], 0.5)
    """
    with np.errstate(divide="ignore", invalid="ignore"):
        ratio = target / (initial + _TINY)
        low, high = ratio.min(), ratio.max()
        return (ratio - low) / (high - low), low


class _Classifier:
    """``class_func`` on an element, checked to be an integer class in ``[0, classes)``."""

    def __init__(self, class_func: Callable[..., Any], classes: int) -> None:
        self.class_func = class_func
        self.classes = classes

    def __call__(self, element: Any) -> Any:
        value = normalize_output(call_with_element(self.class_func, element))
        array = np.asarray(value)
        if array.shape != () or array.dtype.kind not in "iu":
            raise TypeError(f"rejection_resample: class_func must return an integer scalar, "
                            f"got {value!r}")
        if not 0 <= int(array) < self.classes:
            raise ValueError(f"rejection_resample: class_func returned {int(array)}, outside "
                             f"[0, {self.classes}) (one class per entry of target_dist)")
        return value


class _ClassOf:
    """The map to an element's class, with the element (``(class, element)``, tf.data's
    ``add_class_value``) or alone. A 1-tuple element is passed on as its one component, as
    there."""

    def __init__(self, classify: _Classifier, with_element: bool) -> None:
        self.classify = classify
        self.with_element = with_element

    def __call__(self, *components: Any) -> Any:
        element = components[0] if len(components) == 1 else components
        label = self.classify(element)
        return (label, element) if self.with_element else label


def _count_block(counts: np.ndarray, block: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Scan step of the estimate: add a block's classes to the counts; every row of the
    output block (always 32, as TensorFlow tiles it) holds the new estimate."""
    counts = counts + np.bincount(np.asarray(block, np.int64), minlength=len(counts))
    estimate = (counts / counts.sum()).astype(np.float32)
    return counts, np.tile(estimate, (ESTIMATION_BLOCK, 1))


class _Acceptance:
    """:func:`acceptance` of the last estimate seen, kept: an estimate holds for a block."""

    def __init__(self, target: np.ndarray) -> None:
        self.target = target
        self._key = b""
        self._last: tuple[np.ndarray, np.float32, float] | None = None

    def __call__(self, initial: np.ndarray) -> tuple[np.ndarray, np.float32, float]:
        """``(acceptance, mixing probability, share rejected)`` for ``initial``."""
        key = initial.tobytes()
        if key != self._key or self._last is None:
            accept, low = acceptance(initial, self.target)
            self._key = key
            self._last = accept, low, float(np.sum((1 - accept) * initial))
        return self._last


class _Weights:
    """The weights of the two inputs of the mixing for one estimate: ``[m, 1 - m]``."""

    def __init__(self, target: np.ndarray) -> None:
        self.target = target
        self._acceptance = _Acceptance(target)

    def __call__(self, estimate: np.ndarray) -> np.ndarray:
        low = float(np.clip(self._acceptance(estimate)[1], 0.0, 1.0))
        return np.array([low, 1.0 - low])


@operation("rejection_resample")
class RejectionResampleDataset(UnaryDataset):
    """The node of ``Dataset.rejection_resample(class_func, target_dist, initial_dist, seed)``.

    Args:
        input_dataset: The elements.
        class_func: ``element -> int`` class in ``[0, len(target_dist))`` (a tuple's
            components as arguments).
        target_dist: The class distribution to reach.
        initial_dist: The input's class distribution; ``None``: estimated while reading.
        seed: Makes the draws reproducible (else ``Options.seed``, else random).
        name: Shown in errors.

    Example:
        >>> import feedline as fl
        >>> classes = fl.Dataset.from_tensor_slices(np.array([0] * 900 + [1] * 100))
        >>> ds = RejectionResampleDataset(classes.shuffle(1000, seed=1), lambda c: c,
        ...                               [0.5, 0.5], [0.9, 0.1], seed=3)
        >>> counts = np.bincount([int(c) for c, _ in ds])
        >>> bool(abs(counts[0] - counts[1]) < 0.2 * counts.sum())
        True
    """

    TRAITS = INDEPENDENT

    _NOT_FINGERPRINTED = frozenset({"_fallback"})

    def __init__(self, input_dataset: Dataset, class_func: Callable[..., Any],
                 target_dist: Sequence[float], initial_dist: Sequence[float] | None = None,
                 seed: int | None = None, name: str | None = None) -> None:
        super().__init__(input_dataset)
        self.class_func = bind_free_variables(
            require_callable(class_func, "rejection_resample()", "class_func"))
        self.target_dist = _distribution(target_dist, "target_dist")
        self.initial_dist = None if initial_dist is None else _distribution(
            initial_dist, "initial_dist", len(self.target_dist))
        self.seed = validate_seed(seed, "rejection_resample(seed)")
        self._fallback = fallback_seed()
        self.name = name or f"rejection_resample({function_name(class_func)})"

    def _static_ratio(self) -> float | None:
        """``min(target / initial)`` when ``initial_dist`` is given (tf.data's
        ``_get_prob_original_static``): 1 passes the input through, 0 filters only."""
        if self.initial_dist is None:
            return None
        with np.errstate(divide="ignore", invalid="ignore"):
            return float(np.min(self.target_dist / self.initial_dist))

    def _passes_through(self) -> bool:
        """Whether every element comes out once, as it is (the target is the initial
        distribution)."""
        if self.initial_dist is None:
            return False
        ratio = self.target_dist / (self.initial_dist + _TINY)
        # All ratios equal (within float32) would make every acceptance 0/0: nothing to do.
        return self._static_ratio() == 1 or bool(ratio.max() == ratio.min())

    def _element_spec(self) -> Element | None:
        return None  # the class's spec is whatever class_func returns

    def cardinality(self) -> int:
        # tf.data's: the input's when passed through; a filter's (UNKNOWN) when only the
        # filtered copy comes out; else a sample of two inputs, endless if the input is.
        n = self._inputs[0].cardinality()
        if self._passes_through():
            return n
        if self._static_ratio() == 0:
            return UNKNOWN
        return INFINITE if n == INFINITE else UNKNOWN

    def _make_iterator(self, ctx: IteratorContext) -> DatasetIterator:
        words = resolve_seed(self, self.seed, self._fallback, ctx, _TAG)
        return RejectionResampleIterator(ctx, self._graph(words)._make_iterator(ctx))

    def _graph(self, seed_words: list[int]) -> Dataset:
        """The pipeline tf.data builds, out of feedline's own stages (so that it is exactly
        as checkpointable as they are)."""
        data = self._inputs[0]
        classify = _Classifier(self.class_func, len(self.target_dist))
        as_is = MapDataset(data, _ClassOf(classify, with_element=True), name=self.name)
        if self._passes_through():
            return as_is
        draw_seed = int(make_rng(*seed_words, 1).integers(1 << 62))
        if self.initial_dist is not None:
            _, low = acceptance(self.initial_dist, self.target_dist)
            filtered = _RejectDataset(data, None, classify, self.initial_dist, self.target_dist,
                                      [*seed_words, 2], self.name)
            if self._static_ratio() == 0:
                return filtered
            low = float(np.clip(low, 0.0, 1.0))
            weights: Any = [low, 1.0 - low]
        else:
            classes = MapDataset(data, _ClassOf(classify, with_element=False), name=self.name)
            counts = np.full(len(self.target_dist), SMOOTHING, dtype=np.int64)
            estimates = UnbatchDataset(ScanDataset(BatchDataset(classes, ESTIMATION_BLOCK),
                                                   counts, _count_block, name=self.name))
            filtered = _RejectDataset(data, estimates, classify, None, self.target_dist,
                                      [*seed_words, 2], self.name)
            weights = MapDataset(estimates, _Weights(self.target_dist), name=self.name)
        return SampleFromDatasetsDataset([as_is, filtered], weights, seed=draw_seed,
                                         stop_on_empty_dataset=True)


class RejectionResampleIterator(DatasetIterator):
    """Runs the pipeline :meth:`RejectionResampleDataset._graph` builds; its state is that
    pipeline's state."""

    OPERATION = "rejection_resample"

    def __init__(self, ctx: IteratorContext, resampler: DatasetIterator) -> None:
        super().__init__(ctx, [resampler])
        self._resampler = resampler

    def __next__(self) -> Any:
        return next(self._resampler)

    def _get_state(self) -> State:
        return {"resampler": self._resampler.state_dict()}

    def _set_state(self, state: State) -> None:
        self._resampler.load_state_dict(state["resampler"])


class _RejectDataset(Dataset):
    """The filtered copy: ``(class, element)`` for the input elements drawn to be kept, each
    with its class's acceptance probability (tf.data's ``_filter_ds``: ``uniform < a``)."""

    TRAITS = POSITIONAL

    def __init__(self, data: Dataset, estimates: Dataset | None, classify: _Classifier,
                 initial: np.ndarray | None, target: np.ndarray, seed_words: list[int],
                 name: str) -> None:
        super().__init__([data] if estimates is None else [data, estimates])
        self.classify = classify
        self.initial = initial
        self.target = target
        self.seed_words = seed_words
        self.name = name

    def _make_iterator(self, ctx: IteratorContext) -> DatasetIterator:
        iterators = [child._make_iterator(ctx) for child in self._inputs]
        return _RejectIterator(ctx, iterators, self)


class _RejectIterator(DatasetIterator):
    OPERATION = "rejection_resample_filter"

    def __init__(self, ctx: IteratorContext, iterators: list[DatasetIterator],
                 node: _RejectDataset) -> None:
        super().__init__(ctx, iterators)
        self._node = node
        self._rng = make_rng(*node.seed_words)
        self._index = 0
        self._warned = False
        self._acceptance = _Acceptance(node.target)

    def _warn_if_mostly_rejected(self, rejected: float, accept: np.ndarray,
                                 initial: np.ndarray) -> None:
        # tf.data prints this too (tf.print, the first 10 times).
        self._warned = True
        logger.warning("%s: the sampler rejects %.0f%% of the elements (initial "
                       "distribution %s, acceptance %s)", self._node.name, 100 * rejected,
                       np.round(initial, 4).tolist(), np.round(accept, 4).tolist())

    def __next__(self) -> Any:
        node = self._node
        while True:
            element = next(self._inputs[0])
            if len(self._inputs) > 1:
                initial = next(self._inputs[1])
            else:
                initial = node.initial
            accept, _, rejected = self._acceptance(initial)  # type: ignore[arg-type]
            index = self._index
            self._index += 1
            if rejected >= 0.5 and not self._warned:
                self._warn_if_mostly_rejected(rejected, accept, initial)  # type: ignore[arg-type]
            try:
                label = node.classify(element)
            except Exception as error:  # noqa: BLE001 - re-raised with the stage named
                raise annotate_error(error, node.name, index)
            # NaN acceptance (all ratios equal) compares false: rejected, as in TensorFlow.
            if self._rng.random(dtype=np.float32) < accept[int(label)]:  # type: ignore[index]
                return label, element

    def _get_state(self) -> State:
        return {"index": self._index, "rng": rng_state_to_json(self._rng),
                "inputs": [child.state_dict() for child in self._inputs]}

    def _set_state(self, state: State) -> None:
        for child, child_state in zip(self._inputs, state["inputs"], strict=True):
            child.load_state_dict(child_state)
        self._index = int(state["index"])
        self._rng = rng_from_json(state["rng"])
