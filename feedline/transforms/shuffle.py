"""``shuffle``: sample uniformly from a buffer refilled from the input (tf.data's algorithm).

The buffer holds up to ``buffer_size`` elements. Each output is drawn uniformly at random
from the buffer and its place is taken by the next input element; once the input ends the
buffer drains in random order. So ``buffer_size=1`` keeps the input order and a buffer at
least as large as the dataset gives a uniformly random permutation.

Randomness: every iterator gets its own NumPy ``PCG64`` generator. With a seed (the stage's
own, else ``Options.seed``) the generator of epoch ``e`` is seeded from ``(seed, e)`` when
``reshuffle_each_iteration`` is true and from ``(seed, 0)`` otherwise, so every run of the
pipeline gives the same sequence of epochs. Without any seed, each iterator draws fresh
entropy (a new order every epoch and every run) unless ``reshuffle_each_iteration=False``,
which fixes one random seed per dataset object, as tf.data does.

The epoch counts the iterators this dataset object has built: those of the pipeline run
(``repeat`` builds one per epoch), and, as tf.data's seed generators do, those of earlier
runs started by ``iter(ds)``, so each new ``iter(ds)`` of a seeded shuffle is a new epoch
with a new order (:mod:`feedline.core.seed_epochs`; the program run again repeats them). A
checkpoint stores the epoch, so restored runs reshuffle like the original. One limit: a
single shuffled dataset object returned by a ``flat_map``/``interleave`` function for
several input elements gets a new epoch per element, and a checkpoint only records the
epochs of the iterators open at that moment, so later elements may shuffle differently
after a restore. Build the shuffle inside the function (``lambda f: read(f).shuffle(...)``)
to get one fixed stream per element instead.

Checkpoints name the buffered elements by position: each element read is numbered, a
snapshot of the input's state is kept from before the oldest one still buffered, and a
restore loads that snapshot and reads again up to where the checkpoint was, keeping the
numbered ones (:func:`replayed_buffer`). The state is then a few numbers per buffered
element, not the elements. The buffer is stored by value instead where the input cannot
be read again the same way (``deterministic=False`` upstream, an input that refuses
checkpoints) or the re-read would take longer than :data:`MAX_REPLAY_SECONDS`.
"""

from __future__ import annotations

import array
import collections
import math
import secrets
import time
from typing import Any

import numpy as np

from feedline.core.dataset import Dataset
from feedline.core.errors import CheckpointError
from feedline.core.iterator import DatasetIterator, IteratorContext, State, chunk_reader
from feedline.core.registry import operation
from feedline.core.seed_epochs import EpochCounter, restored_epoch, start_epoch
from feedline.core.seeds import pcg64_state_to_json, rng_from_json
from feedline.core.state_codec import decode, encode
from feedline.core.traits import INDEPENDENT
from feedline.core.unary import INPUT_KEY, UnaryDataset, UnaryIterator
from feedline.core.validation import validate_int, validate_seed

try:  # built by setup.py; the Python loops below are the reference and the fallback
    from feedline.transforms import _shuffle_fast
except ImportError:  # pragma: no cover - FEEDLINE_PURE_PYTHON builds
    _shuffle_fast = None

RANDOM_BLOCK = 1024
"""Uniform draws made at once: one NumPy call per block instead of one per element."""

POSITIONS_KEY = "positions"
"""The state key of a buffer stored by position: ``{"replay": items to read again from the
snapshot under "input", "numbers": the buffered items' numbers in buffer order}``; a buffer
by value has ``{"replay": 0, "numbers": []}`` and its elements under "buffer"."""

MAX_REPLAY_SECONDS = 2.0
"""Re-reading the input after a restore may take this long (as measured while pulling);
a buffer that would take longer is stored by value."""

SNAPSHOT_COST_PER_ITEM = 1e-7
"""Input snapshots are spaced so that taking them costs at most this per item read."""

MIN_SNAPSHOT_INTERVAL = 64

_TIMING_SAMPLE = 16
"""One element pull in this many is timed (per-element path); chunks are always timed."""

_NEVER = 1 << 62

