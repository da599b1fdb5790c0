"""The interleave cycle: the position and checkpoint layout both interleave iterators share,
and the sequential iterator (tf.data's ``InterleaveDataset`` loop, step for step).

The node and the order it defines are documented in :mod:`feedline.transforms.interleave`;
the parallel iterator is in :mod:`feedline.transforms.interleave_parallel`.
"""

from __future__ import annotations

import collections
from collections.abc import Callable
from typing import Any

from feedline.core.element_dtypes import DtypeGuard
from feedline.core.error_records import error_record, restore_error
from feedline.core.errors import CheckpointError
from feedline.core.iterator import DatasetIterator, IteratorContext, State
from feedline.core.state_codec import decode, encode
from feedline.execution.positions import PositionReader, initial_position, replay_from
from feedline.transforms.flat_map import note_inner_error

Opener = Callable[[Any, int], DatasetIterator]
"""Makes the iterator of the dataset ``map_func`` returns for an input element and its index."""


class InputError:
    """An error the input raised while the stage read ahead; raised when its turn comes."""

    __slots__ = ("error",)

    def __init__(self, error: BaseException) -> None:
        self.error = error


def entry_state(index: int, element: Any, inner: State | None) -> State:
    """One opened dataset in a state: its input element (to make the dataset again) and its
    position (:mod:`feedline.execution.positions`); ``inner`` is ``None`` when ``map_func``
    failed on it (it is called again, and fails again, on restore)."""
    return {"index": index, "element": encode(element), "inner": inner}


def future_states(futures: Any, state_of: Callable[[Any], State]) -> list[State]:
    return [{"input_error": error_record(entry.error)} if isinstance(entry, InputError)
            else state_of(entry) for entry in futures]


class InterleaveBase(DatasetIterator):
    """What both interleave iterators share: the cycle position and its checkpoint layout.

    The state is the same for the sequential and the parallel stage, so a checkpoint
    restores whatever ``num_parallel_calls`` or ``deterministic`` the restoring run uses::

        {"cycle_length", "cycle_index", "block_index", "end_of_input", "next_input_index",
         "slots": [None | {"index", "element", "inner"}], "futures": [...], "input"}

    ``cycle_length`` is the resolved one: a checkpoint from a machine with another CPU count
    (``cycle_length=None``) restores with the cycle it was taken with. ``futures`` are
    datasets opened ahead (parallel stage) not yet in the cycle, or input errors in their
    place. Each dataset's ``inner`` is a position, never the elements read ahead.
    """

    OPERATION = "interleave"
    STATE_VERSION = 2

    def __init__(self, ctx: IteratorContext, upstream: DatasetIterator, opener: Opener,
                 cycle_length: int, block_length: int, name: str) -> None:
        super().__init__(ctx, [upstream])
        self._upstream = upstream
        self._opener = opener
        self._block_length = block_length
        self._name = name
        self._cycle: list[Any] = [None] * cycle_length
        self._cycle_index = 0
        self._block_index = 0
        self._end_of_input = False
        self._num_open = 0
        self._next_input_index = 0
        # Every inner dataset's elements have the first one's dtypes (tf.data traces
        # map_func once, so its datasets share one element_spec), as flat_map's.
        self._dtypes = DtypeGuard(name, of="an element of the dataset made from input element")

    def _advance_to_next_in_cycle(self) -> None:
        self._block_index = 0
        self._cycle_index = (self._cycle_index + 1) % len(self._cycle)

    def _position_state(self, slots: list[State | None], futures: list[State]) -> State:
        return {"cycle_length": len(self._cycle), "cycle_index": self._cycle_index,
                "block_index": self._block_index, "end_of_input": self._end_of_input,
                "next_input_index": self._next_input_index, "slots": slots,
                "futures": futures, "input": self._upstream.state_dict()}

    def _load_position(self, state: State) -> None:
        """Rewind the input and the cycle position (the caller has stopped its datasets)."""
        cycle_length = int(state["cycle_length"])
        if cycle_length < 1 or len(state["slots"]) != cycle_length:
            raise CheckpointError(f"{self._name}: the state's cycle_length {cycle_length} "
                                  f"does not match its {len(state['slots'])} slots")
        self._cycle = [None] * cycle_length
        self._upstream.load_state_dict(state["input"])
        self._cycle_index = state["cycle_index"]
        self._block_index = state["block_index"]
        self._end_of_input = state["end_of_input"]
        self._next_input_index = state["next_input_index"]
        self._num_open = 0


