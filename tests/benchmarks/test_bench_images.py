"""Issue 27's benchmark pieces: the images_tfrecord data, feedline's image variants in check
mode, the harness's extra image variants, and the images scaling model's arithmetic."""

from __future__ import annotations

import numpy as np
import pytest

import feedline as fl
from benchmarks import common, data, envs, reference, run, scaling
from benchmarks.common import RunSpec
from benchmarks.systems import feedline_sys

FEATURES = {common.IMAGE_KEY: fl.FixedLenFeature([], "bytes"),
            common.LABEL_KEY: fl.FixedLenFeature([], "int64"),
            common.INDEX_KEY: fl.FixedLenFeature([], "int64")}


@pytest.fixture(scope="module")
def image_data(tmp_path_factory):
    cache = tmp_path_factory.mktemp("cache")
    jpegs = {**data.images(70, 5, cache), "decoder": "simplejpeg"}
    records = {**data.images_tfrecord(70, 3, 5, cache), "decoder": "simplejpeg"}
    return jpegs, records


def test_images_tfrecord_holds_every_jpeg_in_order_with_label_and_index(image_data):
    jpegs, records = image_data
    assert records["kind"] == "images_tfrecord" and records["count"] == 70
    assert len(records["files"]) == 3 and records["params"] == jpegs["params"]
    parsed = [fl.parse_single_example(r, FEATURES) for r in fl.TFRecordDataset(records["files"])]
    assert len(parsed) == 70
    for i, example in enumerate(parsed):
        with open(jpegs["files"][i], "rb") as f:
            assert example[common.IMAGE_KEY] == f.read()
        assert int(example[common.LABEL_KEY]) == common.image_label(i)
        assert int(example[common.INDEX_KEY]) == i
    # 70 records over 3 files: 23, 23, 24 (np.linspace bounds), file order = index order.
    sizes = [sum(1 for _ in fl.TFRecordDataset(path)) for path in records["files"]]
    assert sizes == [23, 23, 24]


def test_images_tfrecord_generation_is_reused_and_redone_when_interrupted(tmp_path):
    first = data.images_tfrecord(4, 2, 1, tmp_path)
    assert data.images_tfrecord(4, 2, 1, tmp_path) == first
    folder = tmp_path / "images-tfrecord-4-2-s1"
    (folder / "meta.json").unlink()
    (folder / "junk").write_text("x")
    again = data.images_tfrecord(4, 2, 1, tmp_path)
    assert again == first and not (folder / "junk").exists()


def test_describe_images_tfrecord_names_the_decoder(tmp_path):
    sizes = data.Sizes(images=3, image_record_files=2)
    meta = data.describe("images_tfrecord", sizes, 1, tmp_path)
    assert meta["decoder"] in ("simplejpeg", "pillow") and len(meta["files"]) == 2


def test_image_example_is_tf_train_example_wire_format():
    record = common.encode_image_example(b"\xff\xd8jpeg", 1000, 2**40)
    parsed = fl.parse_single_example(record, FEATURES)
    assert parsed[common.IMAGE_KEY] == b"\xff\xd8jpeg"
    assert int(parsed[common.LABEL_KEY]) == 1000 and int(parsed[common.INDEX_KEY]) == 2**40


def test_reference_of_images_tfrecord_is_the_images_reference_with_labels(image_data):
    jpegs, records = image_data
    want = reference.first_batches("images", jpegs, 2)
    got = reference.first_batches("images_tfrecord", records, 2)
    assert [len(b) for b in got] == [2, 2]  # image, label (dict keys sorted)
    for w, g in zip(want, got, strict=True):
        np.testing.assert_array_equal(w[0], g[0])
    np.testing.assert_array_equal(got[1][1], [common.image_label(i) for i in range(64, 70)])


@pytest.mark.parametrize("workload", ["images", "images_tfrecord"])
@pytest.mark.parametrize("variant", ["recommended", "batched"])
@pytest.mark.slow
def test_feedline_image_variants_match_the_reference_in_check_mode(image_data, workload,
                                                                   variant):
    meta = dict(zip(("images", "images_tfrecord"), image_data, strict=True))[workload]
    spec = RunSpec("feedline", variant, workload, "check", meta)
    feedline_sys.prepare(spec)
    it = iter(feedline_sys.build(spec))
    try:
        found = [common.batch_leaves(b) for b in it]
    finally:
        it.close()
    assert [len(b[0]) for b in found] == [64, 6]
    assert reference.compare_batches(workload, reference.first_batches(workload, meta, 2),
                                     found) is None


