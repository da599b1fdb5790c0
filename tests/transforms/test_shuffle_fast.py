"""shuffle's C loops (``_shuffle_fast``) give exactly the Python loops' order, and restore."""

from __future__ import annotations

import numpy as np
import pytest

import feedline as fl
from feedline.core.iterator import IteratorContext
from feedline.testing import check_checkpointing
from feedline.transforms import shuffle

fast = pytest.importorskip("feedline.transforms._shuffle_fast",
                           reason="the optional C extension is not built")


def _chunked(ds: fl.Dataset, chunk: int) -> list[int]:
    it = ds._make_iterator(IteratorContext())
    out: list[int] = []
    try:
        while True:
            out += [int(x) for x in it.next_chunk(chunk)]
    except StopIteration:
        return out
    finally:
        it.close()


def _pipeline(n: int, buffer: int) -> fl.Dataset:
    # A parallel interleave hands shuffle whole chunks (as TFRecord files do).
    return (fl.Dataset.range(4)
            .interleave(lambda i: fl.Dataset.range(i * n, (i + 1) * n), cycle_length=2,
                        num_parallel_calls=2)
            .shuffle(buffer, seed=7))


@pytest.mark.parametrize("n, buffer, chunk", [(50, 7, 3), (600, 100, 512), (3000, 1000, 512),
                                              (700, 2000, 64), (2500, 1, 512)])
def test_c_loops_give_the_python_order(n, buffer, chunk, monkeypatch):
    sizes: list[int] = []
    draw_into = shuffle.ShuffleIterator._draw_into
    monkeypatch.setattr(shuffle.ShuffleIterator, "_draw_into",
                        lambda self, out, fresh: sizes.append(len(fresh)) or draw_into(
                            self, out, fresh))
    with_c = _chunked(_pipeline(n, buffer), chunk)
    assert chunk < 8 or buffer == 1 or max(sizes) > 8  # whole chunks went through swap_draws
    monkeypatch.setattr(shuffle, "_shuffle_fast", None)
    python = _chunked(_pipeline(n, buffer), chunk)
    one_by_one = [int(x) for x in _pipeline(n, buffer)]
    assert with_c == python == one_by_one
    assert sorted(with_c) == list(range(4 * n))


def test_the_order_of_a_seeded_shuffle_is_fixed():
    # A regression guard on the draws themselves (PCG64 blocks of 1,024 uniforms).
    values = [int(x) for x in fl.Dataset.range(10).shuffle(4, seed=3)]
    assert values == _python_reference(10, 4, 3)


def _python_reference(n: int, size: int, seed: int) -> list[int]:
    """tf.data's algorithm spelled out with the stage's generator and block draws."""
    generator = np.random.Generator(np.random.PCG64(np.random.SeedSequence(
        [shuffle._STAGE_SEED_TAG, seed, 0])))
    uniforms = iter(generator.random(shuffle.RANDOM_BLOCK).tolist())
    buffer, out, source = [], [], iter(range(n))
    for x in source:
        buffer.append(x)
        if len(buffer) == size:
            break
    while buffer:
        i = min(int(next(uniforms) * len(buffer)), len(buffer) - 1)
        out.append(buffer[i])
        last = buffer.pop()
        if i < len(buffer):
            buffer[i] = last
        nxt = next(source, None)
        if nxt is not None:
            buffer.append(nxt)
    return out


def test_checkpoints_restore_through_the_c_loops():
    check_checkpointing(_pipeline(700, 300).batch(64), steps=[0, 1, 5, 20], epochs=1)


def test_bad_arguments_are_type_errors_not_crashes():
    with pytest.raises(TypeError, match="float64"):
        fast.drain([1, 2], np.zeros(2, np.float32), [])
    with pytest.raises(ValueError, match="more uniforms"):
        fast.drain([1], np.zeros(2), [])
    with pytest.raises(ValueError, match="more uniforms"):
        fast.swap_draws([1], np.zeros(3), [1, 2], 0, [])
    out: list[int] = []
    buffer = [10, 11, 12]
    fast.drain(buffer, np.array([0.0, 0.99, 0.5]), out)
    assert out == [10, 11, 12] and buffer == []
