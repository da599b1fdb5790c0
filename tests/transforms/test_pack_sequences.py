"""pack_sequences: exact rows for both methods, clear errors, and exact resume (every token of
every example once across any checkpoint)."""

from __future__ import annotations

import json
from collections import Counter

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import feedline as fl
from feedline.core.errors import InvalidArgumentError
from feedline.testing.checkpoint import check_checkpointing
from feedline.transforms.window import ElementListDataset


def _examples(lengths: list[int], feature: str = "t") -> list[dict[str, np.ndarray]]:
    """Example ``i`` holds tokens ``1000 * (i + 1) + 0, 1, ...``: each token says whose it is."""
    return [{feature: np.arange(n, dtype=np.int64) + 1000 * (i + 1)}
            for i, n in enumerate(lengths)]


def _rows(ds: fl.Dataset) -> list[dict[str, list[int]]]:
    return [{k: v.tolist() for k, v in row.items()} for row in ds]


def _segments(rows: list[dict[str, list[int]]], feature: str = "t") -> list[list[int]]:
    """The token runs of every segment of every row, in row order."""
    out = []
    for row in rows:
        tokens, ids = row[feature], row[feature + "_segment_ids"]
        for segment in sorted(set(ids) - {0}):
            out.append([t for t, s in zip(tokens, ids) if s == segment])
    return out


def test_first_fit_fills_the_first_open_row_with_room():
    ds = fl.Dataset.from_list(_examples([3, 2, 4, 1])).pack_sequences(5, num_bins=2)
    rows = _rows(ds)
    # [3] opens row A; [2] fills A (full: emitted); [4] opens B; [1] fills B (full).
    assert rows == [
        {"t": [1000, 1001, 1002, 2000, 2001], "t_segment_ids": [1, 1, 1, 2, 2],
         "t_positions": [0, 1, 2, 0, 1]},
        {"t": [3000, 3001, 3002, 3003, 4000], "t_segment_ids": [1, 1, 1, 1, 2],
         "t_positions": [0, 1, 2, 3, 0]},
    ]


def test_first_fit_emits_the_oldest_row_when_every_bin_is_open():
    ds = fl.Dataset.from_list(_examples([3, 3, 3, 2])).pack_sequences(4, num_bins=2)
    rows = _rows(ds)
    # A=[3], B=[3]; the third example fits neither and both bins are open: A goes out,
    # C=[3] opens; [2] fits none (B has 1 free, C has 1 free)... B goes out, D=[2]; end: C, D.
    assert [r["t_segment_ids"] for r in rows] == [[1, 1, 1, 0]] * 3 + [[1, 1, 0, 0]]
    assert [r["t"][0] for r in rows] == [1000, 2000, 3000, 4000]


def test_padding_value_and_dtype_are_kept():
    examples = [{"t": np.array([7, 8], np.int16)}]
    (row,) = _rows(fl.Dataset.from_list(examples).pack_sequences(4, padding_value=-1))
    assert row == {"t": [7, 8, -1, -1], "t_segment_ids": [1, 1, 0, 0], "t_positions": [0, 1, 0, 0]}
    out = next(iter(fl.Dataset.from_list(examples).pack_sequences(4)))
    assert out["t"].dtype == np.int16 and out["t_segment_ids"].dtype == np.int32


def test_several_features_share_segment_ids_per_example():
    examples = [{"inputs": [1, 2, 3], "targets": [9]}, {"inputs": [4], "targets": [8, 7]}]
    ds = fl.Dataset.from_list(examples).pack_sequences({"inputs": 4, "targets": 3})
    (row,) = _rows(ds)
    assert row["inputs"] == [1, 2, 3, 4] and row["inputs_segment_ids"] == [1, 1, 1, 2]
    assert row["targets"] == [9, 8, 7] and row["targets_segment_ids"] == [1, 2, 2]
    assert row["targets_positions"] == [0, 0, 1]
    spec = ds.element_spec
    assert spec["inputs"].shape == (4,) and spec["targets_positions"].shape == (3,)
    assert spec["targets_segment_ids"].dtype == np.int32


def test_an_example_must_fit_every_feature_to_share_a_row():
    examples = [{"a": [1], "b": [1, 1]}, {"a": [2], "b": [2]}]
    rows = _rows(fl.Dataset.from_list(examples).pack_sequences({"a": 4, "b": 2}))
    assert [r["a"] for r in rows] == [[1, 0, 0, 0], [2, 0, 0, 0]]


def test_overflow_split_keeps_every_token():
    rows = _rows(fl.Dataset.from_list(_examples([7])).pack_sequences(3))
    assert _segments(rows) == [[1000, 1001, 1002], [1003, 1004, 1005], [1006]]
    assert rows[-1]["t_positions"] == [0, 0, 0]


def test_overflow_truncate_keeps_the_first_tokens():
    rows = _rows(fl.Dataset.from_list(_examples([5, 1])).pack_sequences(3, overflow="truncate"))
    assert _segments(rows) == [[1000, 1001, 1002], [2000]]


