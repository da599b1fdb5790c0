"""The inline paths of a parallel ``map``: its function called on the consumer's thread.

A :class:`~feedline.transforms.map.ParallelMapIterator` whose runner runs its calls inline
(one worker, or while its workers start) maps here, element by element, without the
window's tasks: *direct* while nothing is re-read or pending (the input's own state is the
position), and on the *plain path* once the tuner has settled it inline for good, where
``next()`` costs what a plain inline map costs (the tuner reads its count from the input's
position). A new setting of the tuner sends it back to the window before its next element.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

from feedline.core.element_dtypes import DtypeGuard
from feedline.core.functions import annotate_error
from feedline.core.structure import normalize_output
from feedline.execution.map_runner import MapCallRunner
from feedline.execution.positions import PositionReader
from feedline.execution.window import PositionedWindow


class InlineCalls:
    """What a parallel map does when its calls run inline (a base of
    :class:`~feedline.transforms.map.ParallelMapIterator`, which sets the attributes
    below and takes the plain path's elements in its ``__next__``)."""

    _window: PositionedWindow
    _runner: MapCallRunner
    _fn: Callable[..., Any]
    _call: Callable[..., Any]
    _name: str
    _dtypes: DtypeGuard
    _plain: PositionReader | None

    def _go_plain(self) -> None:
        """Map on the plain path from the next element: the tuner reads the elements it
        hands out from the input's position (:meth:`MapKnobs.count_from`), and a new setting
        (:meth:`_setting_changed`, on the tuner's thread) sends it back to the window."""
        positions = self._window.positions
        self._runner.knobs.count_from(positions)
        self._plain = positions
        if self._runner.gate.limit != 1:  # set meanwhile by the tuner: back at once
            self._leave_plain()

    def _setting_changed(self) -> None:
        # The tuner's thread: the consumer's next element takes the window's path.
        self._plain = None

    def _leave_plain(self) -> None:
        """Off the plain path (on the consumer's thread): its elements counted."""
        self._plain = None
        self._runner.knobs.count_from(None)

    def _next_inline(self) -> Any:
        """The next element, its function called here (every earlier one handed out)."""
        window, runner = self._window, self._runner
        if window.may_go_direct():
            return self._next_direct()
        # Re-reading after a restore (or an input error's record pending): the window's
        # reader skips what went out before the checkpoint and raises restored errors.
        item, is_error, value = window.pull()
        window.handed_out(item)
        runner.counters.elements += 1
        if is_error:
            raise value  # already annotated by the stage that raised it
        started = time.perf_counter()
        try:
            return self._apply(item, value)
        finally:
            runner.called_inline(time.perf_counter() - started)

    def _next_direct(self) -> Any:
        """The next element pulled and mapped here, nothing re-read or pending: the input's
        state is the position."""
        runner = self._runner
        try:
            item, value = self._window.pull_direct()
        except StopIteration:
            raise
        except Exception:
            runner.counters.elements += 1  # the input's error counts as its element
            raise
        runner.counters.elements += 1
        if runner.warming:  # the first tasks' size, when the workers have started
            started = time.perf_counter()
            try:
                return self._apply(item, value)
            finally:
                runner.sizer.measured(1, time.perf_counter() - started, runner.kind)
        # Untimed: the tuner judges an inline stage on its rate, and a clock read on each
        # side costs what a cheap call does.
        if runner.inline and self._window.direct and runner.gate.limit == 1:
            self._go_plain()
        try:
            # Inside the try: a result that is no element is this stage's error.
            return self._dtypes.check(normalize_output(self._call(self._fn, value)), item)
        except Exception as error:  # noqa: BLE001 - re-raised with the stage named
            raise annotate_error(error, self._name, item)

    def _apply(self, item: int, value: Any) -> Any:
        try:
            # Inside the try: a result that is no element is this stage's error.
            return self._dtypes.check(normalize_output(self._call(self._fn, value)), item)
        except Exception as error:  # noqa: BLE001 - re-raised with the stage named
            raise annotate_error(error, self._name, item)
