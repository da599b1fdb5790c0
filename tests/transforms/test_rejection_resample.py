"""rejection_resample against tf.data 2.21 (tests/data/tfdata_golden/rejection_resample.json).

The draws differ from TensorFlow's, so the random cases compare distributions: TensorFlow's
per-class output counts over 40 seeded runs against feedline's over RUNS seeded runs (means
within 4.5 standard errors, exact where TensorFlow's never vary). The case whose target is
the initial distribution is not random: it must match element for element.
"""

import sys
from pathlib import Path

import numpy as np
import pytest

import feedline as fl
from feedline.testing import check_checkpointing, fail_at
from feedline.transforms.rejection_resample import acceptance

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "data" / "tfdata_golden"))
import golden  # noqa: E402

GOLDEN = golden.load("rejection_resample")
RANDOM_CASES = sorted(name for name, case in GOLDEN.items()
                      if isinstance(case, dict) and "counts" in case)
RUNS = 12


def resampled(case, seed):
    classes = golden.decode(case["input"])
    return fl.Dataset.from_tensor_slices(classes).rejection_resample(
        lambda x: x, case["target_dist"], case["initial_dist"], seed=seed)


@pytest.mark.parametrize("name", RANDOM_CASES)
def test_distribution_matches_tensorflow(name):
    case = GOLDEN[name]
    classes = len(case["target_dist"])
    counts, lengths = [], []
    for seed in range(RUNS):
        out = list(resampled(case, seed))
        labels = np.array([int(c) for c, _ in out])
        assert all(int(c) == int(x) for c, x in out)  # each pair is (class, element)
        counts.append(np.bincount(labels, minlength=classes))
        lengths.append(len(out))
    mine, theirs = np.array(counts, float), np.array(case["counts"], float)
    for label in range(classes):
        a, b = mine[:, label], theirs[:, label]
        if b.std() == 0:  # always the same in TensorFlow (every element kept, or none)
            assert (a == b[0]).all(), f"class {label}: {a} vs always {b[0]}"
            continue
        error = np.sqrt(a.var(ddof=1) / len(a) + b.var(ddof=1) / len(b))
        assert abs(a.mean() - b.mean()) < 4.5 * error, (label, a.mean(), b.mean(), error)
    a, b = np.array(lengths, float), np.array(case["lengths"], float)
    assert abs(a.mean() - b.mean()) < 4.5 * np.sqrt(a.var(ddof=1) / len(a)
                                                    + b.var(ddof=1) / len(b)) + 1e-9


@pytest.mark.parametrize("name", RANDOM_CASES)
def test_structure_matches_tensorflow(name):
    expected = [golden.decode(e) for e in GOLDEN[name]["first_elements_seed0"]]
    out = list(resampled(GOLDEN[name], 0).take(len(expected)))
    for got, want in zip(out, expected):
        assert isinstance(got, tuple) and len(got) == 2
        for g, w in zip(got, want):
            assert type(g) is type(w) and np.asarray(g).dtype == np.asarray(w).dtype


def test_target_equal_to_initial_is_the_input_itself():
    case = GOLDEN["target_equals_initial"]
    data = golden.decode(case["input"])
    ds = fl.Dataset.from_tensor_slices(data).rejection_resample(
        lambda c, f: c, case["target_dist"], case["initial_dist"], seed=1)
    golden.same(list(ds), [golden.decode(e) for e in case["output"]])
    assert ds.cardinality() == 50


def test_same_seed_same_output_and_seed_from_options():
    case = GOLDEN["mixing_given_initial"]
    assert [int(c) for c, _ in resampled(case, 5)] == [int(c) for c, _ in resampled(case, 5)]
    classes = golden.decode(case["input"])
    ds = fl.Dataset.from_tensor_slices(classes).rejection_resample(
        lambda x: x, case["target_dist"], case["initial_dist"])
    seeded = ds.with_options(fl.Options(seed=3))
    assert [int(c) for c, _ in seeded] == [int(c) for c, _ in seeded]


@pytest.mark.parametrize("initial", [[0.75, 0.25], None], ids=["given", "estimated"])
def test_checkpointing(initial):
    data = fl.Dataset.from_tensor_slices(np.array([0, 0, 1, 0] * 10)).map(
        lambda c: (c, c * 10.0))
    ds = data.rejection_resample(lambda c, x: c, [0.5, 0.5], initial, seed=2)
    check_checkpointing(ds, steps=[0, 1, 5, 13])


def test_input_errors_pass_through():
    ds = fail_at(fl.Dataset.from_tensor_slices(np.array([0, 1] * 6)), [3]).rejection_resample(
        lambda c: c, [0.5, 0.5], [0.5, 0.5])
    it = iter(ds)
    assert [int(x) for _, x in (next(it) for _ in range(3))] == [0, 1, 0]
    with pytest.raises(Exception, match="injected"):
        next(it)
    assert len(list(it)) == 8


def test_class_func_results_are_checked():
    ds = fl.Dataset.range(4).rejection_resample(lambda x: x, [0.5, 0.5], seed=0)
    with pytest.raises(ValueError, match=r"class_func returned 2, outside \[0, 2\)"):
        list(ds)
    floats = fl.Dataset.range(4).rejection_resample(lambda x: 0.5, [0.5, 0.5], [0.5, 0.5])
    with pytest.raises(TypeError, match="class_func must return an integer scalar"):
        list(floats)


def test_argument_errors():
    ds = fl.Dataset.range(4)
    with pytest.raises(ValueError, match="adding up to 1"):
        ds.rejection_resample(lambda x: x, [0.5, 0.6])
    with pytest.raises(ValueError, match=r"initial_dist\) must be 3 probabilities"):
        ds.rejection_resample(lambda x: x, [0.2, 0.3, 0.5], [0.5, 0.5])
    with pytest.raises(TypeError, match="needs a callable class_func"):
        ds.rejection_resample(None, [1.0])


def test_acceptance_is_tensorflows_float32_formula():
    accept, low = acceptance(np.float32([0.6, 0.3, 0.1]), np.float32([1 / 3] * 3))
    assert accept.dtype == np.float32 and low.dtype == np.float32
    ratio = np.float32([1 / 3] * 3) / (np.float32([0.6, 0.3, 0.1]) + np.finfo(np.float32).tiny)
    np.testing.assert_array_equal(accept, (ratio - ratio.min()) / (ratio.max() - ratio.min()))


def test_worker_shards_resample_their_own_elements():
    from feedline.distribute.autoshard import plan_sharding, shard_pipeline

    ds = fl.Dataset.from_tensor_slices(np.array([0, 1, 1, 1] * 50)).rejection_resample(
        lambda c: c, [0.5, 0.5], [0.25, 0.75], seed=4)
    assert plan_sharding(ds, 2).policy == "data"
    labels = [int(c) for i in range(2) for c, _ in shard_pipeline(ds, 2, i)]
    assert 0.35 < np.mean(labels) < 0.65
