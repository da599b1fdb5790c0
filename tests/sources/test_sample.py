"""sample_from_datasets and choose_from_datasets: tf.data's DirectedInterleave semantics."""

import collections
import json
import math

import numpy as np
import pytest

import feedline as fl
from feedline.core.iterator import IteratorContext
from feedline.testing import check_checkpointing, fail_at
from feedline.transforms.window import ElementListDataset


def ints(ds):
    return [int(x) for x in ds]


def constant(value):
    return fl.Dataset.from_tensors(np.int64(value)).repeat()


def assert_binomial_counts(counts, probabilities, n, sigmas=5.0):
    """Each count within ``sigmas`` binomial standard deviations of ``n * p``."""
    for i, p in enumerate(probabilities):
        std = math.sqrt(n * p * (1 - p))
        assert abs(counts.get(i, 0) - n * p) <= sigmas * std + 1e-9, (i, counts, n * p, std)


# ----------------------------------------------------------------- sample_from_datasets
def test_weighted_distribution():
    n, weights = 20_000, [0.2, 0.3, 0.5]
    ds = fl.Dataset.sample_from_datasets([constant(i) for i in range(3)], weights, seed=1234)
    counts = collections.Counter(ints(ds.take(n)))
    assert_binomial_counts(counts, weights, n)


def test_weights_are_normalized_and_default_is_uniform():
    n = 12_000
    ds = fl.Dataset.sample_from_datasets([constant(i) for i in range(3)], [2.0, 2.0, 4.0],
                                         seed=5)
    assert_binomial_counts(collections.Counter(ints(ds.take(n))), [0.25, 0.25, 0.5], n)
    uniform = fl.Dataset.sample_from_datasets([constant(i) for i in range(4)], seed=6)
    assert_binomial_counts(collections.Counter(ints(uniform.take(n))), [0.25] * 4, n)


def test_zero_weight_is_never_drawn():
    ds = fl.Dataset.sample_from_datasets([constant(0), constant(1)], [0.0, 1.0], seed=3)
    assert set(ints(ds.take(500))) == {1}


def test_exhausted_input_is_dropped_and_weights_renormalized():
    # Input 0 (weight 0.8) runs out after 50 elements; then 1 and 2 share 0.1 : 0.1 = 1 : 1.
    short = fl.Dataset.from_tensors(np.int64(0)).repeat(50)
    ds = fl.Dataset.sample_from_datasets([short, constant(1), constant(2)], [0.8, 0.1, 0.1],
                                         seed=11)
    out = ints(ds.take(10_050))
    assert out.count(0) == 50
    last_zero = max(i for i, x in enumerate(out) if x == 0)
    tail = collections.Counter(x - 1 for x in out[last_zero + 1:])
    assert_binomial_counts(tail, [0.5, 0.5], len(out) - last_zero - 1)


def test_every_element_of_finite_inputs_comes_out_once():
    datasets = [fl.Dataset.range(0, 30), fl.Dataset.range(100, 105), fl.Dataset.range(200, 240)]
    ds = fl.Dataset.sample_from_datasets(datasets, [0.1, 0.6, 0.3], seed=7)
    out = ints(ds)
    assert sorted(out) == list(range(30)) + list(range(100, 105)) + list(range(200, 240))
    # Each input's own order is kept.
    assert [x for x in out if x >= 200] == list(range(200, 240))
    assert ds.cardinality() == fl.UNKNOWN  # as tf.data, although all 75 come out
    check_checkpointing(ds)


def test_stop_on_empty_dataset_ends_at_the_first_exhausted_draw():
    datasets = [fl.Dataset.range(0, 5), constant(1000)]
    ds = fl.Dataset.sample_from_datasets(datasets, seed=2, stop_on_empty_dataset=True)
    out = ints(ds)
    assert [x for x in out if x < 1000] == [0, 1, 2, 3, 4]
    assert ds.cardinality() == fl.UNKNOWN
    check_checkpointing(ds)


def test_seeded_draws_are_reproducible():
    def make(seed):
        return fl.Dataset.sample_from_datasets([constant(0), constant(1)], seed=seed).take(64)

    first = ints(make(9))
    assert first == ints(make(9)) == ints(make(9))
    assert first != ints(make(10))
    ds = make(9)
    assert ints(ds) == ints(ds)  # every iterator of one dataset draws the same


def test_options_seed_is_used_without_a_seed():
    def make():
        ds = fl.Dataset.sample_from_datasets([constant(0), constant(1)]).take(64)
        return ds.with_options(fl.Options(seed=17))

    assert ints(make()) == ints(make())


