"""The figures of the tuner's rules: what each one is, and the measurement behind it.

The rules themselves are in :mod:`feedline.autotune.tuner` (and benchmarks/RESULTS-autotune.md).
"""

from __future__ import annotations

# SERIAL_GIL_SHARE, the share from which calls count as holding the GIL, is placement's
# inline rule's as well as the tuner's start's: placement.policy owns it.

PERIOD = 0.25
"""Seconds between two looks at the stages."""

HEADROOM = 1.3
"""Workers kept per core of measured work when trimming; threads per GIL of measured GIL
time when starting from the executor choice's measurement."""

GAIN = 1.03
"""Workers added are kept when the stage's rate rises at least this much; fewer are kept
unless it falls by more."""

WAITS_TO_GROW = 0.15
"""Share of the consumer's ``next()`` calls that waited above which the stage grows."""

PAUSE_TICKS = 12
"""Looks without changing a stage after a change of it was undone."""

TRIAL_TICKS = 4
"""Looks after a change before it is judged (a second: rates are noisy), on the rate since
the change."""

SETTLE_SECONDS = 0.75
"""Seconds a setting runs before the tuner acts on what it measured."""

WINDOW_TICKS = 8
"""Looks a decision is judged over at most (two seconds): enough that a hiccup of a shared
machine does not decide, few enough to follow a workload that changes."""

EXPLORE_TICKS = 40
"""Looks between two tries of one worker fewer (ten seconds)."""

MAX_EXPLORE_BACKOFF = 8
"""The interval between tries of one worker fewer (or one more) doubles while they fail,
up to this many times :data:`EXPLORE_TICKS` (or :data:`PAUSE_TICKS`)."""

INPUT_BOUND = 0.5
"""Share of the time a stage spends pulling its input above which the input, not its
workers, limits it: it does not grow, and it tries one worker fewer even while its
consumer waits."""

BUSY_TO_GROW = 0.6
"""Share of its workers' time a stage must be computing to get one more: idle workers
mean its input, not its work, holds it back."""

RELIABLE_CONCURRENCY = 0.9
"""Calls running at once while measured, per worker of the stage, needed for the tuner to
start from the measurement. Fewer, and the shares mean little: the first calls of a
process (its imports, lazy set-ups) measured images, which release the GIL 70% of the
time, as serialized (1.65 calls at once of 2)."""

SCALING = 0.5
"""Share of a step's rise in workers the rate must rise by for the ascent to go on (twice
the workers: 1.5 times the rate); less, and steps of :data:`FINE_STEP` follow."""

LINEAR_SCALING = 0.8
"""Share of a step's rise in workers from which the rate scaled almost linearly: the next
step of the ascent is twice as large (calls that wait, far from any limit)."""

MAX_FACTOR = 8
"""Largest step of an ascent: this many times the workers."""

FINE_STEP = 8
"""Out of the ascent, workers change by ``workers // FINE_STEP`` (at least one): a step
whose effect on the rate stands out of its noise, whatever the workers."""

ASCENT_TRIAL_TICKS = 3
"""Looks after a step of an ascent before it is judged (half a second on the rate since
the look after it): it is expected to raise the rate by half or more, far above the noise."""

WAIT_HEADROOM = 2.0
"""Workers kept per worker its tasks kept busy at most lately, past its CPU workers, for
calls that wait: a call's wall time grows with the machine's load and the GIL's hand-offs
(a 4 ms sleep took 4.8 ms on a loaded machine, more while the consumer held the GIL), and
a thread that waits for work costs nothing."""

PEAK_TICKS = 40
"""Looks over which a stage of calls that wait is sized for the most workers its tasks
kept busy (ten seconds): its idle threads cost nothing, too few cost the rate whenever
its consumer speeds up again."""

SHARE_FLOOR = 1e-3
"""Least share of their wall time calls are taken to spend on a CPU (a measurement of
zero would give no bound)."""

BOUND_SLACK = 1.125
"""A stage is brought down to its RAM bound once over it by this factor: the elements'
sizes are sampled, and a bound that moves with them must not move the setting each look."""

FILL_BUSY = 0.9
"""Share of their time calls running together spent on a CPU below which the cores they
leave idle are filled with more threads (images on 2 cores: 77%; 4 threads read 20% more
than 2)."""

WAITING_BUSY = 0.25
"""Share of their time calls running together spent on a CPU below which they are calls
that wait (on I/O, a sleep): their fill is the first step of an ascent, judged as one, and
the next step is four times the workers (their measurement showed them overlapping freely,
so each step is expected to scale about linearly)."""