class _Open:
    """A cycle slot of the sequential stage: the input element and its dataset's iterator.

    ``replay`` re-reads after a restore from a read-ahead position; ``failure`` is a
    ``map_func`` error restored in its place (raised when the cycle reaches it).
    """

    __slots__ = ("element", "failure", "index", "iterator", "replay")

    def __init__(self, index: int, element: Any, iterator: DatasetIterator | None,
                 replay: PositionReader | None = None,
                 failure: BaseException | None = None) -> None:
        self.index = index
        self.element = element
        self.iterator = iterator
        self.replay = replay
        self.failure = failure

    def next(self) -> Any:
        replay = self.replay
        if replay is None:
            return next(self.iterator)  # type: ignore[arg-type]
        item, is_error, value, _ = replay.pull()
        replay.handed_out(item)
        if not replay.replaying:
            self.replay = None
        if is_error:
            raise value
        return value

    def state(self) -> State:
        if self.iterator is None:
            return entry_state(self.index, self.element, None)
        inner = self.replay.inline_position() if self.replay is not None else \
            initial_position(self.iterator.state_dict())
        return entry_state(self.index, self.element, inner)


class InterleaveIterator(InterleaveBase):
    """The synchronous stage: tf.data's ``InterleaveDataset`` loop, step for step.

    Errors: a failing ``map_func`` consumes its input element and leaves the slot empty (the
    next call fills it from the next element); an error from an inner dataset leaves the
    position unchanged, so the next call asks that dataset again.
    """

    def __init__(self, ctx: IteratorContext, upstream: DatasetIterator, opener: Opener,
                 cycle_length: int, block_length: int, name: str) -> None:
        super().__init__(ctx, upstream, opener, cycle_length, block_length, name)
        # Datasets a parallel stage had opened ahead, from a restored checkpoint.
        self._pending: collections.deque[_Open | InputError] = collections.deque()

    def _open_next(self) -> _Open | None:
        """The next input element's dataset (``None`` at the end of the input)."""
        if self._pending:
            entry = self._pending.popleft()
            if isinstance(entry, InputError):
                raise entry.error
            if entry.failure is not None:
                raise entry.failure
            return entry
        try:
            element = next(self._upstream)
        except StopIteration:
            self._end_of_input = True
            return None
        index = self._next_input_index
        self._next_input_index += 1
        return _Open(index, element, self._opener(element, index))

    def __next__(self) -> Any:
        cycle = self._cycle
        while not self._end_of_input or self._num_open or self._pending:
            current = cycle[self._cycle_index]
            if current is not None:
                if current.failure is not None:
                    cycle[self._cycle_index] = None
                    self._num_open -= 1
                    raise current.failure
                try:
                    element = current.next()
                except StopIteration:
                    current.iterator.close()
                    cycle[self._cycle_index] = None
                    self._num_open -= 1
                    self._advance_to_next_in_cycle()
                    continue
                except Exception as error:  # noqa: BLE001 - re-raised with a note
                    raise note_inner_error(error, self._name, current.index)
                self._block_index += 1
                if self._block_index == self._block_length:
                    self._advance_to_next_in_cycle()
                return self._dtypes.check(element, current.index)
            if self._end_of_input and not self._pending:
                self._advance_to_next_in_cycle()
                continue
            opened = self._open_next()
            if opened is None:
                continue
            cycle[self._cycle_index] = opened
            self._num_open += 1
        raise StopIteration

    def _get_state(self) -> State:
        slots = [None if s is None else s.state() for s in self._cycle]
        return self._position_state(slots, future_states(self._pending, _Open.state))

    def _set_state(self, state: State) -> None:
        self._release()
        self._load_position(state)
        for position, saved in enumerate(state["slots"]):
            if saved is not None:
                self._cycle[position] = self._restore_open(saved)
                self._num_open += 1
        self._pending.clear()
        for saved in state["futures"]:
            self._pending.append(InputError(restore_error(saved["input_error"]))
                                 if "input_error" in saved else self._restore_open(saved))

    def _restore_open(self, saved: State) -> _Open:
        index, element, inner = int(saved["index"]), decode(saved["element"]), saved["inner"]
        if inner is None:  # map_func failed on it: it fails again, in its place
            try:
                iterator = self._opener(element, index)
            except Exception as error:  # noqa: BLE001 - raised when the cycle reaches it
                return _Open(index, element, None, failure=error)
            return _Open(index, element, iterator)
        iterator = self._opener(element, index)
        iterator.load_state_dict(inner["input"])
        return _Open(index, element, iterator, replay_from(iterator, inner))

    def _release(self) -> None:
        entries = [*self._cycle, *self._pending]
        self._cycle = [None] * len(self._cycle)
        self._pending.clear()
        for entry in entries:
            if isinstance(entry, _Open) and entry.iterator is not None:
                entry.iterator.close()