def test_weights_dataset_gives_weights_per_draw():
    weights = fl.Dataset.from_tensor_slices(np.array([[1.0, 0.0], [0.0, 1.0]])).repeat()
    ds = fl.Dataset.sample_from_datasets([fl.Dataset.range(0, 5), fl.Dataset.range(10, 15)],
                                         weights, seed=0)
    assert ints(ds) == [0, 10, 1, 11, 2, 12, 3, 13, 4, 14]
    assert ds.cardinality() == fl.UNKNOWN
    check_checkpointing(ds)
    short = fl.Dataset.from_tensor_slices(np.array([[1.0, 0.0]] * 3))
    ended = fl.Dataset.sample_from_datasets([constant(0), constant(1)], short, seed=0)
    assert ints(ended) == [0, 0, 0]  # the weights dataset ran out


def test_bad_weights_element_is_an_error():
    weights = fl.Dataset.from_tensor_slices(np.array([[1.0, -1.0]]))
    with pytest.raises(ValueError, match=">= 0") as info:
        list(fl.Dataset.sample_from_datasets([constant(0), constant(1)], weights))
    assert "weights element 0" in "\n".join(info.value.__notes__)


@pytest.mark.parametrize("weights, error, message", [
    ([1.0], ValueError, r"shape \(2,\)"),
    ([1.0, -0.5], ValueError, ">= 0"),
    ([1.0, float("nan")], ValueError, "finite"),
    (["a", "b"], TypeError, "numbers"),
    # tf.data: weights must be float32 or float64 (checked on the positive ones).
    ([1, 1], TypeError, "must be floats"),
    (np.array([1, 2]), TypeError, "got int64"),
    ([1, 0.0], TypeError, "must be floats"),
    ([True, True], TypeError, "got bool"),
])
def test_weight_validation(weights, error, message):
    with pytest.raises(error, match=message):
        fl.Dataset.sample_from_datasets([constant(0), constant(1)], weights)


def test_float_weights_and_integer_zeros_are_accepted():
    # tf.data checks the type of the positive weights only.
    ds = fl.Dataset.sample_from_datasets([constant(0), constant(1)], [0, 0.5], seed=1)
    assert set(ints(ds.take(50))) == {1}
    ds = fl.Dataset.sample_from_datasets([constant(0), constant(1)],
                                         np.array([1, 3], np.float32), seed=1)
    assert set(ints(ds.take(200))) == {0, 1}


@pytest.mark.parametrize("weights", [[0.0, 0.0], [0, 0], np.zeros(2)])
def test_all_zero_weights_give_an_empty_dataset(weights):
    # tf.data (stop_on_empty_dataset=False): datasets[0].take(0), nothing is drawn.
    ds = fl.Dataset.sample_from_datasets([constant(0), constant(1)], weights, seed=1)
    assert ints(ds) == [] and ds.cardinality() == 0
    check_checkpointing(ds)


def test_integer_weights_dataset_is_a_type_error():
    weights = fl.Dataset.from_tensor_slices(np.array([[1, 0], [0, 1]]))
    with pytest.raises(TypeError, match="float vectors"):
        fl.Dataset.sample_from_datasets([constant(0), constant(1)], weights)
    late = fl.Dataset.from_tensor_slices(np.array([[1, 0]])).map(lambda w: w)  # spec unknown
    with pytest.raises(TypeError, match="must be floats"):
        list(fl.Dataset.sample_from_datasets([constant(0), constant(1)], late))


def test_dataset_validation():
    with pytest.raises(ValueError, match="must not be empty"):
        fl.Dataset.sample_from_datasets([])
    with pytest.raises(TypeError, match=r"datasets\[1\]"):
        fl.Dataset.sample_from_datasets([constant(0), [1, 2]])
    with pytest.raises(TypeError, match="list or tuple"):
        fl.Dataset.sample_from_datasets(constant(0))
    with pytest.raises(fl.StructureError, match=r"datasets\[0\] and datasets\[1\]"):
        fl.Dataset.sample_from_datasets([constant(0), fl.Dataset.from_tensors((1, 2))])
    with pytest.raises(fl.StructureError, match="dtype int64.*float32"):
        fl.Dataset.sample_from_datasets([constant(0), fl.Dataset.from_tensors(1.0)])


def test_element_spec_is_the_common_spec():
    a = fl.Dataset.from_tensors(np.zeros((2, 3), np.float32))
    b = fl.Dataset.from_tensors(np.zeros((5, 3), np.float32))
    spec = fl.Dataset.sample_from_datasets([a, b], seed=0).element_spec
    assert spec == fl.TensorSpec((None, 3), np.dtype(np.float32))


