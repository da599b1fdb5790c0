"""What used to be underscore class flags is asked of the traits: an operation that declares
the trait (and no flag) gets the behaviour, and the flags still spelled in feedline's
operations arrive in their traits."""

from __future__ import annotations

import importlib
import pkgutil
from dataclasses import replace

import feedline as fl
from feedline.core.fingerprint import PipelineFingerprint
from feedline.core.random_access import random_access_blocker
from feedline.core.traits import (
    LEGACY_FLAGS,
    ONE_TO_ONE,
    POSITIONAL,
    OperationTraits,
    with_legacy_flags,
)
from feedline.core.unary import UnaryDataset
from feedline.optimize.graph import rewrite_graph


class _Declares(UnaryDataset):
    """Passes its input through; says what it is by its traits alone."""

    def __init__(self, input_dataset: fl.Dataset, traits: OperationTraits) -> None:
        super().__init__(input_dataset)
        self._traits = traits

    def traits(self) -> OperationTraits:
        return self._traits

    def _make_iterator(self, ctx):
        return self._inputs[0]._make_iterator(ctx)


def test_random_access_from_input_is_asked_of_the_traits():
    blocked = fl.Dataset.range(5).filter(lambda x: x > 1)
    node = _Declares(blocked, replace(ONE_TO_ONE, random_access_from_input=True))

    assert random_access_blocker(node) is blocked


def test_an_execution_only_stage_is_left_out_of_fingerprints():
    node = _Declares(fl.Dataset.range(3), replace(ONE_TO_ONE, execution_only=True))

    assert PipelineFingerprint.of(node).digest == PipelineFingerprint.of(fl.Dataset.range(3)).digest


def test_graph_rewrites_leave_the_input_of_a_stage_that_keeps_it_as_written():
    below = fl.Dataset.range(3).map(lambda x: x)
    node = _Declares(below, replace(ONE_TO_ONE, keeps_input_as_written=True))
    replaced = fl.Dataset.range(3)

    rewritten = rewrite_graph(node, lambda n, rewrite: replaced if n is below else None)

    assert rewritten is node


def test_feedline_operations_that_spell_a_flag_have_the_trait():
    assert fl.Dataset.range(3).prefetch(1).traits().execution_only
    assert fl.Dataset.range(3).with_options(fl.Options()).traits().execution_only
    assert fl.Dataset.range(3).map(abs).traits().random_access_from_input
    assert fl.Dataset.range(3).global_shuffle(seed=1).traits().keeps_input_as_written
    assert fl.Dataset.range(3).global_shuffle(seed=1).traits().permutes_by_index
    assert fl.Dataset.range(3).take(2).traits().random_access_from_input
    assert not fl.Dataset.range(3).map(abs).traits().execution_only


def test_a_legacy_flag_sets_its_trait():
    class Old:
        _RANDOM_ACCESS_FROM_INPUT = True

    assert with_legacy_flags(Old, ONE_TO_ONE) == replace(ONE_TO_ONE, random_access_from_input=True)
    assert with_legacy_flags(object, ONE_TO_ONE) is ONE_TO_ONE


class _RandomAccess(_Declares):
    def _offers_random_access(self) -> bool:
        return self._inputs[0]._offers_random_access()


def test_the_index_sharding_policy_asks_for_a_permutation_by_its_trait():
    from feedline.distribute.autoshard import plan_sharding

    permutes = replace(POSITIONAL, random_access_from_input=True, permutes_by_index=True)
    plain = replace(POSITIONAL, random_access_from_input=True)

    assert plan_sharding(_RandomAccess(fl.Dataset.range(8), permutes).map(abs), 2).policy == "index"
    assert plan_sharding(_RandomAccess(fl.Dataset.range(8), plain).map(abs), 2).policy == "output"
    assert plan_sharding(fl.Dataset.range(8).global_shuffle(seed=1), 2).policy == "index"


def test_only_the_operations_of_another_branch_still_spell_a_legacy_flag():
    for module in pkgutil.walk_packages(fl.__path__, "feedline."):
        importlib.import_module(module.name)
    classes, stack = set(), [fl.Dataset]
    while stack:
        for sub in stack.pop().__subclasses__():
            if sub.__module__.startswith("feedline.") and sub not in classes:
                classes.add(sub)
                stack.append(sub)

    spelled = sorted(cls.__name__ for cls in classes
                     if any(flag in vars(cls) for flag in LEGACY_FLAGS))

    # map.py and batch.py are being rewritten elsewhere (issue 40's one parallel stage).
    assert spelled == ["BatchDataset", "MapDataset"]
