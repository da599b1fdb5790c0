"""Checkpoints as positions: where a stage is in its input, never copies of its elements.

A stage that reads ahead (prefetch, parallel map and batch, interleave's open datasets) has
pulled items from its input that its consumer has not received yet. Its checkpoint records
*positions* instead of those items: the input's state at some earlier point (a *snapshot*),
how many items the consumer has received since, and, for stages that hand out in completion
order, which later items went out already. Restoring loads the snapshot and pulls the input
again, dropping the items that were handed out: they are recomputed, not stored.

Every item pulled counts, errors included: an input error re-occurs on re-read and is
skipped like any item. An error that had been pulled but not yet handed out when the state
was taken is stored as a record (:mod:`feedline.core.error_records`), and raised in its
place after a restore even if the re-read would not fail again.

Snapshots cost a call to the input's ``state_dict()``. :class:`PositionReader` takes one
every ``interval`` items, adapting the interval so that snapshots cost about
:data:`SNAPSHOT_COST_SHARE` of the time spent pulling (an expensive input is snapshotted
often, so little is recomputed on restore; a cheap one rarely), and so that re-reading
after a restore takes at most about :data:`MAX_REPLAY_SECONDS`. An input whose re-read
would not give the same items in the same order (``replay_exact`` false: a
``deterministic=False`` stage upstream) is snapshotted after every item.

The state of such a stage is, in every execution mode (inline, parallel, fused)::

    {"at": s, "next": n, "done": [...], "errors": [[item, record], ...], "input": <snapshot>}

``at``: the item the snapshot was taken before; ``next``: the first item not handed out;
``done``: items after ``next`` handed out already (completion order); ``errors``: records
of input errors pulled but not handed out.
"""

from __future__ import annotations

import collections
import math
import pickle
import threading
import time
from collections.abc import Callable
from typing import Any

from feedline.core.error_records import error_record, restore_error

State = dict[str, Any]

SNAPSHOT_COST_SHARE = 0.01
"""Share of the pulling time that taking input snapshots may cost."""
MAX_REPLAY_SECONDS = 0.5
"""Pulling time between two snapshots at most: bounds the re-reading after a restore."""

POSITION_KEYS = ("at", "next", "done", "errors")


def initial_position(input_state: State, pulled: int = 0) -> State:
    """The position of a stage that has handed out every item it pulled.

    Example:
        >>> initial_position({"type": "range"}, 3)
        {'at': 3, 'next': 3, 'done': [], 'errors': [], 'input': {'type': 'range'}}
    """
    return {"at": pulled, "next": pulled, "done": [], "errors": [], "input": input_state}


RUN = 3
"""The tag of a run entry of :meth:`PositionReader.pull_many` (elements and errors are tagged
0 and 1, ``False`` and ``True``, as :meth:`PositionReader.pull` gives them)."""


