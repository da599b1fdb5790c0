"""AUTOTUNE: the tuner of every knob a pipeline exposes, from what the stages measure.

* :mod:`~feedline.autotune.tuner`: one :class:`~feedline.autotune.tuner.Tuner` per pipeline,
  on a thread of its own, sets the parallelism of each tuned stage from its counters, within
  the CPU and RAM budgets, and records every change with its reason and figures
  (``statistics().tuning``, the ``feedline.autotune`` logger);
* :mod:`~feedline.autotune.stage`: what a stage offers it (its ``TunableStage``) and how far
  it may grow;
* :mod:`~feedline.autotune.status`: the optional live status line.

The knobs it turns are the stages' own and live beside them, below the tuner:
:mod:`feedline.execution.map_knobs` (a parallel ``map``'s setting, bounds, counters, element
sizes and measured calls), :mod:`feedline.execution.stage_knobs` (the same for ``batch`` and
``interleave`` with ``num_parallel_calls=AUTOTUNE``) and :mod:`feedline.execution.buffer_tuning`
(the rule of ``prefetch(AUTOTUNE)``'s buffer, run on the consumer's calls and recorded with
the same tuner).

Where stages run (threads, a map's worker processes, a whole pipeline in processes) is the
placement policy's decision (:mod:`feedline.placement.policy`), which the tuner's records
and the live status report beside its own.
"""
