"""make_batched_features_dataset against TensorFlow 2.21's batches of the same files.

The expected batches (``batched_features_tf.json``) were recorded with
``tf.data.experimental.make_batched_features_dataset`` (``shuffle=False``) on the three
files :func:`write_files` writes; a ``VarLenFeature`` is compared through
``tf.sparse.to_dense`` / ``RaggedValues.to_padded(0)``.
"""

import json
from pathlib import Path

import numpy as np
import pytest

import feedline as fl

FEATURES = {"id": fl.FixedLenFeature([], "int64"), "score": fl.FixedLenFeature([], "float32"),
            "tokens": fl.VarLenFeature("int64")}
TF_BATCHES = json.loads(Path(__file__).with_name("batched_features_tf.json").read_text())


def write_files(folder):
    for f in range(3):
        with fl.TFRecordWriter(str(folder / f"part-{f}.tfrecord")) as writer:
            for i in range(f + 3):
                n = 10 * f + i
                writer.write(fl.encode_example({"id": [n], "score": [n / 4],
                                                "tokens": list(range(n % 3))}))
    return str(folder / "part-*.tfrecord")


def as_lists(element):
    if isinstance(element, tuple):
        features, label = element
        return {"id": features["id"].tolist(), "label": label.tolist(),
                "tokens": features["tokens"].to_padded(0).tolist()}
    return {"id": element["id"].tolist(), "score": element["score"].tolist(),
            "tokens": element["tokens"].to_padded(0).tolist()}


@pytest.mark.parametrize(("case", "kwargs"), [
    ("one_epoch", {"num_epochs": 1}),
    ("two_threads", {"num_epochs": 1, "reader_num_threads": 2}),
    ("label", {"num_epochs": 2, "label_key": "score", "drop_final_batch": True}),
    ("forever", {}),
])
def test_batches_as_tensorflow(tmp_path, case, kwargs):
    pattern = write_files(tmp_path)
    ds = fl.make_batched_features_dataset(pattern, 4, FEATURES, shuffle=False, **kwargs)
    assert [as_lists(e) for e in ds.take(6)] == TF_BATCHES[case]


def test_repeating_forever_gives_full_batches_with_a_known_batch_dimension(tmp_path):
    ds = fl.make_batched_features_dataset(write_files(tmp_path), 4, FEATURES, shuffle=False)
    assert ds.cardinality() == fl.INFINITE
    assert ds.element_spec["id"] == fl.TensorSpec((4,), np.dtype(np.int64))
    assert ds.element_spec["tokens"] == fl.RaggedTensorSpec((4, None), np.dtype(np.int64), 1)


def test_a_seeded_shuffle_repeats_and_keeps_every_record(tmp_path):
    pattern = write_files(tmp_path)

    def ids():
        ds = fl.make_batched_features_dataset(pattern, 5, FEATURES, num_epochs=1,
                                              shuffle_seed=3, shuffle_buffer_size=4)
        return [i for batch in ds for i in batch["id"].tolist()]

    first = ids()
    assert first == ids()
    assert sorted(first) == [0, 1, 2, 10, 11, 12, 13, 20, 21, 22, 23, 24]
    assert first != sorted(first)


def test_readers_of_key_value_pairs_and_autotuned_reading(tmp_path):
    pattern = write_files(tmp_path)

    def keyed(filename):
        return fl.TFRecordDataset(filename).map(lambda record: (b"key", record))

    ds = fl.make_batched_features_dataset(pattern, 4, FEATURES, reader=keyed, num_epochs=1,
                                          shuffle=False, reader_num_threads=fl.AUTOTUNE)
    assert sorted(i for batch in ds for i in batch["id"].tolist()) == [
        0, 1, 2, 10, 11, 12, 13, 20, 21, 22, 23, 24]


def test_a_label_key_not_among_the_features_is_refused(tmp_path):
    with pytest.raises(ValueError, match=r"The `label_key` provided \(label\) must be one "
                                         r"of the `features` keys"):
        fl.make_batched_features_dataset(write_files(tmp_path), 4, FEATURES, label_key="label")
