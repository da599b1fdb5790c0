"""One module per system under test; each builds every workload's pipeline two ways.

A system module provides ``prepare(spec)`` (imports, done before the clock starts),
``build(spec)`` (the pipeline, as an iterable of batches), ``cleanup(iterable, iterator)``
and ``notes(spec)`` (a short description of the choices made, e.g. worker counts).
The code of each pipeline is what ``benchmarks/README.md`` documents.
"""

from __future__ import annotations

# System name -> (module under benchmarks.systems, its variants).
SYSTEMS: dict[str, tuple[str, tuple[str, ...]]] = {
    "feedline": ("feedline_sys", ("recommended", "processes", "batched")),
    "tf": ("tf_sys", ("expert", "naive", "fused")),
    "torch": ("torch_sys", ("expert", "naive", "torchvision")),
    "grain": ("grain_sys", ("expert", "naive", "pil")),
}
IMAGE_WORKLOADS = ("images", "images_tfrecord")

# Variants that exist for some workloads only: (system, variant) -> those workloads.
ONLY_FOR: dict[tuple[str, str], tuple[str, ...]] = {
    # The whole pipeline in worker processes (Dataset.multiprocess): chess and images.
    ("feedline", "processes"): ("chess", *IMAGE_WORKLOADS),
    # Batch the paths or encoded records first, then decode + augment whole batches with
    # feedline.image's batch forms.
    ("feedline", "batched"): IMAGE_WORKLOADS,
    # tf.io.decode_and_crop_jpeg: decode only the crop's rows (TF's ImageNet preprocessing).
    ("tf", "fused"): IMAGE_WORKLOADS,
    # Each peer's own image path: torchvision.io.decode_jpeg + transforms.v2 in DataLoader
    # workers; Grain's documented one (a Map transform decoding with PIL, NumPy augment).
    ("torch", "torchvision"): IMAGE_WORKLOADS,
    ("grain", "pil"): IMAGE_WORKLOADS,
}
# Extra image paths, measured in the timed rounds of their workloads only (``feed`` and
# ``sweep`` keep each system's expert pipeline, so their run time does not grow).
EXTRA_VARIANTS: set[tuple[str, str]] = {("feedline", "batched"), ("tf", "fused"),
                                        ("torch", "torchvision"), ("grain", "pil")}
# Variants that ``--no-feedline-processes`` leaves out.
SWITCHABLE: set[tuple[str, str]] = {("feedline", "processes")}
# Variants with a worker-process count (``spec.extra["workers"]``): tuned before the timed
# rounds and swept by ``./dev bench sweep``, for these workloads.
WORKER_COUNTED: dict[tuple[str, str], tuple[str, ...]] = {
    ("torch", "expert"): ("chess", *IMAGE_WORKLOADS, "python_heavy"),
    ("grain", "expert"): ("chess", *IMAGE_WORKLOADS, "python_heavy"),
    ("torch", "torchvision"): IMAGE_WORKLOADS,
    ("grain", "pil"): IMAGE_WORKLOADS,
    ("feedline", "processes"): ("chess", *IMAGE_WORKLOADS),
}
