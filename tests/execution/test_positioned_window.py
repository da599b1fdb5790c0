"""The one positioned read-ahead window (feedline.execution.window): items pulled and numbered,
tasks in flight, positions handed out, a checkpoint that is a position and a restore that
re-reads; and the execution layer names nothing of the placement layer."""

from __future__ import annotations

import ast
import pathlib

import pytest

import feedline as fl
from feedline.core.iterator import IteratorContext
from feedline.execution import executor as executor_module
from feedline.execution.executor import ThreadExecutor, make_executor
from feedline.execution.window import PositionedWindow
from feedline.testing.threads import no_leaked_threads

pytestmark = pytest.mark.timeout(60)


def _window(n: int = 10, limit: int = 3, deterministic: bool = True) -> PositionedWindow:
    source = fl.Dataset.range(n)._make_iterator(IteratorContext())
    return PositionedWindow("test", source, lambda: ThreadExecutor(2, "test"), limit=limit,
                            deterministic=deterministic)


def _fill(window: PositionedWindow) -> None:
    window.mark_start()
    while not window.exhausted and window.has_room():
        try:
            item, _, value = window.pull()
        except StopIteration:
            break
        window.submit(item, lambda v: int(v) * 10, value)


def _take(window: PositionedWindow) -> int:
    item, future = window.take()
    window.handed_out(item)
    return future.result()


def test_a_window_hands_out_in_order_and_its_position_skips_nothing_in_flight():
    with no_leaked_threads():
        window = _window()
        _fill(window)
        assert len(window) == 3
        assert [_take(window), _take(window)] == [0, 10]
        state = window.position()
        # Two items out, one still in flight: the position is after the second.
        assert (state["next"], state["done"], state["errors"]) == (2, [], [])
        window.shutdown()


def test_a_restored_window_re_reads_exactly_what_was_not_handed_out():
    with no_leaked_threads():
        first = _window()
        _fill(first)
        _take(first)
        state = first.position()
        first.shutdown()
        second = _window()
        second.restore(state)
        out = []
        while True:
            _fill(second)
            if not len(second):
                break
            out.append(_take(second))
        assert out == [10 * i for i in range(1, 10)]
        second.shutdown()


def test_direct_hand_outs_keep_the_exact_position_and_tasks_go_on_after_them():
    with no_leaked_threads():
        window = _window()
        assert window.may_go_direct()
        assert [window.pull_direct() for _ in range(3)] == [(0, 0), (1, 1), (2, 2)]
        assert window.position()["next"] == window.position()["at"] == 3
        window.leave_direct()
        _fill(window)
        assert _take(window) == 30
        assert window.position()["next"] == 4
        window.shutdown()


def test_an_input_error_is_an_item_kept_in_its_place_and_recorded_until_handed_out():
    def fails_at_2(x):
        if int(x) == 2:
            raise ValueError("two")
        return x

    source = fl.Dataset.range(5).map(fails_at_2)._make_iterator(IteratorContext())
    with no_leaked_threads():
        window = PositionedWindow("test", source, lambda: ThreadExecutor(1, "test"), limit=5)
        window.mark_start()
        pulled = [window.pull()[:2] for _ in range(4)]
        assert pulled == [(0, False), (1, False), (2, True), (3, False)]
        window.handed_out(0)
        window.handed_out(1)
        assert [item for item, _ in window.position()["errors"]] == [2]
        window.handed_out(2)
        assert window.position()["errors"] == []
        window.shutdown()


def test_the_execution_layer_imports_nothing_from_placement_autotune_or_transforms():
    root = pathlib.Path(executor_module.__file__).parent
    upward = ("feedline.placement", "feedline.autotune", "feedline.transforms")
    found = []
    for path in sorted(root.glob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom) and (node.module or "").startswith(upward):
                found.append((path.name, node.module))
            elif isinstance(node, ast.Import):
                found += [(path.name, a.name) for a in node.names if a.name.startswith(upward)]
    assert found == []


def test_make_executor_makes_only_the_kinds_registered_with_it():
    with pytest.raises(ValueError, match="unknown executor kind 'gpu'"):
        make_executor(1, "test", "gpu")
    from feedline.placement import process_executor  # registers "process"

    assert executor_module._KINDS["process"] is process_executor.ProcessExecutor


class _Tens:
    def __call__(self, x):
        return x * 10

    def feedline_batch_form(self, xs):
        return [x * 10 for x in xs]


@pytest.mark.parametrize("make", [
    lambda ds: ds.map(_Tens(), num_parallel_calls=2),
    lambda ds: ds.batch(2, num_parallel_calls=2),
    lambda ds: ds.map(_Tens(), num_parallel_calls=2).batch(2),  # fused: map_and_batch
], ids=["map", "batch", "map_and_batch"])
def test_every_parallel_stage_reads_ahead_on_a_positioned_window(make):
    with no_leaked_threads(), iter(make(fl.Dataset.range(4))) as it:
        next(it)
        windows = it._root.read_aheads()
        assert [type(w) for w in windows] == [PositionedWindow]
