"""``with_options``: attach pipeline-wide :class:`~feedline.core.options.Options`."""

from __future__ import annotations

from dataclasses import replace

from feedline.core.dataset import Dataset
from feedline.core.iterator import DatasetIterator, IteratorContext
from feedline.core.options import Options
from feedline.core.random_access import RandomAccessReader
from feedline.core.registry import operation
from feedline.core.traits import ONE_TO_ONE
from feedline.core.unary import UnaryDataset


@operation("with_options")
class OptionsDataset(UnaryDataset):
    """Carries options; at run time it adds no stage (its iterator is its input's)."""

    # The options that change elements (the seed) enter the fingerprint once, merged.
    TRAITS = replace(ONE_TO_ONE, random_access_from_input=True, execution_only=True)

    def __init__(self, input_dataset: Dataset, options: Options, name: str | None = None) -> None:
        super().__init__(input_dataset)
        if not isinstance(options, Options):
            raise TypeError(f"with_options() needs a feedline.Options, got {type(options).__name__}")
        self._own_options = options
        self.name = name or "with_options"

    def _make_iterator(self, ctx: IteratorContext) -> DatasetIterator:
        return self._make_input_iterator(ctx)

    def _offers_random_access(self) -> bool:
        return self._inputs[0]._offers_random_access()

    def _random_reader(self, ctx: IteratorContext) -> RandomAccessReader:
        return self._inputs[0]._random_reader(ctx)
