"""Dataset.list_files: fsspec globbing, tf.data's ordering, shuffling and errors."""

import uuid

import fsspec
import numpy as np
import pytest
from fsspec.spec import AbstractFileSystem

import feedline as fl
from feedline.testing import check_checkpointing


@pytest.fixture
def files(tmp_path):
    for name in ["b.txt", "a.txt", "c.py", "d.pyc", "sub/e.txt"]:
        (tmp_path / name).parent.mkdir(exist_ok=True)
        (tmp_path / name).write_bytes(b"")
    return tmp_path


def names(ds):
    out = list(ds)
    assert all(isinstance(x, bytes) for x in out)
    return out


def test_unshuffled_names_are_sorted_bytes(files):
    ds = fl.Dataset.list_files(str(files / "*.txt"), shuffle=False)
    assert names(ds) == [str(files / "a.txt").encode(), str(files / "b.txt").encode()]
    assert ds.cardinality() == 2
    assert ds.element_spec == fl.TensorSpec((), np.dtype(object))
    check_checkpointing(ds)


def test_wildcards_match_like_tf_data(files):
    def matched(pattern):
        return [n.rsplit(b"/", 1)[1] for n in names(
            fl.Dataset.list_files(str(files / pattern), shuffle=False))]

    assert matched("*.py") == [b"c.py"]
    assert matched("*.py*") == [b"c.py", b"d.pyc"]
    assert matched("[ab].txt") == [b"a.txt", b"b.txt"]
    assert matched("?.txt") == [b"a.txt", b"b.txt"]
    assert matched("*") == [b"a.txt", b"b.txt", b"c.py", b"d.pyc", b"sub"]  # dirs too
    assert matched("*/*.txt") == [b"e.txt"]
    assert matched("a.txt") == [b"a.txt"]  # a plain name matches itself


def test_relative_patterns_give_relative_names(files, monkeypatch):
    monkeypatch.chdir(files)
    assert names(fl.Dataset.list_files("*.txt", shuffle=False)) == [b"a.txt", b"b.txt"]
    assert names(fl.Dataset.list_files("sub/*.txt", shuffle=False)) == [b"sub/e.txt"]
    assert names(fl.Dataset.list_files("./sub/*", shuffle=False)) == [b"./sub/e.txt"]


def test_pattern_list_concatenates_then_sorts_keeping_duplicates(files):
    patterns = [str(files / "*.py"), str(files / "*.txt"), str(files / "a*")]
    out = names(fl.Dataset.list_files(patterns, shuffle=False))
    assert [n.rsplit(b"/", 1)[1] for n in out] == [b"a.txt", b"a.txt", b"b.txt", b"c.py"]


def test_pathlike_and_bytes_patterns(files):
    assert len(names(fl.Dataset.list_files(files / "*.txt", shuffle=False))) == 2
    assert len(names(fl.Dataset.list_files(str(files / "*.txt").encode(), shuffle=False))) == 2


def test_urls_keep_their_scheme():
    root = f"/lf-{uuid.uuid4().hex}"
    fs = fsspec.filesystem("memory")
    fs.pipe({f"{root}/x/2.rec": b"", f"{root}/x/1.rec": b"", f"{root}/x/3.idx": b""})
    try:
        ds = fl.Dataset.list_files(f"memory://{root}/x/*.rec", shuffle=False)
        assert names(ds) == [f"memory://{root}/x/1.rec".encode(),
                             f"memory://{root}/x/2.rec".encode()]
    finally:
        fs.rm(root, recursive=True)


def test_file_urls_keep_their_scheme(files):
    ds = fl.Dataset.list_files(f"file://{files}/*.py", shuffle=False)
    assert names(ds) == [f"file://{files}/c.py".encode()]


def test_default_is_shuffled_and_complete(tmp_path):
    for i in range(30):
        (tmp_path / f"f{i:02d}").write_bytes(b"")
    expected = sorted(str(tmp_path / f"f{i:02d}").encode() for i in range(30))
    ds = fl.Dataset.list_files(str(tmp_path / "*"))
    out = names(ds)
    assert sorted(out) == expected
    assert out != expected  # 1 / 30! chance of a false failure
    # Unseeded: each new iterator draws a new order, so only the multiset is comparable.
    check_checkpointing(ds, ordered=False)


def test_seed_makes_order_reproducible_and_epochs_reshuffle(tmp_path):
    for i in range(20):
        (tmp_path / f"f{i:02d}").write_bytes(b"")

    def make():
        return fl.Dataset.list_files(str(tmp_path / "*"), seed=37)

    first = names(make())
    assert first == names(make()) == names(make())
    epochs = names(make().repeat(3))
    assert epochs[:20] == first
    assert sorted(epochs[20:40]) == sorted(first) and epochs[20:40] != first
    assert epochs[40:] != epochs[20:40]
    check_checkpointing(make(), epochs=3)


def test_shuffle_false_keeps_order_every_epoch(files):
    ds = fl.Dataset.list_files(str(files / "*.txt"), shuffle=False).repeat(2)
    out = names(ds)
    assert out[:2] == out[2:] == sorted(out[:2])


def test_no_match_is_an_invalid_argument_naming_the_patterns(tmp_path):
    # tf.data 2.21: InvalidArgumentError "... No files matched pattern: <pattern>".
    pattern = str(tmp_path / "nothing-*")
    with pytest.raises(fl.InvalidArgumentError) as info:
        fl.Dataset.list_files(pattern)
    assert str(info.value) == f"No files matched pattern: {pattern}"
    assert isinstance(info.value, ValueError) and not isinstance(info.value, OSError)
    pattern_a, pattern_b = str(tmp_path / "x*"), str(tmp_path / "missing-dir" / "*")
    with pytest.raises(fl.InvalidArgumentError) as info:
        fl.Dataset.list_files([pattern_a, pattern_b])
    assert str(info.value) == f"No files matched pattern: {pattern_a}, {pattern_b}"


def test_bad_arguments():
    with pytest.raises(ValueError, match="at least one file pattern"):
        fl.Dataset.list_files([])
    with pytest.raises(TypeError, match="string"):
        fl.Dataset.list_files(5)
    with pytest.raises(TypeError, match="string"):
        fl.Dataset.list_files(["a*", 3])


class NoListingFileSystem(AbstractFileSystem):
    """A filesystem that cannot list directories, like plain HTTP servers."""

    protocol = "feedline-nolist"


def test_filesystem_that_cannot_glob_is_a_clear_error():
    fsspec.register_implementation("feedline-nolist", NoListingFileSystem, clobber=True)
    with pytest.raises(ValueError, match=r"'feedline-nolist' filesystem cannot glob "
                                         r"'feedline-nolist://data/\*.rec'.*from_tensor_slices"):
        fl.Dataset.list_files("feedline-nolist://data/*.rec")


def test_unknown_protocol_is_a_clear_error():
    with pytest.raises(ValueError, match="cannot open a filesystem"):
        fl.Dataset.list_files("no-such-protocol-xyz://bucket/*.rec")