def test_feedline_batched_augment_equals_the_per_image_one(image_data):
    jpegs, _ = image_data
    feedline_sys.prepare(RunSpec("feedline", "batched", "images", "check", jpegs))
    params = np.load(jpegs["params"])[:5]
    blobs = [open(path, "rb").read() for path in jpegs["files"][:5]]
    batch = feedline_sys.augment_batch(blobs, params[:, 0], params[:, 1], params[:, 2])
    one = np.stack([feedline_sys.augment_one(b, *p) for b, p in zip(blobs, params, strict=True)])
    np.testing.assert_array_equal(batch, one)
    assert params[:, 2].any() and not params[:, 2].all()  # both flip branches ran


def test_image_variants_are_timed_but_not_fed_or_swept():
    bench = run.Bench(run.parse_args(["images_tfrecord", "--no-feedline-processes"]), [])
    assert bench.configs("images_tfrecord") == [
        ("feedline", "recommended"), ("feedline", "batched"), ("tf", "expert"), ("tf", "naive"),
        ("tf", "fused"), ("torch", "expert"), ("torch", "naive"), ("torch", "torchvision"),
        ("grain", "expert"), ("grain", "naive"), ("grain", "pil")]
    assert bench.configs("chess") == [("feedline", "recommended"), ("tf", "expert"),
                                      ("tf", "naive"), ("torch", "expert"), ("torch", "naive"),
                                      ("grain", "expert"), ("grain", "naive")]
    assert bench.configs("images", feed_mode=True) == [
        ("feedline", "recommended"), ("tf", "expert"), ("torch", "expert"), ("grain", "expert")]
    assert run.parse_args(["images-tfrecord"]).workloads == ["images_tfrecord"]


def test_each_worker_counted_variant_gets_its_own_count():
    bench = run.Bench(run.parse_args(["images", "--workers", "3", "--systems", "torch,grain"]),
                      [])
    bench.tune_workers()
    assert bench.extra_for("torch", "torchvision", "images") == {"workers": 3}
    assert bench.extra_for("grain", "pil", "images_tfrecord") == {"workers": 3}
    assert bench.extra_for("torch", "naive", "images") == {}
    assert run.tuned_name("torch", "torchvision") == "torch (torchvision)"
    assert run.tuned_name("feedline", "processes") == "feedline"


def test_a_variant_that_cannot_import_is_reported_unavailable(tmp_path, monkeypatch):
    monkeypatch.setitem(envs.VARIANT_IMPORTS, ("torch", "torchvision"),
                        ("no_such_module_xyz", "why it is missing"))
    problem = envs.variant_problem("torch", "torchvision", envs.sys.executable)
    assert problem is not None and "no_such_module_xyz" in problem
    assert problem.endswith("why it is missing")
    assert envs.variant_problem("torch", "expert", envs.sys.executable) is None
    bench = run.Bench(run.parse_args(["images", "--systems", "torch"]), [])
    bench.envs["torch"] = envs.Environment("torch", envs.sys.executable)
    bench.unavailable[("torch", "torchvision")] = problem
    record = bench.timed_run("images", "measure", 0, "torch", "torchvision", {}, "", {})
    assert record["ok"] is False and record["error"] == f"unavailable: {problem}"


def test_images_scaling_model_arithmetic():
    parts = {"feeder": 18e-6, "map": 2e-3, "consumer": 2e-6, "stack": 100e-6}
    # 16 cores share 2.02 ms of CPU per image: 7,921/s; the serial 20 µs bound is 50,000/s.
    assert scaling.predict_images(parts, 16) == pytest.approx(16 / 2.02e-3)
    assert scaling.predict_images(parts, 10_000) == pytest.approx(1 / 20e-6)
    # The goal's arithmetic: 20 µs serial with ~3 ms of decode per image still gives 5,000/s.
    assert scaling.predict_images({**parts, "map": 3.18e-3}, 16) >= 5_000
    text = scaling.markdown_images({
        "parts_us_per_image": {k: v * 1e6 for k, v in parts.items()},
        "serial_us_per_image": 20.0,
        "predicted_images_per_s": {"16": scaling.predict_images(parts, 16)},
        "predicted_per_image_form": {"16": 1.0}})
    assert "| feeder | 18.0 | 55,556 |" in text and "| 7,921 |" in text
    assert "20.0 µs (goal: at most 20 µs)" in text
