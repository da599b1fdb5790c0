"""``Dataset.zip``: one element from each of several datasets, combined into one nest."""

from __future__ import annotations

from typing import Any

from feedline.core.constants import INFINITE, UNKNOWN
from feedline.core.dataset import Dataset
from feedline.core.errors import CheckpointError
from feedline.core.iterator import DatasetIterator, IteratorContext, State
from feedline.core.registry import operation
from feedline.core.structure import Element, flatten_with_paths, pack_as
from feedline.core.traits import POSITIONAL


def _lists_to_tuples(structure: Any) -> Any:
    # tf.data only takes tuples and dicts; a list of datasets is accepted as a tuple.
    if isinstance(structure, list):
        return tuple(_lists_to_tuples(x) for x in structure)
    if isinstance(structure, tuple) and not hasattr(type(structure), "_fields"):
        return tuple(_lists_to_tuples(x) for x in structure)
    if isinstance(structure, dict):
        return {k: _lists_to_tuples(v) for k, v in structure.items()}
    return structure


def zip_cardinality(cardinalities: list[int]) -> int:
    """The cardinality of a zip: the smallest input's, ``UNKNOWN`` if any input's is unknown
    (unless another input is known to be empty), ``INFINITE`` if all are infinite."""
    if 0 in cardinalities:
        return 0
    if UNKNOWN in cardinalities:
        return UNKNOWN
    finite = [n for n in cardinalities if n != INFINITE]
    return min(finite) if finite else INFINITE


@operation("zip")
class ZipDataset(Dataset):
    """The node of ``Dataset.zip``: ``structure`` is a tuple/dict/namedtuple nest of datasets.

    Elements have the same nest with one element of each dataset in place of the dataset;
    the zip ends as soon as any input ends (the shortest one). Inputs are pulled in
    ``flatten`` order (dict keys sorted), so an input after the shortest one may have been
    advanced once more than the number of elements produced, as in tf.data.

    Example:
        >>> import feedline as fl
        >>> ds = fl.Dataset.zip({"a": fl.Dataset.range(3), "b": fl.Dataset.range(10, 12)})
        >>> [(int(e["a"]), int(e["b"])) for e in ds]
        [(0, 10), (1, 11)]
        >>> ds.cardinality()
        2
    """

    TRAITS = POSITIONAL

    def __init__(self, structure: Element, name: str | None = None) -> None:
        self.name = name  # shown in errors and profiles; not part of the fingerprint
        structure = _lists_to_tuples(structure)
        leaves = flatten_with_paths(structure)
        if not leaves:
            raise TypeError("zip() needs at least one dataset")
        for path, leaf in leaves:
            if not isinstance(leaf, Dataset):
                raise TypeError(f"zip(): every leaf of the structure must be a Dataset, but "
                                f"{path} is of type {type(leaf).__name__}")
        super().__init__([leaf for _, leaf in leaves])
        self.structure = structure

    def _element_spec(self) -> Element | None:
        specs = [d._element_spec() for d in self._inputs]
        if any(spec is None for spec in specs):
            return None
        return pack_as(self.structure, specs)

    def cardinality(self) -> int:
        return zip_cardinality([d.cardinality() for d in self._inputs])

    def _make_iterator(self, ctx: IteratorContext) -> DatasetIterator:
        return ZipIterator(ctx, self.structure, [d._make_iterator(ctx) for d in self._inputs])


class ZipIterator(DatasetIterator):
    """Takes one element from each input per step.

    When an input fails, the others are still advanced for that position, so they stay
    aligned: the step raises the first error and the next step combines the next elements
    (tf.data's zip). An input that ends ends the zip; if an earlier input failed at that
    same position, its error is raised first.
    """

    def __init__(self, ctx: IteratorContext, structure: Element,
                 inputs: list[DatasetIterator]) -> None:
        super().__init__(ctx, inputs)
        self._structure = structure
        self._exhausted = False

    def __next__(self) -> Any:
        if self._exhausted:
            raise StopIteration
        parts = []
        failure: Exception | None = None
        for upstream in self._inputs:
            try:
                parts.append(next(upstream))
            except StopIteration:
                self._exhausted = True
                break
            except Exception as error:  # noqa: BLE001 - raised once every input has moved on
                if failure is None:
                    failure = error
        if failure is not None:
            raise failure
        if self._exhausted:
            raise StopIteration
        return pack_as(self._structure, parts)

    def _get_state(self) -> State:
        return {"exhausted": self._exhausted,
                "inputs": [upstream.state_dict() for upstream in self._inputs]}

    def _set_state(self, state: State) -> None:
        states = state["inputs"]
        if len(states) != len(self._inputs):
            raise CheckpointError(f"zip(): the state has {len(states)} inputs, this zip has "
                                  f"{len(self._inputs)}")
        for upstream, upstream_state in zip(self._inputs, states):
            upstream.load_state_dict(upstream_state)
        self._exhausted = bool(state["exhausted"])
