"""global_shuffle: a seeded permutation of a random-access dataset, tf.data's semantics."""

import json

import numpy as np
import pytest

import feedline as fl
from feedline.testing import check_checkpointing
from feedline.transforms.global_shuffle import IndexShuffle


def ints(ds):
    return [int(x) for x in ds]


@pytest.mark.parametrize("n", [0, 1, 2, 3, 4, 5, 16, 17, 1000, 4097])
def test_index_shuffle_is_a_permutation(n):
    for keys in ([1, 2, 3, 4, 5, 6], [2**64 - 1] * 6, [0] * 6):
        out = IndexShuffle(n, keys)(np.arange(n))
        assert sorted(out.tolist()) == list(range(n))


def test_index_shuffle_is_uniform_over_seeds():
    # Where element 0 lands, over 3000 fixed seeds: each of 5 places about 600 times.
    rng = np.random.default_rng(0)
    counts = np.zeros(5)
    for _ in range(3000):
        keys = [int(k) for k in rng.integers(0, 2**63, 6)]
        counts[int(IndexShuffle(5, keys)([0])[0])] += 1
    chi_square = float(((counts - 600) ** 2 / 600).sum())
    assert chi_square < 20, counts  # 4 degrees of freedom: p < 0.001 beyond 18.5


def test_seeded_order_is_reproducible_and_a_permutation():
    ds = fl.Dataset.range(50).global_shuffle(seed=7)
    first = ints(ds)
    assert sorted(first) == list(range(50)) and first != list(range(50))
    assert ints(fl.Dataset.range(50).global_shuffle(seed=7)) == first
    assert ints(fl.Dataset.range(50).global_shuffle(seed=8)) != first
    assert [int(ds[i]) for i in range(50)] == first


def test_reshuffle_each_iteration():
    reshuffled = ints(fl.Dataset.range(30).global_shuffle(seed=1).repeat(3))
    epochs = [reshuffled[i:i + 30] for i in (0, 30, 60)]
    assert all(sorted(e) == list(range(30)) for e in epochs)
    assert len({tuple(e) for e in epochs}) == 3
    fixed = ints(fl.Dataset.range(30).global_shuffle(seed=1, reshuffle_each_iteration=False)
                 .repeat(3))
    assert fixed[:30] == fixed[30:60] == fixed[60:] == epochs[0]


def test_options_seed_and_no_seed():
    seeded = fl.Options(seed=5)
    a = ints(fl.Dataset.range(40).global_shuffle().with_options(seeded))
    assert a == ints(fl.Dataset.range(40).global_shuffle().with_options(seeded))
    unseeded = fl.Dataset.range(40).global_shuffle()
    assert sorted(ints(unseeded)) == list(range(40))
    fixed = fl.Dataset.range(40).global_shuffle(reshuffle_each_iteration=False)
    assert ints(fixed) == ints(fixed)


def test_unseeded_order_restores_exactly():
    ds = fl.Dataset.range(100).global_shuffle()
    it = iter(ds)
    head = ints(next(it) for _ in range(30))
    state = it.state_dict()
    rest = ints(it)
    restored = iter(ds)
    restored.load_state_dict(json.loads(json.dumps(state)))
    assert ints(restored) == rest
    assert sorted(head + rest) == list(range(100))


def test_needs_random_access():
    with pytest.raises(TypeError, match="global_shuffle needs random access .* 'filter"):
        fl.Dataset.range(5).filter(lambda x: True).global_shuffle(1)


def test_checkpoints(tmp_path):
    ds = fl.Dataset.range(23).map(lambda x: x * 3).global_shuffle(seed=4).batch(4)
    check_checkpointing(ds, constant_state_size=True,
                        variants=[fl.Dataset.range(23).map(lambda x: x * 3, num_parallel_calls=2)
                                  .global_shuffle(seed=4).batch(4)])


def test_state_of_a_global_shuffled_tfrecord_pipeline_is_under_one_kib(tmp_path):
    paths = []
    for f in range(8):
        path = str(tmp_path / f"part-{f}.tfrecord")
        records = [fl.encode_example({"x": np.int64(f * 1000 + i)}) for i in range(500)]
        fl.write_tfrecord(fl.Dataset.from_tensor_slices(np.array(records, dtype=object)), path)
        paths.append(path)
    spec = {"x": fl.FixedLenFeature([], np.int64)}
    ds = (fl.TFRecordDataset(paths).global_shuffle(seed=3)
          .map(lambda r: fl.parse_single_example(r, spec)["x"], num_parallel_calls=2)
          .batch(32).prefetch(2))
    with iter(ds) as it:
        seen = [int(v) for _ in range(10) for v in next(it)]
        state = it.state_dict()
        size = len(json.dumps(state))
        rest = [int(v) for batch in it for v in batch]
    assert size <= 1024, size
    assert sorted(seen + rest) == sorted(f * 1000 + i for f in range(8) for i in range(500))
    with iter(ds) as restored:
        restored.load_state_dict(state)
        assert [int(v) for batch in restored for v in batch] == rest


def test_map_fusion_below_keeps_random_access():
    def make():
        return (fl.Dataset.range(10).map(lambda x: x + 1).map(lambda x: x * 2)
                .global_shuffle(seed=0).map(lambda x: x - 1).map(lambda x: -x))

    expected = sorted(-((x + 1) * 2 - 1) for x in range(10))
    assert sorted(ints(make())) == expected
    off = fl.Options(optimization=fl.OptimizationOptions(map_fusion=False))
    assert ints(make()) == ints(make().with_options(off))


def test_each_new_iterator_of_one_dataset_is_the_next_epoch():
    # As tf.data's seed generator: a new iter(ds) reshuffles, and continues the epochs.
    epochs = ints(fl.Dataset.range(12).global_shuffle(seed=4).repeat(3))
    ds = fl.Dataset.range(12).global_shuffle(seed=4)
    assert ints(ds) + ints(ds) + ints(ds) == epochs
    assert [int(ds[i]) for i in range(12)] == epochs[:12]  # ds[i]: epoch 0, always
    fixed = fl.Dataset.range(12).global_shuffle(seed=4, reshuffle_each_iteration=False)
    assert ints(fixed) == ints(fixed) == epochs[:12]


@pytest.mark.parametrize("make", [
    lambda: fl.Dataset.range(0), lambda: fl.Dataset.range(10).take(0),
    lambda: fl.Dataset.range(10).skip(10), lambda: fl.Dataset.range(10).skip(-1),
    lambda: fl.Dataset.range(10).repeat(0), lambda: fl.Dataset.range(0).repeat(),
])
def test_an_empty_input_is_refused_as_tf_data_does(make):
    # tf.data: InvalidArgument ("requires the input dataset to have a non-empty finite
    # cardinality"), FailedPrecondition for skip(-1) and repeat(0).
    with pytest.raises(fl.InvalidArgumentError, match="non-empty input"):
        make().global_shuffle(seed=1)


def test_an_empty_input_known_only_when_opened_is_refused(tmp_path):
    path = str(tmp_path / "empty.tfrecord")
    fl.TFRecordWriter(path).close()
    ds = fl.TFRecordDataset([path])
    assert ds.cardinality() == fl.UNKNOWN
    shuffled = ds.global_shuffle(seed=1)
    with pytest.raises(fl.InvalidArgumentError, match="non-empty input"):
        list(shuffled)