# Checked against TensorFlow 2.21's cardinality() of the same sample_from_datasets.
@pytest.mark.parametrize("cards, weights, stop, expected", [
    ((3, 4), None, False, fl.UNKNOWN),
    ((3, 4), [0.5, 0.5], False, fl.UNKNOWN),
    ((3, 4), None, True, fl.UNKNOWN),
    ((3, 4, 5), [1.0, 0.0, 1.0], False, fl.UNKNOWN),
    ((3, 4), [0.0, 0.0], False, 0),
    ((3,), None, True, 3),
    ((3, 4), [1.0, 0.0], True, 3),
    ((3, 4), [1.0, 0.0], False, 3),
    ((3, fl.INFINITE), None, False, fl.INFINITE),
    ((3, fl.INFINITE), None, True, fl.UNKNOWN),
    ((fl.INFINITE, fl.INFINITE), None, True, fl.INFINITE),
    ((fl.UNKNOWN, 4), None, False, fl.UNKNOWN),
    ((3, fl.INFINITE), [1.0, 0.0], False, 3),
])
def test_sample_cardinality(cards, weights, stop, expected):
    def make(n):
        if n == fl.INFINITE:
            return constant(0)
        if n == fl.UNKNOWN:
            return fl.Dataset.from_generator(lambda: iter(range(3)))
        return fl.Dataset.range(n)

    ds = fl.Dataset.sample_from_datasets([make(n) for n in cards], weights, seed=0,
                                         stop_on_empty_dataset=stop)
    assert ds.cardinality() == expected


def test_state_holds_a_json_safe_rng_and_every_input():
    ds = fl.Dataset.sample_from_datasets([fl.Dataset.range(10), fl.Dataset.range(10, 20)],
                                         seed=4)
    it = iter(ds)
    [next(it) for _ in range(5)]
    state = it.state_dict()
    text = json.dumps(state)
    root = json.loads(text)["root"]
    assert len(root["inputs"]) == 2 and all(s["type"] == "RangeIterator" for s in root["inputs"])
    assert all(isinstance(v, str) for v in (root["rng"]["state"], root["rng"]["inc"]))
    rest = ints(it)
    again = iter(ds)
    again.load_state_dict(json.loads(text))
    assert ints(again) == rest


def test_checkpointing_infinite_and_across_epochs():
    ds = fl.Dataset.sample_from_datasets([constant(0), fl.Dataset.range(1, 9).repeat()],
                                         [0.3, 0.7], seed=8)
    check_checkpointing(ds, max_elements=40)
    finite = fl.Dataset.sample_from_datasets([fl.Dataset.range(4), fl.Dataset.range(10, 13)],
                                             seed=8)
    check_checkpointing(finite, epochs=3)
    unseeded = fl.Dataset.sample_from_datasets([fl.Dataset.range(4), fl.Dataset.range(10, 13)])
    check_checkpointing(unseeded)


def _epochs(ds, epochs, size):
    out = ints(ds.repeat(epochs))
    assert len(out) == epochs * size
    return [out[i * size:(i + 1) * size] for i in range(epochs)]


def _two_inputs(**kwargs):
    return fl.Dataset.sample_from_datasets([fl.Dataset.range(0, 6), fl.Dataset.range(10, 16)],
                                           **kwargs)


@pytest.mark.parametrize("rerandomize", [None, False])
def test_same_picks_every_epoch_by_default(rerandomize):
    # tf.data's default (rerandomize_each_iteration=None/False): each epoch repeats the picks.
    ds = _two_inputs(seed=3, rerandomize_each_iteration=rerandomize)
    epochs = _epochs(ds, 4, 12)
    assert epochs[0] == epochs[1] == epochs[2] == epochs[3]
    assert epochs[0] == ints(_two_inputs(seed=3))  # the same picks as without the argument