class PositionReader:
    """Pulls numbered items from an input, takes snapshots, and replays after a restore.

    Used by exactly one thread at a time (the consumer's, or the one worker that reads for
    a prefetch or interleave slot). ``pull()`` returns ``(item, is_error, value, snapshot)``
    where ``snapshot`` is ``None`` or ``(position, input_state)`` taken right after the item.

    Example:
        >>> reader = PositionReader(iter([5, 6, 7]).__next__, lambda: {"s": 1})
        >>> reader.pull()[:3]
        (0, False, 5)
    """

    def __init__(self, pull: Callable[[], Any], snapshot: Callable[[], State],
                 replay_exact: bool = True,
                 pull_chunk: Callable[[int], list[Any]] | None = None,
                 hold_order: Callable[[bool], None] | None = None) -> None:
        self._pull = pull
        # Asks an input that may reorder to keep its order while a restore is replayed.
        self._hold_order = hold_order
        self._holding = False
        self._pull_chunk = pull_chunk
        self._snapshot = snapshot
        self._replay_exact = replay_exact
        self.pulled = 0
        self._since = 0
        self._interval = 1
        self._pull_seconds = 0.0  # pulling time since the last snapshot
        # From a restored state: items to drop on re-read, errors to raise in their place.
        self._skip_below = 0
        self._skip: set[int] = set()
        self._restored_errors: dict[int, BaseException] = {}
        # Errors pulled, by item, until handed out: their records go into checkpoints.
        self.errors: dict[int, BaseException] = {}
        self.errors_lock = threading.Lock()

    def restore(self, position: State) -> None:
        """Re-read from snapshot ``position`` (whose ``input`` the caller has loaded)."""
        self.pulled = int(position["at"])
        self._since = 0
        self._skip_below = int(position["next"])
        self._skip = {int(i) for i in position["done"]}
        with self.errors_lock:
            self._restored_errors = {int(i): restore_error(r) for i, r in position["errors"]}
            self.errors.clear()
        # Items are skipped by the order they were counted in: an input that may hand them
        # out as they complete (restored into deterministic=False) keeps its order until
        # the replay is over.
        if not self._replay_exact and self._hold_order is not None and self.replaying:
            self._hold_order(True)
            self._holding = True

    def pull(self) -> tuple[int, bool, Any, tuple[int, State] | None]:
        """The next item not handed out before the checkpoint; ``StopIteration`` at the end."""
        clock = time.perf_counter
        while True:
            started = clock()
            try:
                value, is_error = self._pull(), False
            except StopIteration:
                raise
            except Exception as error:  # noqa: BLE001 - an item like any other, kept in place
                value, is_error = error, True
            self._pull_seconds += clock() - started
            item = self.pulled
            self.pulled = item + 1
            self._since += 1
            snapshot = self._take_snapshot() if self._since >= self._interval else None
            if item < self._skip_below or (self._skip and item in self._skip):
                self._skip.discard(item)
                continue
            if is_error or self._restored_errors:
                with self.errors_lock:
                    restored = self._restored_errors.pop(item, None)
                    if restored is not None:
                        value, is_error = restored, True
                    if is_error:
                        self.errors[item] = value
            if self._holding and not self.replaying:
                self._release_order()
            return item, is_error, value, snapshot

    def pull_many(self, limit: int) -> list[tuple[int, int, Any, tuple[int, State] | None]]:
        """Up to ``limit`` items (at least one), read in one chunk from an input that reads
        in chunks (``pull_chunk``), up to the next snapshot; one :meth:`pull` otherwise, and
        while re-reading after a restore.

        A chunk comes back as one *run* entry ``(first, RUN, values, snapshot)``: items
        ``first, first + 1, ...`` are the elements ``values`` (none an error) and
        ``snapshot`` (or ``None``) follows the last; anything else as :meth:`pull` gives it.
        Runs keep per-element work (a tuple per record) off the chunked path.
        """
        chunk = self._pull_chunk
        if chunk is None or self.pulled < self._skip_below or self._skip \
                or self._restored_errors:
            return [self.pull()]
        clock = time.perf_counter
        started = clock()
        try:
            values = chunk(max(1, min(limit, self._interval - self._since)))
        except StopIteration:
            raise
        except Exception as error:  # noqa: BLE001 - the chunk's first item is an error
            return [self._error_item(error, clock() - started)]
        self._pull_seconds += clock() - started
        first = self.pulled
        self.pulled = first + len(values)
        self._since += len(values)
        snapshot = self._take_snapshot() if self._since >= self._interval else None
        return [(first, RUN, values, snapshot)]

    def _release_order(self) -> None:
        assert self._hold_order is not None
        self._holding = False
        self._hold_order(False)

    def _error_item(self, error: BaseException, seconds: float
                    ) -> tuple[int, bool, Any, tuple[int, State] | None]:
        """``error`` as the next item, numbered, kept and snapshotted as :meth:`pull` does."""
        self._pull_seconds += seconds
        item = self.pulled
        self.pulled = item + 1
        self._since += 1
        snapshot = self._take_snapshot() if self._since >= self._interval else None
        with self.errors_lock:
            self.errors[item] = error
        return item, True, error, snapshot

    def _take_snapshot(self) -> tuple[int, State]:
        started = time.perf_counter()
        state = self._snapshot()
        cost = time.perf_counter() - started
        if not self._replay_exact:
            self._interval = 1
        else:
            per_item = max(self._pull_seconds / self._since, 1e-9)
            # Snapshots cost SNAPSHOT_COST_SHARE of pulling: interval = cost ratio / share,
            # but re-reading after a restore stays within MAX_REPLAY_SECONDS.
            wanted = math.ceil(cost / per_item / SNAPSHOT_COST_SHARE)
            self._interval = max(1, min(wanted, int(MAX_REPLAY_SECONDS / per_item)))
        self._since = 0
        self._pull_seconds = 0.0
        return self.pulled, state

    def inline_position(self) -> State:
        """The position of an inline stage re-reading through this reader: exact, so the
        input's state is taken now (call between pulls, on the reading thread)."""
        with self.errors_lock:
            errors = sorted(self._restored_errors.items())
        return {"at": self.pulled, "next": self.pulled, "done": sorted(self._skip),
                "errors": [[item, error_record(error)] for item, error in errors],
                "input": self._snapshot()}

    @property
    def replaying(self) -> bool:
        """Whether items handed out before the checkpoint are still to be skipped, or
        restored errors still to be raised."""
        return self.pulled < self._skip_below or bool(self._skip) or bool(self._restored_errors)

    def handed_out(self, item: int) -> None:
        """Forget ``item``'s error record (if any): the consumer has received it."""
        if self.errors:
            with self.errors_lock:
                self.errors.pop(item, None)

    def pending_errors(self, tracker: PositionTracker) -> list[list[Any]]:
        """Records of errors pulled and not handed out, for a checkpoint.

        None for an input whose re-read may differ (``replay_exact`` false): it is
        snapshotted after every item, so the position's snapshot is the input's state after
        the last item handed out, errors it had read ahead included; a record would stand in
        for whatever item its re-read gives in that place (an element lost, the error twice).
        """
        if not self._replay_exact:
            return []
        with self.errors_lock:
            errors = sorted([*self.errors.items(), *self._restored_errors.items()])
        return [[item, error_record(error)] for item, error in errors
                if item >= tracker.next and item not in tracker.done]


