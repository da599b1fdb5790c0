"""How the tuner judges a change on trial: kept when the rate it measured says so, undone
otherwise (see benchmarks/RESULTS-autotune.md for the rules and their figures)."""

from __future__ import annotations

from feedline.autotune.control import Control, Deciding, workers_text
from feedline.autotune.rules import (
    EXPLORE_TICKS,
    GAIN,
    LINEAR_SCALING,
    MAX_EXPLORE_BACKOFF,
    MAX_FACTOR,
    PAUSE_TICKS,
    SCALING,
    WAITS_TO_GROW,
)
from feedline.autotune.stage import TunableStage, gil_filling
from feedline.profiling.model import StageWindow


class Trials:
    """The tuner's judging of its changes (a part of :class:`~feedline.autotune.tuner.Tuner`)."""

    def _judge_trial(self: Deciding, control: Control, stage: TunableStage,
                     window: StageWindow, figures: dict[str, float]) -> bool:
        """Judge the change on trial once it is due (kept, or undone); whether the other
        rules may act at this look too (a grow was kept: the next step of an ascent, or a
        trim of what the step overshot)."""
        assert control.trial is not None
        kind, previous, rate_before, due = control.trial
        if self._ticks < due:
            return False
        control.trial = None
        rate, waited, workers = window.rate, window.waited, window.workers
        figures["rate_before"] = rate_before
        if kind == "grow":
            kept = Trials._judge_grow(self, stage, control, previous, workers, rate,
                                      rate_before, waited, figures)
            if kept:
                figures.pop("rate_before")
            return kept
        if kind == "trim" and waited > WAITS_TO_GROW and rate < rate_before / GAIN:
            self._set(stage, control, previous,
                      f"fewer workers left its consumer waiting {waited:.0%} of calls and "
                      f"the rate fell ({rate:,.0f} vs {rate_before:,.0f} elements/s)",
                      figures)
            control.paused_until = self._ticks + PAUSE_TICKS
        elif kind == "explore" and rate < rate_before / GAIN:
            self._set(stage, control, previous,
                      f"fewer workers were slower ({rate:,.0f} vs {rate_before:,.0f} "
                      "elements/s)", figures)
            if control.descending:
                # Neither more nor fewer: this is its setting, until the pause ends.
                control.descending = False
                control.paused_until = self._ticks + control.grow_pause
            # Each try costs a second at the slower setting: try less often while
            # trying keeps failing.
            control.explore_every = min(control.explore_every * 2,
                                        EXPLORE_TICKS * MAX_EXPLORE_BACKOFF)
            control.explore_at = self._ticks + control.explore_every
        elif kind == "serial" and rate < rate_before / GAIN:
            Trials._undo_serial(self, stage, control, previous, rate, rate_before, figures)
        elif kind == "explore":
            control.explore_every = EXPLORE_TICKS
            control.descending = control.descending and workers > 1
            self._note(control, f"{workers_text(workers)} {'was' if workers == 1 else 'were'} "
                                f"as fast as {previous} ({rate:,.0f} vs {rate_before:,.0f} "
                                "elements/s): kept", figures)
        return False

    def _judge_grow(self: Deciding, stage: TunableStage, control: Control, previous: int,
                    workers: int, rate: float, rate_before: float, waited: float,
                    figures: dict[str, float]) -> bool:
        """Keep or undo a grow from ``previous`` to ``workers`` on the rate each measured
        (``waited``: share of the consumer's calls that waited since the grow); whether it
        was kept (the other rules may then act at once: the next step of an ascent, or a
        trim of what the last step overshot)."""
        rise = workers / max(previous, 1) - 1
        gain = rate / max(rate_before, 1e-9) - 1
        step = workers - previous
        if gain < GAIN - 1:
            if waited < WAITS_TO_GROW and rate >= rate_before / GAIN:
                # As fast, and its consumer hardly waited for it since: the consumer (or
                # the machine) set the rate, which says nothing of the workers. They stay;
                # those its tasks do not keep busy are trimmed later.
                control.ascending, control.factor = True, 2
                return False
            self._set(stage, control, previous,
                      f"{'one more worker' if step == 1 else f'{step} more workers'} did not "
                      f"help ({rate:,.0f} vs {rate_before:,.0f} elements/s, its consumer "
                      f"waiting for {waited:.0%} of calls)", figures)
            if control.ascending and control.factor > 2:
                # The step overshot: one half as large, from where it was, next.
                control.factor //= 2
                return False
            control.ascending, control.factor = False, 2
            # Its consumer waits for it, yet more workers did not help: fewer may do as
            # well (calls that wait for each other: the GIL); tried after the pause.
            control.descending = previous > 1
            # Each try costs a second at the slower setting: try less often while trying
            # keeps failing.
            control.paused_until = self._ticks + control.grow_pause
            control.grow_pause = min(control.grow_pause * 2, PAUSE_TICKS * MAX_EXPLORE_BACKOFF)
            return False
        control.grow_pause = PAUSE_TICKS
        control.descending = False
        if gain < SCALING * rise:
            # Kept (faster), but past the knee: finer steps from here.
            control.ascending, control.factor = False, 2
        else:
            if gain >= LINEAR_SCALING * rise and control.ascending:
                control.factor = min(control.factor * 2, MAX_FACTOR)
            control.ascending = True
        return True

    def _undo_serial(self: Deciding, stage: TunableStage, control: Control, previous: int, rate: float,
                     rate_before: float, figures: dict[str, float]) -> None:
        """One worker was slower than ``previous`` measured: the calls do not serialize.
        How the rate scaled says how much of a call holds the GIL, and so how many threads
        fill it (a busy machine, or a batching thread hungry for the CPUs, measured images
        as serialized in one warm run in four; going back to two workers and growing one
        at a time from there cost a whole run)."""
        speedup = rate_before / max(rate, 1e-9)
        # Amdahl over the GIL: ``previous`` workers run ``previous / (1 + share *
        # (previous - 1))`` times as fast as one.
        share = min(1.0, max(0.0, (previous / speedup - 1) / (previous - 1)))
        measured = stage.measured_calls
        busy_alone = measured.busy_alone if measured is not None else 1.0
        # ``previous`` workers ran clearly more than ``previous`` times as fast as one:
        # something other than the GIL slowed the one (running inline, a machine busy
        # meanwhile), and the scaling says nothing of the GIL: back to what was measured,
        # the grow rule goes on from there (chess, 2.6x: a fill target of every CPU worker,
        # 4, ran 15% slower than 2).
        superlinear = speedup > previous * GAIN
        target = previous if superlinear else max(previous, gil_filling(stage, share * busy_alone))
        scaling = (f"{speedup:.1f}x as fast as one, more than {previous} workers can: "
                   f"something else slowed the one; back to {previous}" if superlinear else
                   f"{speedup:.1f}x as fast as one, so its calls hold the GIL about {share:.0%} "
                   f"of their time: {target} threads")
        self._set(stage, control, target,
                  f"one worker was slower ({rate:,.0f} elements/s) than {previous} measured "
                  f"({rate_before:,.0f}): the measurement misled (a busy machine, the first "
                  f"calls' set-up); {previous} ran {scaling}", {**figures, "gil_share": share})