_UNNUMBERED = -1
"""The number of an element restored by value: it cannot be read again by position."""

_STAGE_SEED_TAG = 0x5EED
_OPTIONS_SEED_TAG = 0x0975
_UINT64 = (1 << 64) - 1


def _graph_size(dataset: Dataset) -> int:
    """Nodes upstream of ``dataset`` (itself included): tells apart shuffles of one pipeline
    that share ``Options.seed``, the same way on every run."""
    seen: set[int] = set()
    stack = [dataset]
    while stack:
        node = stack.pop()
        if id(node) not in seen:
            seen.add(id(node))
            stack.extend(node._inputs)
    return len(seen)


@operation("shuffle")
class ShuffleDataset(UnaryDataset):
    """The node of ``Dataset.shuffle``.

    Args:
        input_dataset: The dataset to shuffle.
        buffer_size: Elements to sample from; a positive int.
        seed: Makes the order reproducible; ``None`` falls back to ``Options.seed``, then to
            fresh randomness.
        reshuffle_each_iteration: Whether each epoch (each iterator ``repeat`` builds) gets
            a different order.
        name: Shown in errors and profiles.

    Example:
        >>> import feedline as fl
        >>> ds = ShuffleDataset(fl.Dataset.range(6), 6, seed=1, reshuffle_each_iteration=False)
        >>> first, second = [[int(x) for x in ds] for _ in range(2)]
        >>> first == second and sorted(first) == list(range(6))
        True
    """

    TRAITS = INDEPENDENT

    # Drawn anew for every dataset object; a checkpoint holds the generator itself. The
    # epoch counter is where this object's iterators are, not what the pipeline is.
    _NOT_FINGERPRINTED = frozenset({"_unseeded_fixed_seed", "_epochs"})

    def __init__(self, input_dataset: Dataset, buffer_size: int, seed: int | None = None,
                 reshuffle_each_iteration: bool | None = True, name: str | None = None) -> None:
        super().__init__(input_dataset)
        self.buffer_size = validate_int(buffer_size, "shuffle(buffer_size)", minimum=1,
                                        hint="a positive int")
        self.seed = validate_seed(seed, "shuffle(seed)")
        # tf.data treats None as True.
        self.reshuffle_each_iteration = reshuffle_each_iteration is not False
        # Without any seed and without reshuffling, every epoch and every run of this dataset
        # object repeats one random order: fix its seed now.
        self._unseeded_fixed_seed = secrets.randbits(64)
        self._epochs = EpochCounter()
        self.name = name or "shuffle"

    def _seed_entropy(self, ctx: IteratorContext, epoch: int) -> list[int] | None:
        """What seeds epoch ``epoch``'s generator; ``None`` means fresh OS entropy."""
        epoch_key = epoch if self.reshuffle_each_iteration else 0
        if self.seed is not None:
            return [_STAGE_SEED_TAG, self.seed & _UINT64, epoch_key]
        if ctx.options.seed is not None:
            return [_OPTIONS_SEED_TAG, int(ctx.options.seed) & _UINT64, _graph_size(self),
                    epoch_key]
        if not self.reshuffle_each_iteration:
            return [_STAGE_SEED_TAG, self._unseeded_fixed_seed, 0]
        return None

    def _make_iterator(self, ctx: IteratorContext) -> DatasetIterator:
        epoch = start_epoch(self, self._epochs, ctx)
        entropy = self._seed_entropy(ctx, epoch)
        generator = np.random.Generator(np.random.PCG64(np.random.SeedSequence(entropy)))
        return ShuffleIterator(ctx, self._make_input_iterator(ctx), self, generator, epoch)


