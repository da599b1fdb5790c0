"""Dataset.random: infinite int64 scalars, reproducible with a seed, exact restores."""

import json

import numpy as np
import pytest

import feedline as fl
from feedline.testing import check_checkpointing


def take(ds, n):
    out = list(ds.take(n))
    assert all(isinstance(x, np.int64) for x in out)
    return [int(x) for x in out]


def test_spec_and_cardinality():
    ds = fl.Dataset.random(seed=1)
    assert ds.cardinality() == fl.INFINITE
    assert ds.element_spec == fl.TensorSpec((), np.dtype(np.int64))
    with pytest.raises(TypeError, match="infinite"):
        len(ds)


def test_seeded_sequence_is_reproducible_and_pinned():
    first = take(fl.Dataset.random(seed=42), 3)
    assert first == take(fl.Dataset.random(seed=42), 3)
    # Pinned: changing it changes every seeded pipeline built on random().
    assert first == [-4169774921698171256, 8095878257575067585, -2608407982884907484]
    assert take(fl.Dataset.random(seed=43), 3) != first


def test_every_iterator_of_one_dataset_agrees_even_without_seed():
    ds = fl.Dataset.random()
    assert take(ds, 100) == take(ds, 100)
    assert take(ds, 5) != take(fl.Dataset.random(), 5)


def test_options_seed_is_used_without_a_seed():
    def make():
        return fl.Dataset.random().with_options(fl.Options(seed=5))

    assert take(make(), 10) == take(make(), 10)


def test_values_cover_the_int64_range():
    values = np.array(take(fl.Dataset.random(seed=0), 20_000), dtype=np.int64)
    n = len(values)
    negatives = int((values < 0).sum())
    assert abs(negatives - n / 2) < 5 * (n * 0.25) ** 0.5
    # The top byte is uniform over its 256 values: a coarse check of the high bits.
    counts = np.bincount((values.view(np.uint64) >> np.uint64(56)).astype(np.int64),
                         minlength=256)
    chi2 = float(((counts - n / 256) ** 2 / (n / 256)).sum())
    assert chi2 < 400  # 255 degrees of freedom: mean 255, std ~22.6


def test_checkpointing_across_block_boundaries():
    ds = fl.Dataset.random(seed=9)
    check_checkpointing(ds, max_elements=140, steps=[0, 1, 2, 63, 64, 65, 127, 128, 129, 140])
    check_checkpointing(fl.Dataset.random(), max_elements=70, steps=[0, 64, 70])


def test_state_is_json_safe():
    it = iter(fl.Dataset.random(seed=3))
    [next(it) for _ in range(70)]
    state = json.loads(json.dumps(it.state_dict()))
    assert state["root"]["offset"] == 6
    expected = [int(next(it)) for _ in range(5)]
    again = iter(fl.Dataset.random(seed=3))
    again.load_state_dict(state)
    assert [int(next(again)) for _ in range(5)] == expected
    # Another seed is another pipeline: its checkpoint does not apply.
    with pytest.raises(fl.CheckpointError, match=r"RandomDataset\(seed=3\) where this one has "
                                                 r"RandomDataset\(seed=999\)"):
        iter(fl.Dataset.random(seed=999)).load_state_dict(state)


def test_bad_seed():
    with pytest.raises(TypeError, match="seed"):
        fl.Dataset.random(seed=1.5)
    with pytest.raises(TypeError, match="seed"):
        fl.Dataset.random(seed=True)


def test_corrupt_offset_is_a_checkpoint_error():
    it = iter(fl.Dataset.random(seed=3))
    state = it.state_dict()
    state["root"]["offset"] = 1000
    with pytest.raises(fl.CheckpointError, match="checksum"):
        iter(fl.Dataset.random(seed=3)).load_state_dict(state)
    # Forged with a valid envelope, the stage itself still refuses it.
    from feedline.core import pipeline_state

    restored = iter(fl.Dataset.random(seed=3))
    with pytest.raises(fl.CheckpointError, match="offset"):
        restored.load_state_dict(pipeline_state.seal(state["root"], restored._fingerprint()))


@pytest.mark.parametrize("rerandomize", [None, False])
def test_without_rerandomizing_every_iteration_repeats_the_sequence(rerandomize):
    ds = fl.Dataset.random(seed=42, rerandomize_each_iteration=rerandomize).take(5)
    first = take(ds, 5)
    assert first == take(ds, 5) == take(fl.Dataset.random(seed=42), 5)
    assert take(ds.repeat(2), 10) == first + first
    assert fl.Dataset.random(seed=3, rerandomize_each_iteration=rerandomize
                             ).rerandomize_each_iteration is False


def test_rerandomize_each_iteration_draws_a_new_sequence_per_epoch_reproducibly():
    # tf.data: each epoch of a repeat and each new iter(ds) of the object draw anew.
    def make():
        return fl.Dataset.random(seed=42, rerandomize_each_iteration=True, name="noise").take(5)

    epochs = take(make().repeat(3), 15)
    assert len({tuple(epochs[i:i + 5]) for i in (0, 5, 10)}) == 3
    assert epochs[:5] != take(fl.Dataset.random(seed=42), 5)  # as tf.data: another stream
    ds = make()
    assert take(ds, 5) + take(ds, 5) + take(ds, 5) == epochs
    assert take(make().repeat(3), 15) == epochs  # another object starts over


def test_rerandomize_each_iteration_checkpoints_and_refuses_the_other_kind_of_state():
    ds = fl.Dataset.random(seed=7, rerandomize_each_iteration=True).take(6)
    check_checkpointing(ds.repeat(3), epochs=2)
    it = iter(ds)
    next(it)
    state = it.state_dict()
    assert state["root"]["input"]["epoch"] == 0
    plain = fl.Dataset.random(seed=7).take(6)
    with iter(plain) as other, pytest.raises(fl.CheckpointError):
        other.load_state_dict(state)
