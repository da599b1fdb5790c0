"""Where the tuner starts a stage: from its executor choice's measurement of its calls (the
GIL share they held, the CPU they used running together), before any trial."""

from __future__ import annotations

from feedline.autotune.control import Control, Deciding, rate_since
from feedline.autotune.rules import (
    ASCENT_TRIAL_TICKS,
    FILL_BUSY,
    MAX_FACTOR,
    RELIABLE_CONCURRENCY,
    TRIAL_TICKS,
    WAITING_BUSY,
)
from feedline.autotune.stage import (
    CallMeasurement,
    TunableStage,
    gil_filling,
    idle_filling,
    short_calls,
    stage_bound,
)
from feedline.core.interpreter import gil_disabled
from feedline.placement.policy import SERIAL_GIL_SHARE


class MeasuredStart:
    """The tuner's start from a measurement (a part of :class:`~feedline.autotune.tuner.Tuner`)."""

    def _start_from(self: Deciding, stage: TunableStage, control: Control,
                    measured: CallMeasurement) -> bool:
        """Set the stage from its executor choice's measurement; whether it changed."""
        workers = stage.tuned_workers
        share, busy = measured.gil_share, measured.busy_together
        # A call's GIL time: the share of its CPU time that holds the GIL, of the time it
        # is on a CPU at all. A call that mostly waits (files, a sleep) holds it little,
        # whatever share of its few CPU microseconds the measurement gave the GIL (a 4 ms
        # sleep measured 80-100%, and ran one at a time instead of 64).
        holding = 0.0 if gil_disabled() else share * measured.busy_alone
        # Calls measured short that hold the GIL start on one worker's trial however few
        # ran at once: judged on the rate, it costs nothing where wrong, while a cheap map
        # measured at 1.79 calls at once of 2 (a busy machine) ran 0.8 s on threads first.
        short_serial = holding >= SERIAL_GIL_SHARE and measured.seconds_per_call is not None \
            and short_calls(measured)
        if measured.concurrency < RELIABLE_CONCURRENCY * workers and not short_serial:
            return False
        figures = {"gil_share": share, "busy_together": busy, "busy_alone": measured.busy_alone,
                   "concurrency": measured.concurrency, "rate": measured.rate}
        if holding >= SERIAL_GIL_SHARE and workers > 1 and short_calls(measured):
            # Judged on the rate measured with ``workers``: a machine busy with other work,
            # or the first calls' set-up, can make calls that run in parallel look serial.
            # The rate its consumer saw meanwhile where lower: the measurement's counts its
            # tasks' elements over their span, not what its consumer took (a cheap map:
            # 300k elements/s measured, 60k taken on threads, 140k inline, judged slower).
            rate = min(measured.rate, rate_since(control, stage))
            figures["rate"] = rate
            control.trial = ("serial", workers, rate, self._ticks + TRIAL_TICKS)
            self._set(stage, control, 1,
                      f"its calls hold the GIL {share:.0%} of their time: they run one at a "
                      "time however many workers it has, and more take the GIL from its input",
                      figures)
            return True
        if holding >= SERIAL_GIL_SHARE:
            # Longer calls that hold the GIL keep their workers; more would mostly wait for
            # it, so they grow one at a time, each step judged (chess: 4 workers 15%
            # slower than 2, an ascent's trial of them a quarter of a 3 s run).
            control.ascending = False
            return False
        # Threads whose GIL time adds up to the whole GIL, with headroom (calls hold it in
        # bursts): more would only wait for it. Within the CPUs the machine left idle: calls
        # off a CPU part of the time may be waiting for one (the consumer's thread, other
        # processes), and more threads would only take turns (images on 2 busy cores: 81%
        # on a CPU, 0.15 CPU idle; 4 threads 14% slower than 2).
        if busy < WAITING_BUSY:
            # Calls that mostly wait: whatever CPUs a busy machine left idle (they take none
            # while they wait) and whatever GIL share a busy machine's run queue gave them
            # alone (a 2 ms sleep measured with 0.0 CPU idle, or "holding the GIL 52%",
            # stayed at 2 or 3 threads for a second), their first step is an ascent's
            # largest (MAX_FACTOR times the workers), within the threads whose CPU time
            # fills their cores: judged like any step, and undone if it does not pay.
            bound = stage_bound(stage, busy)
            figures.update(bound.figures())
            filling = max(stage.cpu_workers, min(bound.workers, workers * MAX_FACTOR))
        else:
            filling = min(gil_filling(stage, holding),
                          idle_filling(workers, busy, measured.idle_cpus))
        if busy < FILL_BUSY and filling > workers:
            if busy < WAITING_BUSY:
                # Past the CPU workers such calls grow by measured steps; starting them from
                # the fill, judged at once, settles hundreds of threads a step sooner.
                control.ascending, control.factor = True, 4
                rate = min(measured.rate, rate_since(control, stage))
                control.trial = ("grow", workers, rate, self._ticks + ASCENT_TRIAL_TICKS)
            why = (f"they wait: {filling} threads are an ascent's first step"
                   if busy < WAITING_BUSY else
                   f"and each alone held the GIL {holding:.0%} of its time: {filling} threads "
                   "fill the CPUs they leave idle")
            self._set(stage, control, filling, f"its calls, running {workers} at once, were "
                      f"on a CPU {busy:.0%} of their time, {why}", figures)
            return True
        return False
