"""Error categories match tf.data 2.21's: code that catches them depends on them.

``fl.InvalidArgumentError`` is tf.data's ``InvalidArgumentError`` and a ``ValueError``; the
other cases (list_files, fixed-length records, padded_batch) are tested with their operations.
"""

import pickle

import pytest

import feedline as fl
from feedline.core.error_records import error_record, restore_error


def stop(*args):
    raise StopIteration


def test_stop_iteration_in_a_function_is_an_invalid_argument():
    # tf 2.21: range(3).map(<py_function raising StopIteration>) -> InvalidArgumentError
    # "Function invocation produced OutOfRangeError: StopIteration"
    for ds in (fl.Dataset.range(3).map(stop), fl.Dataset.range(3).filter(stop),
               fl.Dataset.range(3).flat_map(stop), fl.Dataset.range(3).scan(0, stop)):
        with pytest.raises(fl.InvalidArgumentError) as info:
            next(iter(ds))
        assert isinstance(info.value, fl.StopIterationError)
        assert isinstance(info.value, ValueError)
        assert isinstance(info.value, RuntimeError)  # as before, and as PEP 479's
        assert isinstance(info.value.__cause__, StopIteration)


def test_invalid_argument_error_category():
    assert issubclass(fl.InvalidArgumentError, ValueError)
    assert issubclass(fl.InvalidArgumentError, fl.FeedlineError)
    # tf: batching elements of different shapes is an InvalidArgumentError too
    assert issubclass(fl.StructureError, fl.InvalidArgumentError)
    assert not issubclass(fl.DataLossError, fl.InvalidArgumentError)
    error = fl.InvalidArgumentError("bad file", path="a.bin", offset=12, record_index=3)
    assert (error.path, error.offset, error.record_index) == ("a.bin", 12, 3)
    copy = pickle.loads(pickle.dumps(error))
    assert type(copy) is fl.InvalidArgumentError and str(copy) == "bad file"
    assert (copy.path, copy.offset, copy.record_index) == ("a.bin", 12, 3)


def test_restored_invalid_argument_keeps_its_category():
    restored = restore_error(error_record(fl.InvalidArgumentError("No files matched")))
    assert isinstance(restored, fl.InvalidArgumentError) and isinstance(restored, ValueError)
    assert str(restored) == "No files matched"
