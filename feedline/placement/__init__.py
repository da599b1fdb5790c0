"""Placement: where each stage of a pipeline runs, and the process machinery that runs it.

A stage runs on this process's threads (:mod:`feedline.execution`), or its calls in a pool of
worker processes, or the whole pipeline runs in worker processes; the choice is measured and
never changes the result. Everything that decides or runs a placement is here:

* :mod:`~feedline.placement.policy`: **the one placement decision**: every threshold and rule
  that moves work off this process's threads, for a ``map``'s calls and for a whole pipeline,
  and the records that report it (:class:`~feedline.placement.policy.ExecutorDecision`,
  :class:`~feedline.placement.policy.ProcessDecision`);
* :mod:`~feedline.placement.map_executor`: measures an ``AUTOTUNE`` map's first calls (how much
  the GIL holds them back) and switches its executor;
* :mod:`~feedline.placement.process_executor`: a map's calls in worker processes;
* :mod:`~feedline.placement.multiprocess`: the ``multiprocess`` operation, the parent side of
  whole-pipeline workers; :mod:`~feedline.placement.worker_loop`: their worker side;
* :mod:`~feedline.placement.auto`: ``AUTOTUNE``'s trial of a whole pipeline on threads before
  it is moved (or not) into worker processes;
* :mod:`~feedline.placement.ipc`: the pure transport underneath: starting and watching worker
  interpreters, and the channel whose arrays travel through shared memory.

Layering: ``policy``, ``map_executor``, ``process_executor`` and ``ipc`` sit under the
transformations (``map`` asks them); ``multiprocess``, ``worker_loop`` and ``auto`` run whole
pipelines and sit above them (with :mod:`feedline.distribute.autoshard`, the sharding plan
they share with data-parallel training). Checkpoints are positions
(:mod:`feedline.execution.positions`), not placements: a state restores under any of them.
"""
