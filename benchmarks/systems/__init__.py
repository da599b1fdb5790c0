"""One module per system under test; each builds every workload's pipeline two ways.

A system module provides ``prepare(spec)`` (imports, done before the clock starts),
``build(spec)`` (the pipeline, as an iterable of batches), ``cleanup(iterable, iterator)``
and ``notes(spec)`` (a short description of the choices made, e.g. worker counts).
The code of each pipeline is what ``benchmarks/README.md`` documents.
"""

from __future__ import annotations

# System name -> (module under benchmarks.systems, its variants).
SYSTEMS: dict[str, tuple[str, tuple[str, ...]]] = {
    "feedline": ("feedline_sys", ("recommended", "processes")),
    "tf": ("tf_sys", ("expert", "naive")),
    "torch": ("torch_sys", ("expert", "naive")),
    "grain": ("grain_sys", ("expert", "naive")),
}

# Variants that exist for some workloads only: (system, variant) -> those workloads.
ONLY_FOR: dict[tuple[str, str], tuple[str, ...]] = {
    # The whole pipeline in worker processes (Dataset.multiprocess): chess and images.
    ("feedline", "processes"): ("chess", "images"),
}
# Variants that ``--no-feedline-processes`` leaves out.
SWITCHABLE: set[tuple[str, str]] = {("feedline", "processes")}
# Variants with a worker-process count (``spec.extra["workers"]``): tuned before the timed
# rounds and swept by ``./dev bench sweep``, for these workloads.
WORKER_COUNTED: dict[tuple[str, str], tuple[str, ...]] = {
    ("torch", "expert"): ("chess", "images", "python_heavy"),
    ("grain", "expert"): ("chess", "images", "python_heavy"),
    ("feedline", "processes"): ("chess", "images"),
}