def test_overflow_error_names_the_element_and_the_feature():
    ds = fl.Dataset.from_list(_examples([2, 5])).pack_sequences(3, overflow="error")
    with pytest.raises(InvalidArgumentError, match=r"input element 1 .*'t' has 5 tokens, the row 3"):
        list(ds)


def test_concat_and_split_cuts_rows_and_restarts_positions():
    ds = fl.Dataset.from_list(_examples([3, 4, 1])).pack_sequences(3, method="concat_and_split")
    rows = _rows(ds)
    assert [r["t"] for r in rows] == [[1000, 1001, 1002], [2000, 2001, 2002], [2003, 3000, 0]]
    assert [r["t_segment_ids"] for r in rows] == [[1, 1, 1], [1, 1, 1], [1, 2, 0]]
    assert [r["t_positions"] for r in rows] == [[0, 1, 2], [0, 1, 2], [0, 0, 0]]


def test_concat_and_split_needs_features_of_one_length():
    ds = fl.Dataset.from_list([{"a": [1, 2], "b": [1]}]).pack_sequences(
        4, method="concat_and_split")
    with pytest.raises(InvalidArgumentError, match="input element 0.*same length"):
        list(ds)
    with pytest.raises(ValueError, match="one row length"):
        fl.Dataset.from_list([{"a": [1]}]).pack_sequences({"a": 2, "b": 3},
                                                          method="concat_and_split")


def _generated(*elements: object) -> fl.Dataset:
    """A dataset of ``elements`` as given (no common spec is required of them: a
    from_generator without a signature keeps its first element's dtypes, issue 43)."""
    return ElementListDataset(elements)


@pytest.mark.parametrize("elements, message", [
    ((np.arange(3),), "input element 0 is a ndarray; expected a dict of 1-D token arrays"),
    (({"t": np.arange(2)}, {"t": np.zeros((2, 2))}),
     r"input element 1: feature 't' has shape \(2, 2\); expected a 1-D sequence"),
    (({"a": np.array([1]), "b": np.array([2])}, {"a": np.array([3])}),
     "input element 1 has no feature 'b'"),
    (({"a": np.array([1.5])}, {"a": np.array([1])}),
     "input element 1: feature 'a' is int64, earlier elements were float64"),
])
def test_bad_elements_are_named(elements, message):
    with pytest.raises(InvalidArgumentError, match=message):
        list(_generated(*elements).pack_sequences(4))


@pytest.mark.parametrize("kwargs", [{"method": "best"}, {"overflow": "drop"}, {"num_bins": 0},
                                    {"length": 0}])
def test_bad_arguments_are_value_errors(kwargs):
    length = kwargs.pop("length", 4)
    with pytest.raises(ValueError, match="pack_sequences"):
        fl.Dataset.from_list([{"t": [1]}]).pack_sequences(length, **kwargs)


@pytest.mark.parametrize("method", ["first_fit", "concat_and_split"])
def test_checkpoint_at_every_position_resumes_exactly(method):
    rng = np.random.default_rng(3)
    ds = fl.Dataset.from_list(_examples(list(rng.integers(1, 9, 30)))).pack_sequences(
        6, method=method, num_bins=3)
    check_checkpointing(ds, epochs=2)


@settings(max_examples=60, deadline=None)
@given(lengths=st.lists(st.integers(0, 12), min_size=1, max_size=40),
       row=st.integers(1, 10), bins=st.integers(1, 5),
       method=st.sampled_from(["first_fit", "concat_and_split"]), cut=st.floats(0, 1))
def test_every_token_of_every_example_once_across_a_checkpoint(lengths, row, bins, method, cut):
    examples = _examples(lengths)

    def make() -> fl.Dataset:
        # A shuffle and a parallel map before the packer: their state resumes with it.
        return (fl.Dataset.from_list(examples).shuffle(8, seed=5)
                .map(lambda e: e, num_parallel_calls=2)
                .pack_sequences(row, method=method, num_bins=bins))

    it = iter(make())
    total = len(_rows(make()))
    head = [{k: v.tolist() for k, v in next(it).items()} for _ in range(int(cut * total))]
    state = json.loads(json.dumps(it.state_dict()))
    it.close()
    resumed = iter(make())
    resumed.load_state_dict(state)
    rows = head + [{k: v.tolist() for k, v in r.items()} for r in resumed]
    delivered = Counter(t for r in rows for t, s in zip(r["t"], r["t_segment_ids"]) if s)
    assert delivered == Counter(int(t) for e in examples for t in e["t"])
    assert all(len(r["t"]) == row for r in rows)


def test_a_failing_first_element_fixes_nothing_under_ignore_errors():
    ds = _generated({"a": np.array([1.5, 2.5]), "b": np.zeros((2, 2))},
                    {"a": np.array([1, 2])}, {"a": np.array([3])})
    rows = _rows(ds.pack_sequences(3, overflow="error").ignore_errors())
    assert rows == [{"a": [1, 2, 3], "a_segment_ids": [1, 1, 2], "a_positions": [0, 1, 0]}]
