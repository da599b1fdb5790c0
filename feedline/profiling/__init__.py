"""Seeing where a pipeline spends its time: statistics, the bottleneck, advice, traces.

* :mod:`~feedline.profiling.records`: what is measured and reported (frozen records);
* :mod:`~feedline.profiling.collect`: collecting statistics from a running pipeline;
* :mod:`~feedline.profiling.model`: the pipeline's model (segments, loads, the bottleneck,
  a tuned stage's window), shared by ``fl.profile`` and the AUTOTUNE tuner;
* :mod:`~feedline.profiling.report`: ``fl.profile``, the bottleneck and verified advice;
* :mod:`~feedline.profiling.trace`: Chrome trace-event export;
* :mod:`~feedline.profiling.html`: a self-contained HTML report.
"""
