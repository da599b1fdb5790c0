"""A ragged list given to a source is a clear error naming the source and where rows differ."""

import pytest

import feedline as fl
from feedline.core.structure import RaggedListError

SUGGESTION = (r"make one element per row with Dataset.from_list\(rows\), slice ragged rows "
              r"as tf.ragged.constant's \(Dataset.from_tensor_slices\(RaggedValues."
              r"from_row_lengths\(values, lengths\)\)\), or pad the rows "
              r"\(RaggedValues.from_row_lengths\(values, lengths\).to_padded\(0\)\)")


@pytest.mark.parametrize(("value", "where"), [
    ([[1, 2], [3]], r"\[1\] is 1 item long, \[0\] 2 items long"),
    ({"a": [[1], [2, 3]]}, r"\[1\] is 2 items long, \[0\] 1 item long"),
    ([[[1, 2], [3, 4]], [[1, 2], [3]]], r"\[1\]\[1\] is 1 item long, \[1\]\[0\] 2 items long"),
    ([1, [2]], r"\[1\] is 1 item long, \[0\] a scalar"),
])
def test_from_tensor_slices_of_a_ragged_list_names_itself_and_the_rows(value, where):
    # TF 2.21: ValueError "Can't convert non-rectangular Python sequence to Tensor."
    with pytest.raises(RaggedListError, match=r"^from_tensor_slices\(\): a ragged "
                                              r"\(non-rectangular\) list cannot become one "
                                              rf"array \({where};") as caught:
        fl.Dataset.from_tensor_slices(value)
    assert isinstance(caught.value, ValueError)
    assert "Can't convert non-rectangular Python sequence to Tensor" in str(caught.value)


def test_the_error_suggests_what_works():
    with pytest.raises(RaggedListError, match=SUGGESTION):
        fl.Dataset.from_tensor_slices([[1, 2], [3]])
    with pytest.raises(RaggedListError, match=SUGGESTION):
        fl.Dataset.from_tensors([[1, 2], [3]])
    rows = [[1, 2], [3]]
    assert [row.tolist() for row in fl.Dataset.from_list(rows)] == rows
    ragged = fl.RaggedValues.from_row_lengths([1, 2, 3], [2, 1])
    assert [row.tolist() for row in fl.Dataset.from_tensor_slices(ragged)] == rows
