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
"""

from __future__ import annotations

import secrets
from typing import Any

import numpy as np

from feedline.core.dataset import Dataset
from feedline.core.iterator import DatasetIterator, IteratorContext, State, chunk_reader
from feedline.core.registry import operation
from feedline.core.seed_epochs import EpochCounter, restored_epoch, start_epoch
from feedline.core.seeds import pcg64_state_to_json, rng_from_json
from feedline.core.state_codec import decode, encode
from feedline.core.traits import INDEPENDENT
from feedline.core.unary import UnaryDataset, UnaryIterator
from feedline.core.validation import validate_int, validate_seed

try:  # built by setup.py; the Python loops below are the reference and the fallback
    from feedline.transforms import _shuffle_fast
except ImportError:  # pragma: no cover - FEEDLINE_PURE_PYTHON builds
    _shuffle_fast = None

RANDOM_BLOCK = 1024
"""Uniform draws made at once: one NumPy call per block instead of one per element."""

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

    The state holds the buffer (encoded), the epoch, and the generator as it was before the
    current block of uniform draws plus how many of them were used; restoring redraws the
    block, so the continuation is exactly the same.
    """

    def __init__(self, ctx: IteratorContext, upstream: DatasetIterator, node: ShuffleDataset,
                 generator: np.random.Generator, epoch: int) -> None:
        super().__init__(ctx, upstream)
        self._node = node
        self._buffer_size = node.buffer_size
        self._epoch = epoch
        self._buffer: list[Any] = []
        self._exhausted = False
        self._start_block(generator)

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
            upstream, size = self._upstream, self._buffer_size
            while len(buffer) < size:
                try:
                    buffer.append(next(upstream))
                except StopIteration:
                    self._exhausted = True
                    break
        if not buffer:
            raise StopIteration
        return self._draw()

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
        if i < n - 1:
            buffer[i] = last
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
                want = size - len(buffer) + limit - 1
                try:
                    fresh = pull(want) if pull is not None else [next(self._upstream)]
                except StopIteration:
                    self._exhausted = True
                    continue
                room = size - len(buffer)
                buffer.extend(fresh[:room])
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
                _shuffle_fast.drain(buffer, self._block_array[self._used:self._used + take], out)
                self._used += take
            else:
                for _ in range(take):
                    out.append(self._draw())
            count -= take

    def _draw_into(self, out: list[Any], fresh: list[Any]) -> None:
        """One draw from the buffer, then for each of ``fresh``: add it, draw again."""
        buffer, append = self._buffer, out.append
        n = len(buffer)
        append(self._draw())
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
                _shuffle_fast.swap_draws(buffer, uniforms, fresh, done, out)
                done += take
                continue
            places = np.minimum((uniforms * n).astype(np.int64), n - 1).tolist()
            top = n - 1
            for i, element in zip(places, fresh[done:done + take]):
                if i < top:
                    append(buffer[i])
                    buffer[i] = element
                else:
                    append(element)
            done += take

    def _get_state(self) -> State:
        return self._with_input_state({
            "epoch": self._epoch, "rng": pcg64_state_to_json(self._block_state), "used": self._used,
            "exhausted": self._exhausted, "buffer": [encode(e) for e in self._buffer]})

    def _set_state(self, state: State) -> None:
        self._load_input_state(state)
        # The next iterator of this node (the next epoch under repeat) continues from here.
        self._epoch = restored_epoch(self._node, self._node._epochs, self._ctx, state["epoch"])
        self._exhausted = state["exhausted"]
        self._buffer = [decode(e) for e in state["buffer"]]
        self._start_block(rng_from_json(state["rng"]), state["used"])
