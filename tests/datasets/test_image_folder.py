"""image_folder: the files, labels, classes and splits Keras's image_dataset_from_directory
gives for a golden folder, and the batches it yields (recorded by record_image_folder.py)."""

import json
import os
from pathlib import Path

import numpy as np
import pytest

import feedline as fl
from feedline.datasets.image_folder import image_folder, index_directory
from feedline.testing import check_checkpointing

pytest.importorskip("cv2")  # feedline.image's resize

ROOT = Path(__file__).resolve().parents[1] / "data" / "image_folder"
EXPECTED = json.loads((ROOT / "expected.json").read_text())
CASES = [name for name in EXPECTED if name != "keras_version"]


def build(name, **extra):
    config = dict(EXPECTED[name]["config"], **extra)
    if "image_size" in config:
        config["image_size"] = tuple(config["image_size"])
    return image_folder(str(ROOT), verbose=False, **config)


@pytest.mark.parametrize("name", CASES)
def test_matches_keras(name):
    recorded = EXPECTED[name]
    if "error" in recorded:  # Keras fails while iterating; feedline too, naming the file
        with pytest.raises(fl.InvalidArgumentError, match="channels must be 0 or 3 for a GIF"):
            list(build(name))
        return
    result = build(name)
    datasets = result if isinstance(result, list) else [result]
    assert len(datasets) == len(recorded["datasets"])
    for ds, expected in zip(datasets, recorded["datasets"], strict=True):
        assert [os.path.relpath(p, ROOT) for p in ds.file_paths] == expected["file_paths"]
        assert ds.class_names == expected["class_names"]
        if "batches" not in expected:
            continue
        got = list(ds)
        assert len(got) == len(expected["batches"])
        for element, batch in zip(got, expected["batches"], strict=True):
            images, labels = element if isinstance(element, tuple) else (element, None)
            assert images.dtype == np.dtype(batch["dtype"])
            # tf.image.resize and OpenCV's resize round float32 sums differently.
            np.testing.assert_allclose(images, np.array(batch["images"]), rtol=0, atol=5e-4)
            if batch["labels"] is None:
                assert labels is None
            else:
                assert labels.dtype == np.dtype(batch["label_dtype"])
                assert labels.tolist() == batch["labels"]


def test_shuffled_epochs_hold_the_split_files():
    train, val = build("split")
    expected = EXPECTED["split"]["datasets"]
    labels = [int(y) for _, ys in train for y in ys]
    names = expected[0]["class_names"]
    assert sorted(labels) == sorted(names.index(p.split("/")[0])
                                    for p in expected[0]["file_paths"])
    assert [int(y) for _, ys in val for y in ys] == [0, 0]  # not shuffled: two birds


def test_index_directory_and_seeded_file_order():
    paths, labels, names = index_directory(str(ROOT), shuffle=True, seed=7)
    assert names == ["bird", "cat", "dog"] and len(paths) == 9
    again, _, _ = index_directory(str(ROOT), shuffle=True, seed=7)
    assert paths == again
    assert [names[i] for i in labels] == [os.path.relpath(p, ROOT).split("/")[0]
                                          for p in paths]


def test_checkpointing_and_channels_first():
    ds = build("plain", batch_size=2, image_size=(3, 2))
    check_checkpointing(ds, epochs=1)
    first = next(iter(build("plain", data_format="channels_first")))[0]
    assert first.shape == (4, 3, 6, 5)
    shuffled = image_folder(str(ROOT), image_size=(2, 2), batch_size=2, seed=3, verbose=False)
    check_checkpointing(shuffled, steps=[0, 2, 5], epochs=1)


def test_verbose_prints_as_keras(capsys):
    image_folder(str(ROOT), seed=1, validation_split=0.25, subset="validation")
    assert capsys.readouterr().out == ("Found 9 files belonging to 3 classes.\n"
                                       "Using 2 files for validation.\n")


def test_bad_arguments(tmp_path):
    with pytest.raises(FileNotFoundError, match="no such folder"):
        image_folder(str(tmp_path / "missing"), verbose=False)
    with pytest.raises(ValueError, match="no images found in directory"):
        image_folder(str(tmp_path), verbose=False)
    with pytest.raises(ValueError, match="pass a seed"):
        image_folder(str(ROOT), validation_split=0.2, subset="training", verbose=False)
    with pytest.raises(ValueError, match="did not match the names of the subdirectories"):
        image_folder(str(ROOT), class_names=["cat", "fish"], verbose=False)
    with pytest.raises(ValueError, match="exactly 2 classes"):
        image_folder(str(ROOT), label_mode="binary", verbose=False)
    with pytest.raises(ValueError, match="len\\(labels\\) is 2 while we found 11"):
        image_folder(str(ROOT), labels=[0, 1], verbose=False)
    with pytest.raises(ValueError, match="interpolation should be one of"):
        image_folder(str(ROOT), interpolation="cubic", verbose=False)
    with pytest.raises(ValueError, match="validation_split must be between 0 and 1"):
        image_folder(str(ROOT), validation_split=1.5, subset="training", seed=1)
    bad = tmp_path / "c" / "broken.png"
    bad.parent.mkdir()
    bad.write_bytes(b"\x89PNG\r\n\x1a\n but then nothing")
    with pytest.raises(fl.InvalidArgumentError) as raised:
        list(image_folder(str(tmp_path), verbose=False))
    assert any("broken.png" in note for note in getattr(raised.value, "__notes__", [])) or \
        "broken.png" in str(raised.value)


