"""The tuner: sets each ``AUTOTUNE`` stage's parallelism from what the stage measures.

Every tuned stage (a ``map``, ``batch`` or ``interleave`` with ``num_parallel_calls=AUTOTUNE``
on threads) registers its knobs with its pipeline's :class:`Tuner`, which runs on a thread
of its own (``feedline-autotune``) and every :data:`PERIOD` seconds reads each stage's
counters: elements handed out, its consumer's waits, its tasks' busy and CPU time, its
input's time. It starts a stage from its executor choice's measurement
(:mod:`~feedline.autotune.start`), grows it while its consumer waits on busy workers, trims
idle workers, explores fewer, and keeps each change only if the rate it measured on trial
says so (:mod:`~feedline.autotune.trial`). Each change is a :class:`TuningDecision` with its
reason and figures (``statistics().tuning``, logger ``feedline.autotune``). The rules in
full, with the measurements behind their figures (:mod:`~feedline.autotune.rules`), are in
benchmarks/RESULTS-autotune.md.
"""

from __future__ import annotations

import itertools
import logging
import math
import threading
import time
import weakref
from collections.abc import MutableMapping

from feedline.autotune.control import Control, Grow, fine_step, workers_text
from feedline.autotune.rules import (
    ASCENT_TRIAL_TICKS,
    BOUND_SLACK,
    BUSY_TO_GROW,
    EXPLORE_TICKS,
    FILL_BUSY,
    GAIN,
    HEADROOM,
    INPUT_BOUND,
    PAUSE_TICKS,
    PERIOD,
    SETTLE_SECONDS,
    TRIAL_TICKS,
    WAIT_HEADROOM,
    WAITING_BUSY,
    WAITS_TO_GROW,
)
from feedline.autotune.stage import (
    Bound,
    CallMeasurement,
    TunableStage,
    TuningCounters,
    holds_the_gil,
    stage_bound,
)
from feedline.autotune.start import MeasuredStart
from feedline.autotune.trial import Trials
from feedline.placement.policy import SERIAL_GIL_SHARE
from feedline.profiling.model import StageWindow, most_loaded
from feedline.profiling.records import TuningDecision

__all__ = [
    "ASCENT_TRIAL_TICKS", "EXPLORE_TICKS", "FILL_BUSY", "GAIN", "PAUSE_TICKS", "PERIOD",
    "SERIAL_GIL_SHARE", "TRIAL_TICKS", "WAITING_BUSY", "Bound", "CallMeasurement", "Tuner",
    "TunableStage", "TuningCounters", "holds_the_gil", "stage_bound",
]

_log = logging.getLogger("feedline.autotune")