def test_rerandomize_each_iteration_draws_new_picks_each_epoch_reproducibly():
    ds = _two_inputs(seed=3, rerandomize_each_iteration=True)
    epochs = _epochs(ds, 4, 12)
    for epoch in epochs:
        assert sorted(epoch) == [0, 1, 2, 3, 4, 5, 10, 11, 12, 13, 14, 15]
        # Within an input, elements keep their order: only the picks change.
        assert [x for x in epoch if x < 10] == [0, 1, 2, 3, 4, 5]
    assert len({tuple(e) for e in epochs}) == 4  # four different sequences of picks
    # Deterministic for a given seed and epoch: another dataset object with the same seed
    # gives the same four epochs; another seed does not.
    assert _epochs(_two_inputs(seed=3, rerandomize_each_iteration=True), 4, 12) == epochs
    assert _epochs(_two_inputs(seed=4, rerandomize_each_iteration=True), 4, 12) != epochs
    # The same object goes on with its next epochs (tf.data: each new iterator draws anew).
    later = _epochs(_two_inputs(seed=3, rerandomize_each_iteration=True), 8, 12)
    assert _epochs(ds, 4, 12) == later[4:]


def test_each_new_iterator_of_one_dataset_draws_the_next_picks():
    # TF's testSampleFromDatasetsRerandomizeEachIterationEpochs[rerandomize=True].
    epochs = _epochs(_two_inputs(seed=9, rerandomize_each_iteration=True), 3, 12)
    ds = _two_inputs(seed=9, rerandomize_each_iteration=True)
    assert [ints(ds), ints(ds), ints(ds)] == epochs
    same = _two_inputs(seed=9)  # rerandomize_each_iteration=None: the same picks each time
    assert ints(same) == ints(same)


def test_rerandomize_each_iteration_with_options_seed_and_without_seed():
    def make(**kwargs):
        return _two_inputs(rerandomize_each_iteration=True, **kwargs).repeat(3)

    seeded = ints(make().with_options(fl.Options(seed=11)))
    assert seeded == ints(make().with_options(fl.Options(seed=11)))
    thirds = [tuple(seeded[i:i + 12]) for i in (0, 12, 24)]
    assert len(set(thirds)) == 3
    # Unseeded: epochs long enough that two equal orders by chance are out of the question
    # (two merges of 6 and 6 elements coincided about once in a hundred runs).
    unseeded = ints(fl.Dataset.sample_from_datasets(
        [fl.Dataset.range(0, 50), fl.Dataset.range(100, 150)],
        rerandomize_each_iteration=True).repeat(3))
    assert len({tuple(unseeded[i:i + 100]) for i in (0, 100, 200)}) == 3


def test_rerandomize_each_iteration_on_the_fluent_api_and_infinite_inputs():
    ds = fl.Dataset.sample_from_datasets([constant(0), constant(1)], seed=2,
                                         rerandomize_each_iteration=True)
    assert ds.rerandomize_each_iteration is True
    assert ds.cardinality() == fl.INFINITE
    fresh = fl.Dataset.sample_from_datasets([constant(0), constant(1)], seed=2,
                                            rerandomize_each_iteration=True)
    first = ints(ds.take(50))
    assert first == ints(fresh.take(50))  # epoch 0 of another object: the same picks
    assert first != ints(ds.take(50))  # the next iterator of this one: new picks


def test_rerandomize_each_iteration_checkpoints_across_epochs():
    ds = _two_inputs(seed=6, rerandomize_each_iteration=True)
    check_checkpointing(ds, epochs=3)
    # A state saved in epoch 1 restores epoch 1's picks and then epoch 2's.
    expected = ints(_two_inputs(seed=6, rerandomize_each_iteration=True).repeat(3))
    it = iter(ds.repeat(3))
    [next(it) for _ in range(17)]
    state = json.loads(json.dumps(it.state_dict()))
    again = iter(ds.repeat(3))
    again.load_state_dict(state)
    assert ints(again) == expected[17:]


# ----------------------------------------------------------------- choose_from_datasets
def test_choose_round_robin_as_in_tf_docs():
    datasets = [fl.Dataset.from_tensors(w).repeat() for w in (b"foo", b"bar", b"baz")]
    choice = fl.Dataset.range(3).repeat(3)
    ds = fl.Dataset.choose_from_datasets(datasets, choice)
    assert list(ds) == [b"foo", b"bar", b"baz"] * 3
    assert ds.cardinality() == 9
    check_checkpointing(ds)


def test_choose_stops_on_empty_dataset_by_default():
    choice = fl.Dataset.from_tensor_slices(np.array([0, 1, 0, 0, 1, 1], np.int64))
    ds = fl.Dataset.choose_from_datasets([fl.Dataset.range(2), fl.Dataset.range(10, 20)], choice)
    assert ints(ds) == [0, 10, 1]
    assert ds.cardinality() == fl.UNKNOWN
    check_checkpointing(ds)


