"""fl.datasets.load(...).batch(n) runs the decoder's batch form (one C parser call per batch,
feedline.transforms.map_and_batch): every batch equals the one map-then-batch stacks, record
for record, on the golden directories and on records the plan does not decode itself."""

import numpy as np
import pytest
from tfds_golden import ROOT, assert_same, expected

import feedline as fl
import feedline.datasets.tfds as tfds_module
from feedline.datasets import load
from feedline.datasets.tfds_features import FALLBACK, FeaturesDict, Tensor, Text, record_plan
from feedline.formats.example import cbridge
from feedline.formats.example_proto import encode_example
from feedline.optimize import optimize
from feedline.testing import check_checkpointing
from feedline.testing.failures import Failed, take_outcomes
from feedline.transforms.batch import stack_elements
from feedline.transforms.map_and_batch import NOT_BATCHED, MapAndBatchDataset

pytestmark = pytest.mark.skipif(cbridge.extension is None,
                                reason="the C Example parser is not compiled")

UNFUSED = fl.Options(optimization=fl.OptimizationOptions(map_and_batch_fusion=False))
CASES = [c for c in expected()["cases"] if c["error"] is None]


def _writable_same(actual, wanted, path=""):
    assert_same(actual, wanted, path)
    if isinstance(wanted, dict):
        for key in wanted:
            _writable_same(actual[key], wanted[key], f"{path}/{key}")
    elif isinstance(wanted, tuple):
        for i, (a, w) in enumerate(zip(actual, wanted)):
            _writable_same(a, w, f"{path}[{i}]")
    elif isinstance(wanted, np.ndarray):
        assert actual.flags.writeable and actual.flags.c_contiguous, path


def _case_id(case):
    extra = ",".join(f"{k}={v}" for k, v in case["kwargs"].items())
    return f"{case['name']}|{case['split']}|{extra}"


def _datasets(loaded):
    if isinstance(loaded, tuple):  # with_info
        loaded = loaded[0]
    return list(loaded.values()) if isinstance(loaded, dict) else [loaded]


def _same_outcomes(fused, unfused):
    assert [type(o) for o in fused] == [type(o) for o in unfused]
    for index, (a, b) in enumerate(zip(fused, unfused)):
        if isinstance(b, Failed):
            assert a == b, f"batch {index}"
        else:
            _writable_same(a, b, f"batch {index}")


@pytest.mark.parametrize("size", [1, 3, 64])
@pytest.mark.parametrize("case", CASES, ids=_case_id)
@pytest.mark.slow
def test_batches_equal_map_then_batch_on_every_golden_case(case, size):
    kwargs = dict(case["kwargs"])
    kwargs.pop("data_source", None)
    for loaded in _datasets(load(case["name"], split=case["split"], data_dir=ROOT, **kwargs)):
        ds = loaded.batch(size)
        assert isinstance(optimize(ds, fl.Options()), MapAndBatchDataset)
        fused = take_outcomes(iter(ds))
        assert fused
        _same_outcomes(fused, take_outcomes(iter(ds.with_options(UNFUSED))))


@pytest.mark.parametrize("directory", ["fl_order/small/1.0.0", "fl_order/big/1.1.0"])
def test_plan_batch_reads_the_planned_leaves_at_once(directory):
    from feedline.datasets.tfds_features import load_features

    features = load_features(str(ROOT / directory))
    plan = record_plan(features)
    assert plan is not None
    records = [bytes(r) for path in sorted((ROOT / directory).glob("*.tfrecord-*"))
               for r in fl.TFRecordDataset(str(path))]
    assert records
    for size in (1, 2, 5, len(records)):
        for start in range(0, len(records), size):
            chunk = records[start:start + size]
            _writable_same(plan.batch(chunk), stack_elements([plan(r) for r in chunk]),
                           f"{directory}[{start}:{start + size}]")


def test_one_unusual_record_declines_the_batch_and_the_element_path_names_it():
    features = FeaturesDict({"x": Tensor((), np.dtype("int64")), "v": Tensor((2,), np.dtype(
        "float32")), "y": Text()})
    good = [encode_example({"x": [i], "v": [i, -i], "y": [b"r%d" % i]}) for i in range(7)]
    missing = encode_example({"x": [9], "v": [1, 2]})
    plan = record_plan(features)
    assert plan.batch([good[0], missing]) is FALLBACK
    decoder = tfds_module._Decoder(features, None, False, False)
    assert decoder.feedline_batch_form([good[0], missing]) is NOT_BATCHED
    records = good[:3] + [missing] + good[3:]
    ds = fl.Dataset.from_tensor_slices(np.array(records, dtype=object)).map(
        decoder, num_parallel_calls=2).batch(3)
    fused = take_outcomes(iter(ds))
    _same_outcomes(fused, take_outcomes(iter(ds.with_options(UNFUSED))))
    assert fused[1] == Failed("FeatureError")  # the batch holding the record without "y"
    assert [list(b["x"]) for b in fused if not isinstance(b, Failed)] == [[0, 1, 2], [3, 4, 5], [6]]


@pytest.mark.parametrize("kwargs", [
    {"as_supervised": True}, {"read_config": fl.datasets.ReadConfig(add_tfds_id=True)},
    {"decoders": {"label": fl.datasets.SkipDecoding()}}], ids=["supervised", "id", "skip"])
def test_supervised_and_tfds_id_batches(kwargs):
    ds = load("fl_order/small", split="train", data_dir=ROOT, **kwargs).batch(4)
    assert isinstance(optimize(ds, fl.Options()), MapAndBatchDataset)
    _same_outcomes(take_outcomes(iter(ds)), take_outcomes(iter(ds.with_options(UNFUSED))))


def test_checkpoints_of_a_loaded_batched_dataset():
    ds = load("fl_order/small", split="train", data_dir=ROOT).batch(7)
    check_checkpointing(ds, steps=[0, 1, 3, 6], epochs=1)
