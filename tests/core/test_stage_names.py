"""Stage digests name feedline's operations, not their modules: a class moved to another
module keeps every digest, and so every checkpoint, cache and snapshot written before."""

from __future__ import annotations

import importlib
import pkgutil
import sys

import feedline as fl
from feedline.core.dataset import Dataset
from feedline.core.fingerprint import PipelineFingerprint
from feedline.core.stage_names import DIGESTED_IN, stage_name
from feedline.transforms.shuffle import ShuffleDataset


def _moved(cls: type, module: str, name: str | None = None) -> type:
    """``cls`` as if its code lived in ``module`` (and were called ``name``)."""
    return type(name or cls.__name__, (cls,), {"__module__": module})


def _with_class(node: Dataset, cls: type) -> Dataset:
    node.__class__ = cls
    return node


def _feedline_operations() -> list[type]:
    for module in pkgutil.walk_packages(fl.__path__, "feedline."):
        importlib.import_module(module.name)
    found: list[type] = []
    pending = [Dataset]
    while pending:
        for sub in pending.pop().__subclasses__():
            if sub not in found:
                found.append(sub)
                pending.append(sub)
    # Only classes their module defines: the stand-ins the tests above make are left out.
    return [cls for cls in found if cls.__module__.startswith("feedline.")
            and getattr(sys.modules.get(cls.__module__), cls.__qualname__, None) is cls]


def test_a_moved_class_keeps_its_stage_digest():
    here = fl.Dataset.range(10).shuffle(4, seed=1)
    moved = _with_class(fl.Dataset.range(10).shuffle(4, seed=1),
                        _moved(ShuffleDataset, "feedline.execution.somewhere_else"))

    assert PipelineFingerprint.of(moved).digest == PipelineFingerprint.of(here).digest


def test_a_state_saved_before_a_move_restores_after_it():
    saved = iter(fl.Dataset.range(10).shuffle(4, seed=1))
    taken = [int(next(saved)) for _ in range(3)]
    state = saved.state_dict()
    moved = _with_class(fl.Dataset.range(10).shuffle(4, seed=1),
                        _moved(ShuffleDataset, "feedline.transforms.reordered"))

    restored = iter(moved)
    restored.load_state_dict(state)

    whole = [int(x) for x in fl.Dataset.range(10).shuffle(4, seed=1)]
    assert taken + [int(x) for x in restored] == whole


def test_existing_operations_keep_the_module_they_were_digested_in():
    assert stage_name(ShuffleDataset) == "feedline.transforms.shuffle:ShuffleDataset"
    # Moved from transforms/ to placement/ before digests named operations.
    from feedline.placement.multiprocess import MultiprocessDataset

    assert stage_name(MultiprocessDataset) == \
        "feedline.transforms.multiprocess:MultiprocessDataset"


def test_a_new_operation_is_named_by_its_operation_alone():
    new = _moved(ShuffleDataset, "feedline.transforms.fresh", "FreshShuffleDataset")
    elsewhere = _moved(ShuffleDataset, "feedline.execution.fresh", "FreshShuffleDataset")

    assert stage_name(new) == stage_name(elsewhere) == "FreshShuffleDataset"


def test_a_renamed_class_keeps_the_operation_name_it_declares():
    renamed = type("ReshuffleDataset", (ShuffleDataset,), {
        "__module__": "feedline.transforms.reshuffle", "OPERATION_NAME": "ShuffleDataset"})

    assert stage_name(renamed) == "feedline.transforms.shuffle:ShuffleDataset"


def test_a_users_class_is_named_by_module_and_qualname():
    mine = _moved(ShuffleDataset, "my_project.pipelines")

    assert stage_name(mine) == "my_project.pipelines:ShuffleDataset"


def test_every_feedline_operation_has_a_name_of_its_own():
    names = [stage_name(cls) for cls in _feedline_operations()]

    assert len(names) == len(set(names))


def test_every_listed_operation_exists():
    operations = {cls.__dict__.get("OPERATION_NAME") or cls.__qualname__
                  for cls in _feedline_operations()} | {"Dataset"}

    assert sorted(set(DIGESTED_IN) - operations) == []
