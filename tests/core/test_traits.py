"""Every operation declares its traits (feedline/core/traits.py): the planners ask the
operation, and a new operation cannot fall silently into the slowest sharding policy."""

from __future__ import annotations

import importlib
import pkgutil

import pytest

import feedline as fl
from feedline.core.dataset import Dataset
from feedline.core.traits import POSITIONAL
from feedline.core.unary import UnaryDataset
from feedline.distribute.autoshard import plan_sharding


def _feedline_dataset_classes() -> list[type[Dataset]]:
    for module in pkgutil.walk_packages(fl.__path__, "feedline."):
        importlib.import_module(module.name)
    found, stack = [], [Dataset]
    while stack:
        cls = stack.pop()
        for sub in cls.__subclasses__():
            if sub.__module__.startswith("feedline."):
                found.append(sub)
            stack.append(sub)
    return found


def test_every_feedline_operation_declares_its_traits():
    classes = _feedline_dataset_classes()
    assert len(classes) > 50
    undeclared = []
    for cls in classes:
        owner = next(c for c in cls.__mro__ if "TRAITS" in c.__dict__)
        if owner is Dataset and cls is not UnaryDataset:  # the base of one-input stages
            undeclared.append(f"{cls.__module__}.{cls.__qualname__}")
    assert undeclared == []


def test_a_user_operation_without_traits_is_positional_and_shards_at_the_output():
    class Doubling(Dataset):  # no TRAITS: taken as depending on positions
        def __init__(self, inner: Dataset) -> None:
            super().__init__([inner])

        def _make_iterator(self, ctx):
            return self._inputs[0].map(lambda x: 2 * x)._make_iterator(ctx)

        def _element_spec(self):
            return self._inputs[0].element_spec

    node = Doubling(fl.Dataset.range(8))
    assert node.traits() is POSITIONAL
    assert plan_sharding(node.batch(2), 2).policy == "output"


@pytest.mark.parametrize(("make", "elements", "policy"), [
    (lambda: fl.Dataset.range(8).map(lambda x: x), "one_to_one", "data"),
    (lambda: fl.Dataset.range(8).filter(lambda x: x > 2), "independent", "data"),
    (lambda: fl.Dataset.range(8).batch(2), "independent", "batch"),
    (lambda: fl.Dataset.range(8).take(3), "positional", "output"),
])
def test_the_planner_follows_the_declared_traits(make, elements, policy):
    ds = make()
    assert ds.traits().elements == elements
    assert plan_sharding(ds, 2).policy == policy