@pytest.mark.parametrize("contents", [
    b"SECRET-TOKEN-0123456789abcdef\n" * 3,  # not an image at all
    b"\x89PNG\r\n\x1a\nSECRET-TOKEN-0123456789abcdef",  # a PNG signature, then anything
    b"GIF89aSECRET-TOKEN-0123456789abcdef",
    b"\xff\xd8\xffSECRET-TOKEN-0123456789abcdef",
], ids=["text", "png", "gif", "jpeg"])
def test_errors_name_the_file_and_size_not_its_bytes(tmp_path, contents):
    bad = tmp_path / "c" / "key.png"
    bad.parent.mkdir()
    bad.write_bytes(contents)
    with pytest.raises(fl.FeedlineError) as raised:
        list(image_folder(str(tmp_path), verbose=False, batch_size=None))
    error = raised.value
    shown = "\n".join([str(error), *getattr(error, "__notes__", [])])
    assert str(bad) in shown and f"({len(contents)} bytes)" in shown, shown
    assert "does not decode as a BMP, GIF, JPEG or PNG image" in shown
    assert "SECRET" not in shown and "TOKEN" not in shown, shown
    assert error.__cause__ is None and error.path == str(bad)


def test_an_unreadable_file_is_a_feedline_error(tmp_path):
    folder = tmp_path / "c"
    folder.mkdir()
    image = folder / "gone.png"
    image.write_bytes(b"x")
    ds = image_folder(str(tmp_path), verbose=False, batch_size=None, shuffle=False)
    image.unlink()
    with pytest.raises(fl.DataLossError, match="image_folder: cannot read .*gone.png"):
        list(ds)


def _write_png(path):
    from feedline import image

    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(image.encode_png(np.zeros((2, 2, 3), np.uint8)))


def test_a_symlink_loop_yields_each_image_once(tmp_path):
    for name in ["cat/1.png", "cat/sub/2.png", "dog/3.png"]:
        _write_png(tmp_path / name)
    os.symlink(tmp_path / "cat", tmp_path / "cat" / "sub" / "up")  # cat/sub/up -> cat: a loop
    os.symlink(tmp_path / "dog", tmp_path / "dog" / "self")
    os.symlink(tmp_path / "cat" / "sub", tmp_path / "cat" / "again")  # a second path to sub
    paths, labels, names = index_directory(str(tmp_path), shuffle=False, follow_links=True)
    assert [os.path.relpath(p, tmp_path) for p in paths] == [
        "cat/1.png", "cat/again/2.png", "dog/3.png"]
    assert labels.tolist() == [0, 0, 1] and names == ["cat", "dog"]
    ds = image_folder(str(tmp_path), follow_links=True, shuffle=False, batch_size=None,
                      image_size=(2, 2), verbose=False)
    assert len(list(ds)) == 3
    # Without following links, a link to a folder is not walked (as Keras).
    paths, _, _ = index_directory(str(tmp_path), shuffle=False)
    assert [os.path.relpath(p, tmp_path) for p in paths] == [
        "cat/1.png", "cat/sub/2.png", "dog/3.png"]


def test_followed_links_outside_a_loop_are_read(tmp_path):
    _write_png(tmp_path / "elsewhere" / "deep" / "4.png")
    _write_png(tmp_path / "root" / "cat" / "1.png")
    os.symlink(tmp_path / "elsewhere", tmp_path / "root" / "cat" / "linked")
    paths, _, _ = index_directory(str(tmp_path / "root"), shuffle=False, follow_links=True)
    assert [os.path.relpath(p, tmp_path / "root") for p in paths] == [
        "cat/1.png", "cat/linked/deep/4.png"]


@pytest.mark.timeout(60)
def test_a_fifo_named_like_an_image_does_not_block(tmp_path):
    _write_png(tmp_path / "c" / "1.png")
    os.mkfifo(tmp_path / "c" / "2.png")
    ds = image_folder(str(tmp_path), labels=None, verbose=False, batch_size=None,
                      shuffle=False, image_size=(2, 2))
    with pytest.raises(fl.InvalidArgumentError, match=r"2.png is not a regular file"):
        list(ds)
    assert list(ds.take(1))[0].shape == (2, 2, 3)
