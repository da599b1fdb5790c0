import collections
import itertools
import json

import numpy as np
import pytest

import feedline as fl
from feedline.core.iterator import IteratorContext
from feedline.testing import check_checkpointing, fail_at


def ints(ds):
    return [int(x) for x in ds]


def chi_square(counts, expected):
    return sum((c - expected) ** 2 / expected for c in counts)


def test_seeded_order_is_reproducible_and_pinned():
    first = ints(fl.Dataset.range(10).shuffle(4, seed=42))
    assert first == ints(fl.Dataset.range(10).shuffle(4, seed=42))
    # Pinned: a change here breaks users' reproducible runs and saved checkpoints.
    assert first == [1, 2, 4, 0, 5, 3, 7, 8, 6, 9]


def test_each_new_iterator_of_one_dataset_is_the_next_epoch():
    # tf.data: the seed generator belongs to the dataset object, and every iterator made
    # from it (a repeat's epoch, a new iter(ds)) draws the next order. (TF's
    # testReshuffleIterationEpochs[reshuffle=True,seed=42].)
    def make():
        return fl.Dataset.range(10).shuffle(10, seed=42)

    epochs = ints(make().repeat(5))
    ds = make()
    first, second = ints(ds), ints(ds)
    assert first != second and sorted(first) == sorted(second) == list(range(10))
    assert first + second == epochs[:20]
    assert ints(ds.repeat(2)) == epochs[20:40]  # a repeat over it goes on from there
    assert ints(ds) == epochs[40:]
    # Without reshuffling, every iterator has the same order.
    still = fl.Dataset.range(10).shuffle(10, seed=42, reshuffle_each_iteration=False)
    assert ints(still) == ints(still) == ints(still.repeat(2))[10:]


def test_a_pinned_epoch_and_looking_at_the_dataset_leave_its_epochs_alone():
    def make():
        return fl.Dataset.range(10).shuffle(10, seed=5).map(lambda x: x + 100)

    epochs = ints(make().repeat(2))
    ds = make()
    assert ds.element_spec.dtype == np.int64  # read from a first element: epoch 0 pinned
    assert ints(fl.PipelineIterator(ds)) == ints(fl.PipelineIterator(ds)) == epochs[:10]
    assert ints(fl.PipelineIterator(ds, epoch=1)) == epochs[10:]
    assert ints(ds) == epochs[:10] and ints(ds) == epochs[10:]


def test_a_restored_state_sets_the_next_epoch_of_the_dataset():
    def make():
        return fl.Dataset.range(10).shuffle(10, seed=8)

    epochs = ints(make().repeat(4))
    ds = make()
    it = iter(ds)  # epoch 0
    head = [int(next(it)) for _ in range(4)]
    state = json.loads(json.dumps(it.state_dict()))
    it.close()
    assert ints(ds) == epochs[10:20] and ints(ds) == epochs[20:30]
    restored = iter(ds)
    restored.load_state_dict(state)
    assert head + ints(restored) == epochs[:10]
    # As tf.data's restore sets the seed generator: the run continues after the saved epoch.
    assert ints(ds) == epochs[10:20]


def test_multiset_is_preserved():
    values = [3, 1, 3, 7, 7, 7, 0]
    for buffer_size in (1, 2, 5, 100):
        out = ints(fl.Dataset.from_tensor_slices(values).shuffle(buffer_size, seed=1))
        assert sorted(out) == sorted(values)


def test_buffer_of_one_keeps_input_order():
    assert ints(fl.Dataset.range(20).shuffle(1, seed=9)) == list(range(20))
    assert ints(fl.Dataset.range(20).shuffle(1)) == list(range(20))


def test_output_k_comes_from_the_first_k_plus_buffer_inputs():
    # With buffer B, output k is one of inputs 0 .. k + B - 1 (tf.data's sliding window).
    for seed in range(20):
        out = ints(fl.Dataset.range(50).shuffle(5, seed=seed))
        assert all(x <= k + 4 for k, x in enumerate(out))


def test_first_output_is_uniform_over_the_first_buffer_inputs():
    buffer_size, runs = 4, 2000
    counts = collections.Counter(
        int(next(iter(fl.Dataset.range(10).shuffle(buffer_size, seed=s)))) for s in range(runs))
    assert set(counts) == set(range(buffer_size))
    # 3 degrees of freedom: P(chi2 > 16.27) = 0.001; the seeds are fixed, so this is exact.
    assert chi_square([counts[i] for i in range(buffer_size)], runs / buffer_size) < 16.27


def test_large_buffer_gives_a_uniform_permutation():
    runs = 3000
    counts = collections.Counter(
        tuple(ints(fl.Dataset.range(3).shuffle(10, seed=s))) for s in range(runs))
    assert set(counts) == set(itertools.permutations(range(3)))
    # 5 degrees of freedom: P(chi2 > 20.5) = 0.001.
    assert chi_square(list(counts.values()), runs / 6) < 20.5


def test_reshuffle_each_iteration_across_repeat():
    epochs = [ints(fl.Dataset.range(20).shuffle(20, seed=3).repeat(3))[i * 20:(i + 1) * 20]
              for i in range(3)]
    assert all(sorted(e) == list(range(20)) for e in epochs)
    assert epochs[0] != epochs[1] != epochs[2] != epochs[0]
    # Reproducible: the same epochs again from a new iterator.
    again = ints(fl.Dataset.range(20).shuffle(20, seed=3).repeat(3))
    assert again == [x for epoch in epochs for x in epoch]
    # Epoch 0 under repeat is the plain shuffle's order.
    assert epochs[0] == ints(fl.Dataset.range(20).shuffle(20, seed=3))