def test_choose_skips_exhausted_inputs_when_not_stopping():
    choice = fl.Dataset.from_tensor_slices(np.array([0, 1, 0, 0, 1, 0, 1], np.int64))
    ds = fl.Dataset.choose_from_datasets([fl.Dataset.range(2), fl.Dataset.range(10, 20)], choice,
                                         stop_on_empty_dataset=False)
    assert ints(ds) == [0, 10, 1, 11, 12]
    check_checkpointing(ds, epochs=3)


def test_choose_ends_when_every_input_is_exhausted():
    choice = fl.Dataset.from_tensor_slices(np.array([0, 1, 1, 0], np.int64)).repeat()
    ds = fl.Dataset.choose_from_datasets([fl.Dataset.range(1), fl.Dataset.range(5, 6)], choice,
                                         stop_on_empty_dataset=False)
    assert ints(ds) == [0, 5]


@pytest.mark.parametrize("bad", [2, -1, 7])
def test_choice_out_of_range_is_an_error_and_iteration_can_go_on(bad):
    choice = fl.Dataset.from_tensor_slices(np.array([0, bad, 1], np.int64))
    ds = fl.Dataset.choose_from_datasets([fl.Dataset.range(3), fl.Dataset.range(10, 13)], choice)
    with pytest.raises(ValueError, match=rf"choice element 1 is {bad}, outside \[0, 2\)"):
        list(ds)
    it = ds._make_iterator(IteratorContext())
    assert int(next(it)) == 0
    with pytest.raises(ValueError):
        next(it)
    assert int(next(it)) == 10


class _Unchecked(ElementListDataset):
    """Elements as given under an int64 spec: what a user's own Dataset class may yield
    (from_generator keeps its first element's dtypes, issue 43)."""

    def _element_spec(self):
        return fl.TensorSpec((), np.int64)


def test_choice_dataset_must_hold_int64_scalars():
    datasets = [fl.Dataset.range(3)]
    must = r"Elements of `choice_dataset` must be scalar int64 tensors but are "
    with pytest.raises(TypeError, match=must + r"TensorSpec\(shape=\(\), dtype=float32\)"):
        fl.Dataset.choose_from_datasets(datasets, fl.Dataset.from_tensor_slices([0.0]))
    with pytest.raises(TypeError, match=must):
        fl.Dataset.choose_from_datasets(datasets, fl.Dataset.from_tensor_slices([[0]]))
    # tf.data refuses int32 choices too (feedline took them).
    with pytest.raises(TypeError, match=must + r"TensorSpec\(shape=\(\), dtype=int32\)"):
        fl.Dataset.choose_from_datasets(
            datasets, fl.Dataset.from_tensor_slices(np.zeros(2, np.int32)))
    with pytest.raises(TypeError, match="must be a Dataset"):
        fl.Dataset.choose_from_datasets(datasets, [0, 0])
    unchecked = _Unchecked([np.int64(0), np.float32(0.5)])
    with pytest.raises(TypeError, match=r"must be scalar int64 tensors but choice element 1 "
                                        r"is 0\.5 \(float32"):
        list(fl.Dataset.choose_from_datasets(datasets, unchecked))


def test_choose_cardinality():
    infinite = [constant(0), constant(1)]
    assert fl.Dataset.choose_from_datasets(infinite, fl.Dataset.range(2).repeat()).cardinality() \
        == fl.INFINITE
    assert fl.Dataset.choose_from_datasets(infinite, fl.Dataset.range(0)).cardinality() == 0
    finite = [fl.Dataset.range(3), constant(1)]
    assert fl.Dataset.choose_from_datasets(finite, fl.Dataset.range(2)).cardinality() \
        == fl.UNKNOWN


def test_choose_with_random_choices_checkpoints():
    choice = fl.Dataset.random(seed=3).map(lambda x: x % 3)
    datasets = [fl.Dataset.range(i * 100, i * 100 + 20) for i in range(3)]
    ds = fl.Dataset.choose_from_datasets(datasets, choice, stop_on_empty_dataset=False)
    out = ints(ds)
    assert sorted(out) == sorted(x for i in range(3) for x in range(i * 100, i * 100 + 20))
    check_checkpointing(ds)


def test_checkpointing_restores_failing_elements_in_place():
    datasets = [fail_at(fl.Dataset.range(0, 6), [2]), fail_at(fl.Dataset.range(100, 104), [0])]
    check_checkpointing(fl.Dataset.sample_from_datasets(datasets, seed=5))
    choice = fl.Dataset.from_tensor_slices(np.array([0, 1, 1, 0, 0, 1], np.int64))
    check_checkpointing(fl.Dataset.choose_from_datasets(datasets, choice))
