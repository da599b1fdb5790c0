"""The checkpoint conformance check every operation's tests run."""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from feedline.core.constants import INFINITE
from feedline.core.dataset import Dataset
from feedline.pipeline import PipelineIterator
from feedline.testing.elements import elements_equal
from feedline.testing.failures import Failed, take_outcomes
from feedline.testing.threads import no_leaked_threads


def _skeleton(state: Any) -> Any:
    """The shape of a state: dict keys nested, values reduced to their JSON kind."""
    if isinstance(state, dict):
        return {k: _skeleton(v) for k, v in state.items()}
    if isinstance(state, list):
        return "list"
    if isinstance(state, bool) or state is None:
        return "scalar"
    return type(state).__name__ if not isinstance(state, int | float) else "number"


def _same_multiset(actual: list[Any], expected: list[Any], context: str) -> None:
    def key(element: Any) -> str:
        return repr(element)

    if Counter(map(key, actual)) != Counter(map(key, expected)):
        raise AssertionError(f"restored elements differ as a multiset ({context})")


def state_size(state: Any) -> int:
    """Bytes of ``state`` as JSON (``len(json.dumps(state))``), what ``max_state_bytes`` caps.

    Example:
        >>> state_size({"position": 3})
        15
    """
    return len(json.dumps(state))


def _size_of_layout(state: Any) -> int:
    """The JSON size of ``state`` with every number and bool counted as one character.

    Counters growing from 9 to 10 do not change it; a list or string that grows with the
    position (buffered elements, remembered values) does.
    """
    if isinstance(state, dict):
        return 2 + sum(len(json.dumps(k)) + 2 + _size_of_layout(v) + 2 for k, v in state.items())
    if isinstance(state, list):
        return 2 + sum(_size_of_layout(v) + 2 for v in state)
    if isinstance(state, bool | int | float) or state is None:
        return 1
    return len(json.dumps(state))


@dataclass
class _Sizes:
    """State sizes seen at each position of one part of the check."""

    label: str
    max_bytes: int | None
    constant: bool
    layouts: dict[int, int] = field(default_factory=dict)

    def record(self, state: Any, position: int, context: str) -> None:
        if self.max_bytes is not None:
            size = state_size(state)
            if size > self.max_bytes:
                raise AssertionError(f"the state is {size} bytes, over max_state_bytes="
                                     f"{self.max_bytes} ({context})")
        if self.constant:
            self.layouts[position] = _size_of_layout(state)

    def check_constant(self) -> None:
        if not self.constant or len(set(self.layouts.values())) <= 1:
            return
        first, size = next(iter(self.layouts.items()))
        other, other_size = next((k, s) for k, s in self.layouts.items() if s != size)
        raise AssertionError(
            f"the state's size changes with the position ({self.label}): {size} bytes after "
            f"{first} elements, {other_size} after {other} (numbers counted as one byte); "
            "a stage that holds no elements should keep a state of one size")


def check_checkpointing(dataset: Dataset, *, max_elements: int | None = None,
                        steps: list[int] | None = None, ordered: bool = True,
                        epochs: int = 2, max_state_bytes: int | None = None,
                        constant_state_size: bool = False,
                        variants: Sequence[Dataset] = ()) -> list[Any]:
    """Assert that saving and restoring an iterator of ``dataset`` loses and repeats nothing.

    For every step ``k`` (default: every position, including the end of the data), it takes
    ``k`` outcomes, saves the state through a JSON round trip, and checks that

    * a new iterator restored from it yields exactly the outcomes the original yields next;
    * the original iterator, rewound with the same state after running on, does too;
    * the state has the same shape (same keys, same kinds of value) at every step;
    * the state stays within ``max_state_bytes``, and keeps one size if
      ``constant_state_size``;
    * the state loads into every dataset of ``variants``, which then yields the same
      remaining outcomes.

    An outcome is an element, or a :class:`~feedline.testing.failures.Failed` for a ``next()``
    that raised: the iteration goes on after a failure, and a failing element must be
    restored as a failure of the same type in its place (a restored error counts as its
    original type). Build pipelines with failing elements with
    :func:`~feedline.testing.failures.fail_at`.

    Then it runs the same check over ``epochs`` epochs (``dataset.repeat(epochs)``) at a few
    positions, so restores across an epoch boundary (reshuffling included) are covered.
    Every thread started must have ended when the check returns.

    Args:
        dataset: The pipeline under test; it must be deterministic unless ``ordered=False``.
        max_elements: Outcomes to consider (required for infinite datasets).
        steps: Positions to restore at; default every position from 0 to the end.
        ordered: ``False`` compares the remaining outcomes as multisets (for
            ``deterministic=False`` stages).
        epochs: Epochs for the cross-epoch part; 1 or less skips it.
        max_state_bytes: If given, ``len(json.dumps(state))`` of the pipeline's state
            (fingerprint and checksum included) may not exceed it at any position.
        constant_state_size: Assert that the state's size does not change with the position
            (numbers and bools counted as one character, so counters may grow): right for
            stages that hold no elements, whose state is positions and counters.
        variants: The same pipeline built with other execution settings
            (``num_parallel_calls``, ``deterministic``, prefetch buffer sizes, options such as
            ``map_fusion`` through ``with_options``). The state taken from ``dataset`` at each
            position must load into an iterator of each variant and continue with exactly
            the remaining outcomes (as multisets when ``ordered=False``).

    Returns:
        The reference outcomes (one full pass, up to ``max_elements``): the elements, with a
        :class:`~feedline.testing.failures.Failed` where ``next()`` raised.

    Example:
        >>> import feedline as fl
        >>> from feedline.testing import fail_at
        >>> len(check_checkpointing(fl.Dataset.range(5).shuffle(3, seed=1).batch(2)))
        3
        >>> check_checkpointing(fail_at(fl.Dataset.range(4), [1]).skip(1), constant_state_size=True)
        [Failed(error_type='InjectedError'), np.int64(2), np.int64(3)]
    """
    if max_elements is None and dataset.cardinality() == INFINITE:
        raise ValueError("check_checkpointing() needs max_elements for an infinite dataset")
    variants = list(variants)
    for variant in variants:
        if not isinstance(variant, Dataset):
            raise TypeError(f"check_checkpointing(variants) must hold datasets, got "
                            f"{type(variant).__name__}")
    with no_leaked_threads():
        sizes = _Sizes("one epoch", max_state_bytes, constant_state_size)
        reference = _check_positions(dataset, max_elements, steps, ordered, "one epoch", sizes,
                                     variants)
        sizes.check_constant()
        if epochs > 1 and dataset.cardinality() != INFINITE:
            total = len(reference) * epochs if max_elements is None else max_elements
            positions = sorted({0, len(reference) - 1, len(reference), len(reference) + 1,
                                total - 1, total} & set(range(total + 1)))
            sizes = _Sizes(f"{epochs} epochs", max_state_bytes, constant_state_size)
            _check_positions(dataset.repeat(epochs), max_elements, positions, ordered,
                             f"{epochs} epochs", sizes,
                             [variant.repeat(epochs) for variant in variants])
            sizes.check_constant()
    return reference