def test_no_reshuffle_repeats_the_same_order():
    ds = fl.Dataset.range(20).shuffle(20, seed=3, reshuffle_each_iteration=False)
    out = ints(ds.repeat(3))
    assert out[:20] == out[20:40] == out[40:] != list(range(20))


def test_unseeded_no_reshuffle_fixes_one_order_per_dataset():
    ds = fl.Dataset.range(30).shuffle(30, reshuffle_each_iteration=False)
    out = ints(ds.repeat(2))
    assert out[:30] == out[30:] == ints(ds)


def test_unseeded_reshuffle_differs_between_runs():
    ds = fl.Dataset.range(30).shuffle(30)
    assert ints(ds) != ints(ds)  # 1 / 30! chance of a false failure


def test_options_seed_is_the_default_seed():
    def make(seed=None):
        return fl.Dataset.range(30).shuffle(30, seed=seed)

    a = ints(make().with_options(fl.Options(seed=5)))
    assert a == ints(make().with_options(fl.Options(seed=5)))
    assert a != ints(make().with_options(fl.Options(seed=6)))
    # The stage's own seed wins over the options seed.
    assert ints(make(1)) == ints(make(1).with_options(fl.Options(seed=5)))


def test_stacked_shuffles_under_one_options_seed_are_reproducible():
    def make():
        ds = fl.Dataset.range(30).shuffle(30).map(lambda x: x).shuffle(7)
        return ds.with_options(fl.Options(seed=5))

    out = ints(make())
    assert out == ints(make()) and sorted(out) == list(range(30)) and out != list(range(30))


@pytest.mark.parametrize("bad, error", [(0, ValueError), (-1, ValueError), (-5, ValueError),
                                        (1.5, TypeError), (None, TypeError), (True, TypeError)])
def test_invalid_buffer_size(bad, error):
    with pytest.raises(error, match=r"shuffle\(buffer_size\)"):
        fl.Dataset.range(3).shuffle(bad)


def test_invalid_seed():
    with pytest.raises(TypeError, match="seed"):
        fl.Dataset.range(3).shuffle(2, seed="x")


def test_cardinality_and_spec():
    ds = fl.Dataset.range(7).shuffle(3)
    assert ds.cardinality() == 7
    assert ds.element_spec == fl.Dataset.range(7).element_spec


def test_input_error_propagates_and_shuffle_continues():
    def check(x):
        if x == 3:
            raise ValueError("bad")
        return x

    ds = fl.Dataset.range(6).map(check).shuffle(2, seed=0)
    it = ds._make_iterator(IteratorContext())
    out = []
    errors = 0
    while True:
        try:
            out.append(int(next(it)))
        except StopIteration:
            break
        except ValueError:
            errors += 1
    it.close()
    assert errors == 1 and sorted(out) == [0, 1, 2, 4, 5]


def test_state_is_json_and_restores_mid_stream():
    ds = fl.Dataset.range(100).shuffle(10, seed=7)
    full = ints(fl.Dataset.range(100).shuffle(10, seed=7))
    it = iter(ds)
    head = [int(next(it)) for _ in range(37)]
    state = json.loads(json.dumps(it.state_dict()))
    it.close()
    restored = iter(ds)
    restored.load_state_dict(state)
    assert head + ints(restored) == full


def test_restore_past_a_random_block_boundary():
    from feedline.transforms.shuffle import RANDOM_BLOCK

    n = RANDOM_BLOCK + 50
    ds = fl.Dataset.range(n).shuffle(8, seed=2)
    check_checkpointing(ds, steps=[0, RANDOM_BLOCK - 1, RANDOM_BLOCK, RANDOM_BLOCK + 1, n],
                        epochs=1)


@pytest.mark.parametrize("reshuffle", [True, False])
def test_shuffle_checkpointing(reshuffle):
    ds = fl.Dataset.range(12).shuffle(5, seed=11, reshuffle_each_iteration=reshuffle)
    assert sorted(ints(check_checkpointing(ds, epochs=3))) == list(range(12))


def test_shuffle_checkpointing_structured_elements_and_options_seed():
    ds = fl.Dataset.from_tensor_slices(({"a": np.arange(6)}, [b"a", b"b", b"c", b"d", b"e", b"f"]))
    ds = ds.shuffle(3).with_options(fl.Options(seed=4))
    check_checkpointing(ds)


def test_checkpoint_restores_the_epoch_for_later_reshuffles():
    ds = fl.Dataset.range(10).shuffle(10, seed=1).repeat(4)
    full = ints(fl.Dataset.range(10).shuffle(10, seed=1).repeat(4))
    it = iter(ds)
    head = [int(next(it)) for _ in range(15)]  # in epoch 1
    state = json.loads(json.dumps(it.state_dict()))
    it.close()
    restored = iter(ds)
    restored.load_state_dict(state)
    assert head + ints(restored) == full  # epochs 2 and 3 reshuffle as in the original


def test_checkpointing_restores_failing_elements_in_place():
    # a failure met while filling the buffer is raised in its turn, and restored there
    check_checkpointing(fail_at(fl.Dataset.range(10), [0, 6]).shuffle(4, seed=2), epochs=3)


@pytest.mark.timeout(120)
def test_states_load_with_other_execution_settings():
    def build(buffer_size, deterministic):
        options = fl.Options(deterministic=deterministic)
        return fl.Dataset.range(10).prefetch(buffer_size).shuffle(4, seed=2).with_options(options)

    check_checkpointing(build(1, None), variants=[build(4, True), build(2, False)])
