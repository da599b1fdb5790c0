"""Fatal errors and errors crossing processes (issue 29, items 1 and 10).

An error marked fatal says the stream cannot go on: ``ignore_errors()`` raises it instead
of dropping an element (a broken stream must never look like a complete one), and the mark
survives a checkpoint. ``PackedError`` carries an exception to another process as its own
class where it can be rebuilt there. No test here starts a process or a thread.
"""

from __future__ import annotations

import json
import pickle
import threading

import pytest

import feedline as fl
from feedline.core.error_records import (
    RestoredError,
    error_record,
    is_fatal,
    mark_fatal,
    restore_error,
)
from feedline.placement.ipc.transport import PackedError
from feedline.transforms.ignore_errors import errors_ignored


def _failing(fatal_at: int, bad: tuple[int, ...] = ()):
    def f(x):
        if int(x) == fatal_at:
            raise mark_fatal(RuntimeError(f"the stage cannot go on at {int(x)}"))
        if int(x) in bad:
            raise ValueError(f"bad element {int(x)}")
        return x

    return f


def test_ignore_errors_drops_element_errors_and_raises_a_fatal_one():
    ds = fl.Dataset.range(10).map(_failing(6, bad=(2, 4))).ignore_errors()
    with iter(ds) as it:
        values = []
        with pytest.raises(RuntimeError, match="cannot go on at 6") as raised:
            for x in it:
                values.append(int(x))
        assert values == [0, 1, 3, 5] and errors_ignored(it) == 2
        assert is_fatal(raised.value)


def test_a_fatal_error_read_ahead_by_a_parallel_stage_is_still_raised():
    ds = fl.Dataset.range(10).map(_failing(6), num_parallel_calls=2).prefetch(3) \
        .ignore_errors()
    with iter(ds) as it, pytest.raises(RuntimeError, match="cannot go on at 6"):
        list(it)


def test_the_fatal_mark_survives_a_record_and_json():
    record = json.loads(json.dumps(error_record(mark_fatal(KeyError("gone")))))
    assert record["fatal"] is True
    restored = restore_error(record)
    assert isinstance(restored, KeyError) and isinstance(restored, RestoredError)
    assert is_fatal(restored)
    plain = error_record(KeyError("one element"))
    assert "fatal" not in plain and not is_fatal(restore_error(plain))


_FAILING = [True]


def _fatal_at_three_while_failing(x):
    if int(x) == 3 and _FAILING[0]:
        raise mark_fatal(RuntimeError("the stage cannot go on at 3"))
    return x


def test_a_checkpoint_holding_a_fatal_error_restores_it_fatal():
    # The parallel map pulls its input ahead on the consumer's thread: element 3's error is
    # pulled, not handed out, when the state is taken, so the state holds its record.
    ds = fl.Dataset.range(10).map(_fatal_at_three_while_failing) \
        .map(lambda x: x, num_parallel_calls=2).ignore_errors()
    with iter(ds) as it:
        assert [int(next(it)) for _ in range(3)] == [0, 1, 2]
        state = it.state_dict()
    assert '"fatal": true' in json.dumps(state)
    _FAILING[0] = False  # re-reading would not fail: the record is raised in its place
    try:
        with iter(ds) as restored:
            restored.load_state_dict(state)
            with pytest.raises(RuntimeError, match="cannot go on at 3") as raised:
                next(restored)
    finally:
        _FAILING[0] = True
    assert isinstance(raised.value, RestoredError) and is_fatal(raised.value)


class _Importable(ValueError):
    """An exception class any process can import."""


class _HoldsALock(Exception):
    def __init__(self) -> None:
        super().__init__("holds a lock")
        self.lock = threading.Lock()


class _NeedsTwoArguments(ValueError):
    def __init__(self, code: int, detail: str) -> None:
        super().__init__(f"code {code}: {detail}")


def _across(error: BaseException) -> BaseException:
    """``error`` sent through a pickle, as a process would receive it."""
    error.add_note("a note made where it was raised")
    packed = pickle.loads(pickle.dumps(PackedError(error, "Traceback (most recent call last):")))
    return packed.unpack("raised in a worker process:")


def test_an_error_crosses_as_its_own_class_with_its_notes_and_the_traceback():
    error = _across(_Importable("lost in transit"))
    assert type(error) is _Importable and str(error) == "lost in transit"
    assert error.__notes__ == ["a note made where it was raised",
                               "raised in a worker process:\nTraceback (most recent call last):"]


def test_an_error_of_a_local_class_crosses_by_value_and_comes_back_as_that_class():
    class Local(Exception):
        pass

    error = _across(Local("made in a function"))
    assert type(error) is Local  # cloudpickle gives back the class it sent by value


def test_an_error_that_cannot_cross_comes_as_a_restored_error_of_its_kind():
    for error, kind in ((_HoldsALock(), Exception), (_NeedsTwoArguments(7, "picky"), ValueError)):
        received = _across(error)
        assert isinstance(received, RestoredError) and isinstance(received, kind)
        assert str(received) == str(error)
        assert received.original_type.endswith(type(error).__qualname__)
        assert "a note made where it was raised" in received.__notes__
        assert received.__notes__[-1].startswith("raised in a worker process:\nTraceback")


def test_a_fatal_error_stays_fatal_across():
    assert is_fatal(_across(mark_fatal(RuntimeError("cannot go on"))))
    assert is_fatal(_across(mark_fatal(_HoldsALock())))  # by its record