def _check_positions(dataset: Dataset, max_elements: int | None, steps: list[int] | None,
                     ordered: bool, label: str, sizes: _Sizes,
                     variants: list[Dataset]) -> list[Any]:
    with PipelineIterator(dataset) as iterator:
        reference = take_outcomes(iterator, max_elements)
    positions = steps if steps is not None else list(range(len(reference) + 1))
    skeleton = None
    for k in positions:
        context = f"{label}, restored after {k} elements"
        with PipelineIterator(dataset) as original:
            taken = take_outcomes(original, k) if k else []
            if ordered:
                compare(taken, reference[:k], ordered, context + ", before saving")
            state = json.loads(json.dumps(original.state_dict()))
            shape = _skeleton(state)
            if skeleton is None:
                skeleton = shape
            elif shape != skeleton and not _same_keys(shape, skeleton):
                raise AssertionError(f"the state changed shape ({context}): {shape} vs {skeleton}")
            sizes.record(state, k, context)
            remaining = None if max_elements is None else max_elements - k
            with PipelineIterator(dataset) as restored:
                restored.load_state_dict(state)
                rest = take_outcomes(restored, remaining)
            tail_of_original = take_outcomes(original, remaining)
            compare(rest, tail_of_original, ordered, context + ", new iterator vs original")
            if ordered:
                compare(rest, reference[k:], ordered, context + ", vs reference")
            elif max_elements is None:
                # Unordered stages may deliver any prefix: check that nothing is lost overall.
                compare(taken + rest, reference, ordered, context + ", taken + rest vs reference")
            original.load_state_dict(state)
            rewound = take_outcomes(original, remaining)
            compare(rewound, rest, ordered, context + ", rewound original")
        for number, variant in enumerate(variants):
            _check_variant(variant, state, taken, rest, reference, k, remaining, ordered,
                           max_elements, f"{context}, into variant {number}")
    return reference


def _check_variant(variant: Dataset, state: Any, taken: list[Any], rest: list[Any],
                   reference: list[Any], k: int, remaining: int | None, ordered: bool,
                   max_elements: int | None, context: str) -> None:
    """The state taken from the pipeline after ``k`` outcomes continues in ``variant``."""
    with PipelineIterator(variant) as moved:
        try:
            moved.load_state_dict(state)
        except Exception as error:
            raise AssertionError(f"the state does not load ({context}): "
                                 f"{type(error).__name__}: {error}") from error
        continued = take_outcomes(moved, remaining)
    if ordered:
        compare(continued, reference[k:], ordered, context)
    elif max_elements is None:
        compare(taken + continued, reference, ordered, context + ", taken + rest vs reference")
    else:
        compare(continued, rest, ordered, context)


def _same_keys(a: Any, b: Any) -> bool:
    if isinstance(a, dict) and isinstance(b, dict):
        return a.keys() == b.keys() and all(_same_keys(a[k], b[k]) for k in a)
    return isinstance(a, dict) == isinstance(b, dict)


def compare(actual: list[Any], expected: list[Any], ordered: bool, context: str) -> None:
    """Assert two lists of outcomes are equal, in order or as multisets.

    Outcomes are elements, compared exactly, or :class:`~feedline.testing.failures.Failed`
    markers, compared by error type.

    Example:
        >>> import numpy as np
        >>> compare([np.int64(1), Failed("KeyError")], [np.int64(1), Failed("KeyError")], True, "")
    """
    if not ordered:
        _same_multiset(actual, expected, context)
        return
    where = f" ({context})" if context else ""
    for i, (x, y) in enumerate(zip(actual, expected)):
        failed = isinstance(x, Failed), isinstance(y, Failed)
        if (x != y) if any(failed) else not elements_equal(x, y):
            raise AssertionError(f"outcome {i} differs{where}: got {x!r}, expected {y!r}")
    if len(actual) != len(expected):
        raise AssertionError(f"got {len(actual)} outcomes, expected {len(expected)}{where}")


__all__ = ["check_checkpointing", "compare", "elements_equal", "state_size"]
