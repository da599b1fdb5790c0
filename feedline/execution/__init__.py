"""Where work runs: executors, the one read-ahead mechanism, positions, clean shutdown.

* :mod:`~feedline.execution.executor`: daemon thread pools whose shutdown waits a bounded
  time, and strands that serialize readers on a shared pool (process pools, and every
  decision to leave this process's threads, are :mod:`feedline.placement`'s);
* :mod:`~feedline.execution.read_ahead`: :class:`~feedline.execution.read_ahead.ReadAhead`,
  the bounded window of tasks every read-ahead stage (prefetch, parallel map and batch,
  interleave) runs on, and the :class:`~feedline.execution.read_ahead.SequentialReader`
  built on it;
* :mod:`~feedline.execution.positions`: checkpoints of read-ahead stages as positions in
  their input, never copies of the elements read ahead;
* :mod:`~feedline.execution.map_knobs`, :mod:`~feedline.execution.stage_knobs` and
  :mod:`~feedline.execution.buffer_tuning`: the setters and counters a tuned stage owns, which
  the tuner (:mod:`feedline.autotune`, above) turns and reads.

Transformations ask for these and never start threads themselves, so a process-based
executor (:mod:`feedline.placement.process_executor`) can replace the thread one without
touching them.
"""
