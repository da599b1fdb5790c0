"""``shard``: every ``num_shards``-th element, starting at ``index``.

A shard's state may also carry a *re-deal* (:class:`Ownership`): the input positions this
shard owns for the rest of the iteration when an elastic resume
(:func:`feedline.resume.merge_states`) gave it another share than ``index`` of
``num_shards``. A state without one is the plain layout, unchanged since version 1.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass, replace
from typing import Any

from feedline.core.constants import INFINITE, UNKNOWN
from feedline.core.dataset import Dataset
from feedline.core.errors import CheckpointError
from feedline.core.iterator import DatasetIterator, IteratorContext, State
from feedline.core.random_access import RandomAccessReader, StrideReader
from feedline.core.registry import operation
from feedline.core.traits import POSITIONAL
from feedline.core.unary import UnaryDataset, UnaryIterator
from feedline.core.validation import as_int


@operation("shard")
class ShardDataset(UnaryDataset):
    """The node of ``Dataset.shard``: keeps the elements at positions ``index``,
    ``index + num_shards``, ``index + 2 * num_shards``, ... of the input.

    Example:
        >>> import feedline as fl
        >>> ds = ShardDataset(fl.Dataset.range(10), 4, 1)
        >>> [int(x) for x in ds], ds.cardinality()
        ([1, 5, 9], 3)
    """

    TRAITS = replace(POSITIONAL, random_access_from_input=True)

    def __init__(self, input_dataset: Dataset, num_shards: int, index: int,
                 name: str | None = None) -> None:
        super().__init__(input_dataset)
        num_shards = as_int(num_shards, "shard(num_shards)")
        index = as_int(index, "shard(index)")
        if num_shards < 1:
            raise ValueError(f"shard(num_shards) must be >= 1, got {num_shards}")
        if not 0 <= index < num_shards:
            raise ValueError(f"shard(index) must be in [0, num_shards) = [0, {num_shards}), "
                             f"got {index}")
        self.num_shards = num_shards
        self.index = index
        self.name = name or "shard"

    def cardinality(self) -> int:
        n = self._inputs[0].cardinality()
        if n in (INFINITE, UNKNOWN):
            return n
        return n // self.num_shards + (1 if self.index < n % self.num_shards else 0)

    def _make_iterator(self, ctx: IteratorContext) -> DatasetIterator:
        return ShardIterator(ctx, self._make_input_iterator(ctx), self.num_shards,
                             self.index)

    def _offers_random_access(self) -> bool:
        return self._inputs[0]._offers_random_access()

    def _random_reader(self, ctx: IteratorContext) -> RandomAccessReader:
        return StrideReader(self._inputs[0]._random_reader(ctx), self.index, self.num_shards)


REDEAL_KEY = "redeal"
"""Where a shard's state carries its :class:`Ownership` after an elastic resume."""


Progression = tuple[int, int]
"""``(start, step)``: the positions ``start``, ``start + step``, ``start + 2 * step``, ..."""


@dataclass(frozen=True)
class Ownership:
    """The input positions one shard owns: a few listed ones and some endless progressions.

    A plain ``shard(n, i)`` owns one progression, ``(i, n)``. An elastic resume deals a
    job's unread positions out again: those every replica left unread from some position on
    as new progressions, the scattered rest one by one in ``extra``.

    Example:
        >>> owner = Ownership((1, 4), ((10, 3), (20, 5)))
        >>> [p for p in range(26) if owner.owns(p)]
        [1, 4, 10, 13, 16, 19, 20, 22, 25]
        >>> owner.unread(12)
        ([], [(13, 3), (20, 5)])
    """

    extra: tuple[int, ...]
    tails: tuple[Progression, ...]

    @classmethod
    def stride(cls, num_shards: int, index: int) -> Ownership:
        """What ``shard(num_shards, index)`` owns."""
        return cls((), ((index, num_shards),))

    def owns(self, position: int) -> bool:
        return position in self._extra_set or any(
            position >= start and (position - start) % step == 0 for start, step in self.tails)

    @functools.cached_property
    def _extra_set(self) -> frozenset[int]:
        return frozenset(self.extra)

    def unread(self, position: int) -> tuple[list[int], list[Progression]]:
        """What is owned from ``position`` on: the listed positions and the progressions,
        each starting at its first position there."""
        tails = [(start + max(0, -(-(position - start) // step)) * step, step)
                 for start, step in self.tails]
        return [p for p in self.extra if p >= position], tails

    def to_state(self) -> State:
        return {"extra": list(self.extra), "tails": [list(tail) for tail in self.tails]}

    @classmethod
    def from_state(cls, state: Any) -> Ownership:
        """Read a re-deal back, refusing one that does not describe a share."""
        try:
            extra = tuple(int(p) for p in state["extra"])
            tails = tuple((int(start), int(step)) for start, step in state["tails"])
        except (KeyError, TypeError, ValueError) as error:
            raise CheckpointError(f"damaged state for the shard stage: re-deal {error!r}") \
                from None
        if (list(extra) != sorted(set(extra)) or any(p < 0 for p in extra)
                or any(start < 0 or step < 1 for start, step in tails)):
            raise CheckpointError(f"damaged state for the shard stage: re-deal {state!r} is "
                                  "not a share (sorted distinct positions >= 0, progressions "
                                  "of a start >= 0 and a step >= 1)")
        return cls(extra, tails)


class ShardIterator(UnaryIterator):
    """Pulls the elements of other shards only when asked for the next one of its own, so
    the input is never read past the last element this shard yields."""

    def __init__(self, ctx: IteratorContext, upstream: DatasetIterator, num_shards: int,
                 index: int) -> None:
        super().__init__(ctx, upstream)
        self._num_shards = num_shards
        self._index = index
        self._position = 0  # position in the input of the next element to pull
        # Set only by a re-dealt state; the plain stride is the fast path.
        self._owner: Ownership | None = None

    def __next__(self) -> Any:
        while True:
            position = self._position
            # A failing element still occupies its position, so that every shard of the
            # same input agrees on who owns which element whatever fails.
            try:
                element = next(self._upstream)
            except StopIteration:
                raise
            except Exception:
                self._position += 1
                raise
            self._position += 1
            owner = self._owner
            if (position % self._num_shards == self._index if owner is None
                    else owner.owns(position)):
                return element

    def _get_state(self) -> State:
        state = self._with_input_state({"position": self._position})
        if self._owner is not None:
            state[REDEAL_KEY] = self._owner.to_state()
        return state

    def load_state_dict(self, state: State) -> None:
        # The re-deal is an optional key: states without it keep the version-1 layout (and
        # the shape check), so checkpoints written before elastic resume still load.
        owner = None
        if isinstance(state, dict) and REDEAL_KEY in state:
            owner = Ownership.from_state(state[REDEAL_KEY])
            state = {key: value for key, value in state.items() if key != REDEAL_KEY}
        self._owner = None
        self._state_shape = None  # checked against the plain layout
        super().load_state_dict(state)
        self._owner = owner

    def _set_state(self, state: State) -> None:
        self._load_input_state(state)
        self._position = state["position"]