class PackedState:
    """An input state pickled once, where it was taken: what a worker process sends as its
    snapshot.

    A snapshot can be large (a shuffle buffer's records) and most are never used: a newer
    one replaces it before any checkpoint is asked for. Packed, its cost is paid in the
    worker that takes it (where :class:`PositionReader` counts it, so that snapshots stay
    rare), its bytes cross as one out-of-band buffer (shared memory), and the consumer
    unpickles it only when a checkpoint needs it (:meth:`PositionTracker.state`).

    Example:
        >>> import pickle
        >>> packed = pickle.loads(pickle.dumps(PackedState({"s": [1, b"x"]}), protocol=5))
        >>> packed.unpack()
        {'s': [1, b'x']}
    """

    __slots__ = ("_data",)

    def __init__(self, state: State) -> None:
        self._data = pickle.dumps(state, protocol=5)

    @classmethod
    def _from_data(cls, data: Any) -> PackedState:
        packed = cls.__new__(cls)
        # A copy: a view would keep the transport's shared buffer lent while it is held.
        packed._data = bytes(data)
        return packed

    def __reduce_ex__(self, protocol: Any) -> tuple[Any, ...]:
        return PackedState._from_data, (pickle.PickleBuffer(self._data),)

    def unpack(self) -> State:
        """The state as it was taken."""
        return pickle.loads(self._data)


def unpacked(state: Any) -> Any:
    """``state``, unpickled first if it is a :class:`PackedState`."""
    return state.unpack() if isinstance(state, PackedState) else state


class PositionTracker:
    """The consumer's side: which items went out, and the snapshots a state may use.

    Example:
        >>> tracker = PositionTracker(initial_position({"s": 0}))
        >>> tracker.add_snapshot((1, {"s": 1})); tracker.handed_out(0)
        >>> tracker.state([])
        {'at': 1, 'next': 1, 'done': [], 'errors': [], 'input': {'s': 1}}
    """

    def __init__(self, position: State | None = None) -> None:
        self.next = 0
        self.done: set[int] = set()
        self._snapshots: collections.deque[tuple[int, State]] = collections.deque()
        self._lock = threading.Lock()
        if position is not None:
            self.restore(position)

    def restore(self, position: State) -> None:
        with self._lock:
            self.next = int(position["next"])
            self.done = {int(i) for i in position["done"]}
            self._snapshots = collections.deque([(int(position["at"]), position["input"])])

    @property
    def has_snapshot(self) -> bool:
        return bool(self._snapshots)

    def add_snapshot(self, snapshot: tuple[int, State] | None) -> None:
        """Record the input's state after ``snapshot[0]`` items (in increasing order)."""
        if snapshot is not None:
            with self._lock:
                snapshots = self._snapshots
                snapshots.append(snapshot)
                # Only the newest snapshot at or before ``next`` can ever be used: the deque
                # stays as short as the read-ahead, however long the run.
                while len(snapshots) > 1 and snapshots[1][0] <= self.next:
                    snapshots.popleft()

    def handed_out(self, item: int) -> None:
        """The consumer received ``item`` (or its error)."""
        if item == self.next:
            self.next += 1
            done = self.done
            while self.next in done:
                done.remove(self.next)
                self.next += 1
        elif item > self.next:
            self.done.add(item)

    def state(self, errors: list[list[Any]]) -> State:
        """The position to save: the newest snapshot at or before ``next``."""
        with self._lock:
            snapshots, upto = self._snapshots, self.next
            while len(snapshots) > 1 and snapshots[1][0] <= upto:
                snapshots.popleft()
            at, input_state = snapshots[0]
            if isinstance(input_state, PackedState):  # unpacked once, when first needed
                input_state = input_state.unpack()
                snapshots[0] = (at, input_state)
        return {"at": at, "next": upto, "done": sorted(self.done), "errors": errors,
                "input": input_state}


def replay_from(source: Any, position: State,
                pull: Callable[[], Any] | None = None) -> PositionReader | None:
    """For an inline stage restored from ``position`` (whose ``input`` the caller loaded into
    ``source``): a reader (pulling with ``pull``, default ``next(source)``) that skips and substitutes what the position says, or ``None``
    when there is nothing to replay (the common case: the state of an inline stage).

    Example:
        >>> replay_from(None, initial_position({}, 4)) is None
        True
    """
    if int(position["at"]) == int(position["next"]) and not position["done"] \
            and not position["errors"]:
        return None
    reader = PositionReader(pull or source.__next__, source.state_dict)
    reader.restore(position)
    return reader