class ShuffleIterator(UnaryIterator):
    """Fills the buffer lazily (just before each draw), so no input element is read early.

    The state holds the epoch, and the generator as it was before the current block of
    uniform draws plus how many of them were used; restoring redraws the block, so the
    continuation is exactly the same. The buffer is held by position where it can be
    (module docstring): ``_numbers`` runs beside it, each element's number in the input,
    moved with it by every draw.
    """

    # 2: the "positions" key (a buffer by position). Version 1 states (the buffer always by
    # value) still load: they are version 2 states with nothing to read again.
    STATE_VERSION = 2

    def __init__(self, ctx: IteratorContext, upstream: DatasetIterator, node: ShuffleDataset,
                 generator: np.random.Generator, epoch: int) -> None:
        super().__init__(ctx, upstream)
        self._node = node
        self._buffer_size = node.buffer_size
        self._epoch = epoch
        self._buffer: list[Any] = []
        self._exhausted = False
        self._start_block(generator)
        self._start_numbering(upstream.replay_exact)

    def _start_numbering(self, possible: bool) -> None:
        """Number from here on (``possible``: the input reads again the same way)."""
        self._read = 0  # items pulled from the input since the oldest snapshot's base
        self._numbers: array.array[int] | None = array.array("q") if possible else None
        self._snapshots: collections.deque[tuple[int, State]] = collections.deque()
        self._next_snapshot = 0
        self._next_event = 0  # read count of the next sampled pull (_sampled_pull)
        self._pull_seconds = 0.0  # time spent pulling the items timed
        self._timed = 0

    def _start_block(self, generator: np.random.Generator, used: int = 0) -> None:
        self._generator = generator
        # Taken as NumPy gives it, turned into JSON only by a checkpoint (once per block
        # was a third of the chunked path's cost).
        self._block_state = generator.bit_generator.state
        self._block_array = generator.random(RANDOM_BLOCK)
        # As Python floats for the one-draw path (made when it first draws: the chunked
        # path reads the array).
        self._block: list[float] | None = None
        self._used = used

    def __next__(self) -> Any:
        buffer = self._buffer
        if not self._exhausted:
            upstream, size, numbers = self._upstream, self._buffer_size, self._numbers
            if len(buffer) == size - 1:  # full after a draw: one pull, one draw
                try:
                    element = self._sampled_pull() if self._read >= self._next_event \
                        else next(upstream)
                except StopIteration:
                    self._exhausted = True
                except Exception:
                    self._read += 1  # an error is an item of the input: a replay counts it
                    raise
                else:
                    self._read += 1
                    return self._swap_draw(element, self._read - 1)
            while len(buffer) < size and not self._exhausted:
                try:
                    element = self._sampled_pull() if self._read >= self._next_event \
                        else next(upstream)
                except StopIteration:
                    self._exhausted = True
                    break
                except Exception:
                    self._read += 1
                    raise
                buffer.append(element)
                if numbers is not None:
                    numbers.append(self._read)
                self._read += 1
        if not buffer:
            raise StopIteration
        return self._draw()

    def _swap_draw(self, element: Any, number: int) -> Any:
        """:meth:`_draw` from the buffer with ``element`` (input item ``number``) added, in
        one step: the drawn place takes the new element (or the draw is the new element)."""
        buffer = self._buffer
        if self._used == RANDOM_BLOCK:
            self._start_block(self._generator)
        block = self._block
        if block is None:
            block = self._block = self._block_array.tolist()
        u = block[self._used]
        self._used += 1
        n = len(buffer) + 1
        i = min(int(u * n), n - 1)
        if i == n - 1:
            return element
        drawn = buffer[i]
        buffer[i] = element
        if self._numbers is not None:
            self._numbers[i] = number
        return drawn

    def _sampled_pull(self) -> Any:
        """One element pulled on the numbering's schedule: a snapshot first when one is
        due, and the pull timed (one in :data:`_TIMING_SAMPLE`: what a replay would cost)."""
        if self._numbers is None:
            self._next_event = _NEVER
            return next(self._upstream)
        if self._read >= self._next_snapshot:
            self._take_snapshot()
        self._next_event = min(self._read + _TIMING_SAMPLE, self._next_snapshot)
        started = time.perf_counter()
        element = next(self._upstream)
        self._pull_seconds += time.perf_counter() - started
        self._timed += 1
        return element

    def _draw(self) -> Any:
        """Take one element from a non-empty buffer, uniformly at random."""
        buffer = self._buffer
        if self._used == RANDOM_BLOCK:
            self._start_block(self._generator)
        block = self._block
        if block is None:
            block = self._block = self._block_array.tolist()
        u = block[self._used]
        self._used += 1
        n = len(buffer)
        # A 53-bit uniform scaled to n: bias below n / 2**53, far under any measurable level.
        i = min(int(u * n), n - 1)
        element = buffer[i]
        last = buffer.pop()
        numbers = self._numbers
        if i < n - 1:
            buffer[i] = last
            if numbers is not None:
                numbers[i] = numbers.pop()
        elif numbers is not None:
            numbers.pop()
        return element

    def next_chunk(self, limit: int) -> list[Any]:
        # Exactly the draws and pulls of ``limit`` calls of __next__: each output after the
        # buffer is full takes one input element first. Input is pulled only while no
        # output is in hand, so an input error is raised in its turn, never held back.
        buffer, size, out = self._buffer, self._buffer_size, []
        pull = chunk_reader(self._upstream)
        while len(out) < limit:
            fresh: list[Any] = []
            if not self._exhausted and len(buffer) < size:
                if out:
                    break
                try:
                    if pull is None and self._read < self._next_event:
                        fresh = [next(self._upstream)]  # the common case, inline
                        self._read += 1
                    else:
                        fresh = self._pull_fresh(pull, size - len(buffer) + limit - 1)
                except StopIteration:
                    self._exhausted = True
                    continue
                except Exception:
                    self._read += 1  # an error is an item of the input: a replay counts it
                    raise
                room = size - len(buffer)
                numbers = self._numbers
                if len(fresh) == 1 and room == 1:  # one pull, one draw
                    out.append(self._swap_draw(fresh[0], self._read - 1))
                    continue
                if len(fresh) == 1:
                    buffer.append(fresh[0])
                    if numbers is not None:
                        numbers.append(self._read - 1)
                    fresh = []
                else:
                    buffer.extend(fresh[:room])
                    if numbers is not None:
                        first = self._read - len(fresh)
                        numbers.extend(range(first, first + min(room, len(fresh))))
                    fresh = fresh[room:]
                if len(buffer) < size:
                    continue
            if not buffer:
                if out:
                    break
                raise StopIteration
            if self._exhausted and not fresh:
                self._drain_into(out, limit - len(out))
            else:
                self._draw_into(out, fresh)
        return out

    def _pull_fresh(self, pull: Any, want: int) -> list[Any]:
        """Up to ``want`` input elements (one without ``pull``), counted: a snapshot first
        when one is due, chunks timed and single pulls sampled. ``StopIteration`` at the
        input's end; an error is raised (the caller counts it)."""
        if pull is None:
            fresh = [self._sampled_pull()]
        else:
            if self._numbers is not None and self._read >= self._next_snapshot:
                self._take_snapshot()
            started = time.perf_counter()
            fresh = pull(want)
            self._pull_seconds += time.perf_counter() - started
            self._timed += len(fresh)
        self._read += len(fresh)
        return fresh

    def _drain_into(self, out: list[Any], count: int) -> None:
        """``count`` draws (at most the buffer's size) from a buffer the input no longer
        refills, as ``count`` calls of :meth:`_draw` make them."""
        buffer = self._buffer
        count = min(count, len(buffer))
        while count:
            if self._used == RANDOM_BLOCK:
                self._start_block(self._generator)
            take = min(count, RANDOM_BLOCK - self._used)
            if _shuffle_fast is not None:
                _shuffle_fast.drain(buffer, self._block_array[self._used:self._used + take], out,
                                    self._numbers)
                if self._numbers is not None:
                    del self._numbers[len(buffer):]
                self._used += take
            else:
                for _ in range(take):
                    out.append(self._draw())
            count -= take

    def _draw_into(self, out: list[Any], fresh: list[Any]) -> None:
        """One draw from the buffer, then for each of ``fresh``: add it, draw again."""
        buffer, append, numbers = self._buffer, out.append, self._numbers
        n = len(buffer)
        append(self._draw())
        # fresh[k]'s number: the fresh elements are the last ones read.
        first = self._read - len(fresh)
        # From here each step adds one element to a buffer of n - 1 and draws one of n: the
        # new element itself when the draw is the last place, else the one it replaces.
        # The places come from the block in one NumPy call (the same float arithmetic).
        done = 0
        while done < len(fresh):
            if self._used == RANDOM_BLOCK:
                self._start_block(self._generator)
            take = min(len(fresh) - done, RANDOM_BLOCK - self._used)
            uniforms = self._block_array[self._used:self._used + take]
            self._used += take
            if _shuffle_fast is not None:
                _shuffle_fast.swap_draws(buffer, uniforms, fresh, done, out, numbers,
                                         first + done)
                done += take
                continue
            places = np.minimum((uniforms * n).astype(np.int64), n - 1).tolist()
            top = n - 1
            for k, (i, element) in enumerate(zip(places, fresh[done:done + take])):
                if i < top:
                    append(buffer[i])
                    buffer[i] = element
                    if numbers is not None:
                        numbers[i] = first + done + k
                else:
                    append(element)
            done += take

    def _take_snapshot(self) -> None:
        """Keep the input's state at this read count, and drop the snapshots that no
        buffered element needs any more (each checkpoint uses the newest one before the
        oldest buffered element, whose number only grows)."""
        started = time.perf_counter()
        try:
            state = self._upstream.state_dict()
        except CheckpointError:
            # An input that refuses checkpoints: the stage's own state will refuse too, or
            # hold the buffer by value; stop numbering either way.
            self._numbers = None
            self._snapshots.clear()
            self._next_event = _NEVER
            return
        cost = time.perf_counter() - started
        snapshots = self._snapshots
        snapshots.append((self._read, state))
        oldest = self._oldest_number()
        while len(snapshots) > 1 and snapshots[1][0] <= oldest:
            snapshots.popleft()
        self._next_snapshot = self._read + max(
            MIN_SNAPSHOT_INTERVAL, self._buffer_size // 2,
            math.ceil(cost / SNAPSHOT_COST_PER_ITEM))

    def _oldest_number(self) -> int:
        numbers = self._numbers
        if not numbers:
            return self._read
        return int(np.frombuffer(numbers, dtype=np.int64).min())

    def _position(self) -> tuple[int, State] | None:
        """The snapshot a checkpoint re-reads the buffer from, or ``None`` where the buffer
        goes by value (module docstring)."""
        if self._numbers is None or not self._snapshots or not self._buffer:
            return None
        oldest = self._oldest_number()
        if oldest == _UNNUMBERED:
            return None
        usable = [snapshot for snapshot in self._snapshots if snapshot[0] <= oldest]
        if not usable:
            return None
        at, snapshot = usable[-1]
        per_item = self._pull_seconds / self._timed if self._timed else 0.0
        if (self._read - at) * per_item > MAX_REPLAY_SECONDS:
            return None
        return at, snapshot

    def _get_state(self) -> State:
        state: State = {
            "epoch": self._epoch, "rng": pcg64_state_to_json(self._block_state), "used": self._used,
            "exhausted": self._exhausted}
        position = self._position()
        if position is None:
            state["buffer"] = [encode(e) for e in self._buffer]
            state[POSITIONS_KEY] = {"replay": 0, "numbers": []}
            return self._with_input_state(state)
        at, snapshot = position
        assert self._numbers is not None
        state["buffer"] = []
        state[POSITIONS_KEY] = {"replay": self._read - at,
                                "numbers": [number - at for number in self._numbers]}
        state[INPUT_KEY] = snapshot
        return state

    def load_state_dict(self, state: State) -> None:
        if isinstance(state, dict) and state.get("version") == 1 and POSITIONS_KEY not in state:
            state = {**state, "version": self.STATE_VERSION,
                     POSITIONS_KEY: {"replay": 0, "numbers": []}}
        positions = state.get(POSITIONS_KEY) if isinstance(state, dict) else None
        if positions is not None and not (
                isinstance(positions, dict) and set(positions) == {"replay", "numbers"}
                and isinstance(positions["replay"], int)
                and isinstance(positions["numbers"], list)
                and all(isinstance(n, int) for n in positions["numbers"])):
            raise CheckpointError(f"damaged state for the {self.state_type()} stage: "
                                  f"{POSITIONS_KEY!r} is {str(positions)[:80]}, expected "
                                  "{'replay': int, 'numbers': [int, ...]}")
        super().load_state_dict(state)

    def _set_state(self, state: State) -> None:
        positions = state[POSITIONS_KEY]
        self._load_input_state(state)
        # The next iterator of this node (the next epoch under repeat) continues from here.
        self._epoch = restored_epoch(self._node, self._node._epochs, self._ctx, state["epoch"])
        self._exhausted = state["exhausted"]
        self._start_block(rng_from_json(state["rng"]), state["used"])
        self._start_numbering(self._upstream.replay_exact)
        replay, numbers = positions["replay"], positions["numbers"]
        if state["buffer"] and numbers:
            raise CheckpointError(f"damaged state for the {self.state_type()} stage: it holds "
                                  "elements both by value and by position")
        if not numbers:  # by value; a replay (of items all handed out) only moves the input
            replayed_buffer(self._upstream, replay, [], self._node.name)
            self._buffer = [decode(e) for e in state["buffer"]]
            if self._numbers is not None:
                self._numbers.extend([_UNNUMBERED] * len(self._buffer))
            return
        # The snapshot under "input" is loaded: read again up to the checkpoint.
        self._buffer = replayed_buffer(self._upstream, replay, numbers, self._node.name)
        if self._numbers is not None:
            self._snapshots.append((0, state[INPUT_KEY]))
            self._numbers.extend(numbers)
            self._read = replay
            self._next_snapshot = replay