class Tuner(MeasuredStart, Trials):
    """Tunes the registered stages of one pipeline (see the module doc).

    Args:
        period: Seconds between two looks.

    Example:
        >>> import feedline as fl
        >>> ds = fl.Dataset.range(2000).map(lambda x: x * 2, num_parallel_calls=fl.AUTOTUNE)
        >>> with iter(ds) as it:
        ...     total = sum(int(x) for x in it)
        >>> total
        3998000
    """

    def __init__(self, period: float = PERIOD) -> None:
        self._period = period
        self._controls: list[Control] = []
        # By stage key: survives the stage's epochs. A dataset node is held weakly: an
        # interleave's function makes a tuned stage per element, whose node, once dropped,
        # is never seen again (held strongly, one control per element would pile up).
        self._known: dict[object, Control] = {}
        self._known_nodes: weakref.WeakKeyDictionary[object, Control] = \
            weakref.WeakKeyDictionary()
        self._registered = itertools.count()
        self._decisions: list[TuningDecision] = []
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._wake = threading.Event()  # set by stop() and wake(): look now
        self._thread: threading.Thread | None = None
        self._started = time.perf_counter()
        self._ticks = 0

    def register(self, stage: TunableStage, key: object = None) -> TuningCounters:
        """Tune ``stage`` from now on (the tuner's thread starts with the first stage).

        Args:
            stage: The stage's knobs (:class:`~feedline.execution.map_knobs.MapKnobs`).
            key: What identifies the stage across its iterators (its dataset node;
                default: its name).

        Returns:
            The counters the stage keeps: shared with the stage's earlier iterators (the
            previous epoch's), whose setting the new one starts from.
        """
        key = stage.name if key is None else key
        known_by: MutableMapping[object, Control]
        try:
            weakref.ref(key)
        except TypeError:  # a name: kept as long as the tuner
            known_by = self._known
        else:
            known_by = self._known_nodes
        with self._lock:
            known = known_by.get(key)
            if known is not None:
                # The same stage in a new epoch: carry on from where its tuning was.
                stage.tuned_workers = known.setting
                known.stage = weakref.ref(stage)
                if known not in self._controls:
                    self._controls.append(known)
                control = known
            else:
                control = known_by[key] = Control(stage)
                control.first_explore += self._ticks
                control.registered = next(self._registered)
                self._controls.append(control)
            if self._stop.is_set():
                return control.counters
            if self._thread is None or not self._thread.is_alive():
                self._thread = threading.Thread(target=self._loop, daemon=True,
                                                name="feedline-autotune")
                self._thread.start()
            return control.counters

    def settings(self) -> dict[str, int]:
        """Each stage's current setting (threads working at once), by stage name, in the
        order the stages registered (the live status line shows them)."""
        with self._lock:
            controls = sorted([*self._known.values(), *self._known_nodes.values()],
                              key=lambda control: control.registered)
            return {control.name: control.setting for control in controls}

    def call_times(self) -> dict[str, tuple[float, float]]:
        """Each stage's ``(CPU seconds, wall seconds)`` of its calls so far (its tasks'
        thread time and wall time), by stage name: what says whether its calls compute or
        wait (:func:`~feedline.placement.policy.maps_that_wait`).

        Example:
            >>> Tuner().call_times()
            {}
        """
        with self._lock:
            controls = [*self._known.values(), *self._known_nodes.values()]
        return {control.name: (control.counters.cpu, control.counters.busy)
                for control in controls}

    def decisions(self) -> tuple[TuningDecision, ...]:
        """Every change made so far, oldest first."""
        with self._lock:
            return tuple(self._decisions)

    def wake(self) -> None:
        """Look at the stages now, not at the end of the period: a stage has something new
        to act on (its executor choice has just measured its calls)."""
        self._wake.set()

    def stop(self) -> None:
        """End the tuner's thread. Idempotent."""
        with self._lock:  # register() checks _stop and starts the thread under it
            self._stop.set()
            thread = self._thread
        self._wake.set()
        if thread is not None and thread is not threading.current_thread():
            thread.join()

    def _loop(self) -> None:
        # Ends with the pipeline (stop()), or once every stage it tuned is gone.
        while True:
            self._wake.wait(self._period)
            self._wake.clear()
            if self._stop.is_set():
                return
            self.tick()
            with self._lock:
                if not self._controls:
                    self._thread = None
                    return

    def tick(self) -> None:
        """Look at every stage once (the tuner's thread calls this every period).

        Each stage's window is taken first; then each stage's rules run on it. Of the
        stages whose grow rule fires, only the most loaded grows (see the module doc)."""
        self._ticks += 1
        with self._lock:
            controls = list(self._controls)
        looked: list[tuple[Control, TunableStage, StageWindow]] = []
        for control in controls:
            stage = control.stage()
            if stage is None or stage.tuning_done:
                with self._lock:
                    # Unless the stage's next iterator (an epoch of repeat()) registered
                    # meanwhile: that one is tuned on.
                    if control.stage() is stage:
                        self._controls.remove(control)
                continue
            window = self._look(control, stage)
            if window is not None:
                looked.append((control, stage, window))
        grows = [grow for control, stage, window in looked
                 if (grow := self._step(control, stage, window)) is not None]
        if grows:
            # The model's bottleneck among them (ties to the earlier registered): more
            # workers elsewhere would take cores, and the GIL, from the stage that limits
            # the pipeline. The others are considered again at the next look.
            self._grow(grows[most_loaded([grow.window for grow in grows])])

    def _look(self, control: Control, stage: TunableStage) -> StageWindow | None:
        """Take a snapshot of the stage's counters: its window since its setting began
        (at most the last :data:`WINDOW_TICKS` looks), or ``None`` when there is nothing
        to judge yet (or the stage was just set from its executor choice's measurement)."""
        if stage.tuning_paused:
            control.last = None  # start afresh once it means something
            control.history.clear()
            return None
        if not control.measurement_used:
            control.measurement_used = True
            measured = stage.measured_calls
            if measured is not None and self._start_from(stage, control, measured):
                return None
        now = time.perf_counter()
        last = control.last
        control.last = (now, *stage.tuning_counters())
        history = control.history
        if last is None or not history:
            history.append(control.last)
            return None
        if control.last[2] - last[2] <= 0 or now <= last[0]:
            return None  # the consumer is not reading: nothing to learn
        # Judged over the looks since the setting began (at most the last WINDOW_TICKS):
        # one look, a quarter of a second, is too short; a hiccup of the machine would
        # trim a busy stage. The window lets a long-held setting follow a workload change.
        since = history[0]
        history.append(control.last)
        return StageWindow.between(since, control.last, stage.tuned_workers)

    def _step(self, control: Control, stage: TunableStage, window: StageWindow
              ) -> Grow | None:
        """Apply the rules to the stage's ``window``; a grow its rule calls for is returned,
        not made: :meth:`tick` chooses which stage grows."""
        if window.share is not None:  # else its tasks took no time: the last share holds
            control.share = window.share
        bound = stage_bound(stage, control.share)
        figures = {"rate": window.rate, "waited": window.waited, "occupied": window.occupied,
                   "pulling": window.pulling, **bound.figures()}
        control.peaks.append(window.occupied)
        judged = False  # a grow was just kept: the next rule may act at once
        if control.trial is not None:
            judged = self._judge_trial(control, stage, window, figures)
            if not judged:
                return None
        if not judged and (self._ticks < control.paused_until
                           or window.seconds < SETTLE_SECONDS):
            return None
        return self._apply_rules(control, stage, window, bound, figures, judged)

    def _apply_rules(self, control: Control, stage: TunableStage, window: StageWindow,
                     bound: Bound, figures: dict[str, float], judged: bool) -> Grow | None:
        """Grow, bring down to the RAM bound, trim or explore, the first rule that applies
        (see benchmarks/RESULTS-autotune.md); a grow is returned, not made."""
        rate, waited, workers = window.rate, window.waited, window.workers
        busy = window.load
        figures["busy"] = busy
        # Calls that wait, on more threads than its CPU workers: idle threads cost them
        # nothing (a thread waiting for work takes no CPU), too few cost the rate. Such a
        # stage is sized for the most its tasks kept busy lately, not for the last look.
        waiting = workers > stage.cpu_workers and bound.workers > stage.cpu_workers
        if waiting:
            figures["peak"] = max(control.peaks)
            needed = max(stage.cpu_workers, math.ceil(max(control.peaks) * WAIT_HEADROOM))
        else:
            needed = max(1, math.ceil(window.occupied * HEADROOM))
        # Its input, pulled on its consumer's thread, is what the consumer waits for: more
        # workers cannot help, and their GIL time slows that thread.
        input_bound = window.pulling > INPUT_BOUND
        if (waited > WAITS_TO_GROW and busy > BUSY_TO_GROW and not input_bound
                and workers < bound.workers and not control.descending):
            target = min(bound.workers, workers * control.factor if control.ascending
                         else workers + fine_step(workers))
            ticks = ASCENT_TRIAL_TICKS if control.ascending else TRIAL_TICKS
            return Grow(control, stage, window, target,
                        ("grow", workers, rate, self._ticks + ticks),
                        f"its consumer waited for {waited:.0%} of calls while its "
                        f"{workers_text(workers)} {'was' if workers == 1 else 'were'} "
                        f"{busy:.0%} busy{self._why_bound(bound, target)}",
                        figures)
        if workers > bound.workers * BOUND_SLACK and bound.limit == "ram":
            self._set(stage, control, bound.workers,
                      f"{workers} workers hold more than the RAM budget allows "
                      f"({stage.bytes_per_worker:,.0f} bytes each: {bound.by_ram} fit)",
                      figures)
        elif needed < workers:
            self._trim(control, stage, window, needed, waiting, figures)
        elif not judged and workers > 1 and (control.descending or (
                (input_bound or (waited < WAITS_TO_GROW
                                 and self._ticks >= control.first_explore))
                and not waiting and self._ticks >= control.explore_at)):
            # (Once a grow was judged, fewer are tried after the new setting has run a while.)
            self._explore(control, stage, window, input_bound, figures)
        return None

    def _trim(self, control: Control, stage: TunableStage, window: StageWindow, needed: int,
              waiting: bool, figures: dict[str, float]) -> None:
        """Down to the ``needed`` workers its tasks keep busy, on trial."""
        # Fewer workers are enough now; should its consumer come to wait again, the
        # stage grows back by an ascent (a trim says the demand moved, not the knee).
        workers, rate = window.workers, window.rate
        control.ascending, control.factor = True, 2
        control.trial = ("trim", workers, rate, self._ticks + TRIAL_TICKS)
        kept = (f"at most {max(control.peaks):.1f} workers busy lately" if waiting
                else f"{window.occupied:.1f} workers busy")
        self._set(stage, control, needed,
                  f"its tasks kept {kept} at {rate:,.0f} elements/s: "
                  f"{workers} workers were {window.load:.0%} busy", figures)

    def _explore(self, control: Control, stage: TunableStage, window: StageWindow,
                 input_bound: bool, figures: dict[str, float]) -> None:
        """An eighth fewer workers (one below 16), on trial.

        Busy workers may be busy waiting for each other (the GIL, a lock, memory
        bandwidth): only trying tells. Fewer is kept unless clearly slower. After more
        workers did not help a stage its consumer waits for, fewer are tried at once, and
        again while as fast (calls that came to hold the GIL, on threads grown for calls
        that waited). Not for the threads of calls that wait otherwise: idle, they cost
        nothing, and are trimmed to those kept busy.
        """
        workers, rate = window.workers, window.rate
        control.explore_at = self._ticks + control.explore_every
        control.trial = ("explore", workers, rate, self._ticks + TRIAL_TICKS)
        why = ("more did not help" if control.descending
               else f"its input took {window.pulling:.0%} of the time" if input_bound
               else f"its consumer waited for {window.waited:.0%} of calls")
        step = fine_step(workers)
        self._set(stage, control, workers - step,
                  f"trying {workers_text(step)} fewer ({rate:,.0f} elements/s with {workers}; "
                  f"{why})", figures)

    def _grow(self, grow: Grow) -> None:
        grow.control.trial = grow.trial
        self._set(grow.stage, grow.control, grow.workers, grow.reason, grow.figures)

    @staticmethod
    def _why_bound(bound: Bound, target: int) -> str:
        if target < bound.workers:
            return ""
        if bound.limit == "cpu":
            return (f"; its calls on a CPU {bound.share:.1%} of their time: "
                    f"{bound.workers} threads' CPU fills its cores")
        if bound.limit == "ram":
            return f"; the RAM budget holds {bound.workers} workers"
        return f"; at most {bound.workers} ({bound.limit})"


    def record(self, stage: str, setting: str, old: int, new: int, reason: str,
               figures: dict[str, float] | None = None) -> None:
        """Keep a change made elsewhere in the pipeline (a ``prefetch(AUTOTUNE)`` buffer
        grown) with the tuner's own: one log of what AUTOTUNE did, and why. Logged too
        (logger ``feedline.autotune``, ``INFO``).

        Example:
            >>> tuner = Tuner()
            >>> tuner.record("prefetch", "buffer", 1, 2, "its consumer drained it")
            >>> [(d.setting, d.old, d.new) for d in tuner.decisions()]
            [('buffer', 1, 2)]
        """
        decision = TuningDecision(time.perf_counter() - self._started, stage, setting, old,
                                  new, reason, dict(figures or {}))
        with self._lock:
            self._decisions.append(decision)
        _log.info("feedline AUTOTUNE: %s: %s %d -> %d at %.2f s (%s)", stage, setting, old,
                  new, decision.seconds, reason)

    def _note(self, control: Control, reason: str, figures: dict[str, float]) -> None:
        stage = control.stage()
        workers = stage.tuned_workers if stage is not None else control.setting
        self.record(control.name, "workers", workers, workers, reason, figures)

    def _set(self, stage: TunableStage, control: Control, workers: int, reason: str,
             figures: dict[str, float]) -> None:
        old = stage.tuned_workers
        if workers == old:
            return
        stage.tuned_workers = workers
        control.setting = workers
        control.history.clear()  # the new setting is measured from the next look
        self.record(control.name, "workers", old, workers, reason, figures)