def replayed_buffer(upstream: DatasetIterator, replay: int, numbers: list[int],
                    stage: str = "shuffle") -> list[Any]:
    """Pull ``replay`` items from ``upstream`` (restored to a shuffle state's snapshot) and
    return those numbered ``numbers`` (relative to the snapshot), in that order: the
    buffer the state describes. Errors are items too, skipped like the others.

    Example:
        >>> import feedline as fl
        >>> it = fl.Dataset.range(10, 20)._make_iterator(IteratorContext())
        >>> [int(x) for x in replayed_buffer(it, 5, [4, 1, 3])]
        [14, 11, 13]
    """
    wanted = {number: place for place, number in enumerate(numbers)}
    if len(wanted) != len(numbers) or any(not 0 <= n < replay for n in numbers):
        raise CheckpointError(f"damaged state for the {stage} stage: buffered numbers "
                              f"{numbers[:8]}... are not distinct items below {replay}")
    buffer: list[Any] = [None] * len(numbers)
    for number in range(replay):
        try:
            element = next(upstream)
        except StopIteration:
            raise CheckpointError(
                f"the {stage} stage's input ended after {number} of the {replay} items its "
                "checkpoint reads again: the input is not the one checkpointed") from None
        except Exception as error:  # an item like any other: counted, skipped if handed out
            if number in wanted:
                raise CheckpointError(
                    f"the {stage} stage's input raised re-reading buffered item {number} "
                    f"of {replay} after a restore: {error!r}") from error
            continue
        place = wanted.get(number)
        if place is not None:
            buffer[place] = element
    return buffer


def buffer_by_value(node: ShuffleDataset, state: State, ctx: IteratorContext) -> State:
    """``state`` of ``node``'s iterator with its buffer by value and its input at the
    checkpoint: a state with positions is read again from its snapshot (what a restore
    does). For tools that deal buffered elements out (:mod:`feedline.resume.elastic`)."""
    positions = state.get(POSITIONS_KEY)
    if positions is None or not positions["replay"]:
        return state
    upstream = node._inputs[0]._make_iterator(ctx)
    try:
        upstream.load_state_dict(state[INPUT_KEY])
        buffer = replayed_buffer(upstream, int(positions["replay"]),
                                 [int(n) for n in positions["numbers"]], node.name)
        by_value = {key: value for key, value in state.items()
                    if key not in (POSITIONS_KEY, INPUT_KEY)}
        by_value["buffer"] = [encode(e) for e in buffer]
        by_value[POSITIONS_KEY] = {"replay": 0, "numbers": []}
        by_value[INPUT_KEY] = upstream.state_dict()
        return by_value
    finally:
        upstream.close()
