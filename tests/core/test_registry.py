"""Dataset's fluent methods build the operations that attach themselves (core.registry)."""

from __future__ import annotations

import ast
import inspect
import textwrap

import pytest

import feedline as fl
from feedline.core import registry
from feedline.core.dataset import Dataset


def _built_by_methods() -> dict[str, str]:
    """``{method: the name it builds}`` for each Dataset method whose body calls ``build``."""
    tree = ast.parse(textwrap.dedent(inspect.getsource(Dataset)))
    built = {}
    for method in tree.body[0].body:
        if not isinstance(method, ast.FunctionDef):
            continue
        for node in ast.walk(method):
            if (isinstance(node, ast.Call) and isinstance(node.func, ast.Name)
                    and node.func.id == "build"):
                built[method.name] = node.args[0].value
    return built


def test_every_method_builds_the_operation_of_its_own_name_and_it_is_attached():
    built = _built_by_methods()
    assert len(built) == 53  # 52 operations and element_spec's inference
    assert {method: name for method, name in built.items() if method != name} == {}
    assert sorted(set(built) - set(registry._BUILDERS)) == []


def test_methods_build_the_operation_classes_of_their_modules():
    from feedline.distribute.distribute import distribute
    from feedline.placement.multiprocess import MultiprocessDataset
    from feedline.sources.sample import ChooseFromDatasetsDataset, SampleFromDatasetsDataset
    from feedline.transforms.map import MapDataset

    assert registry._BUILDERS["map"] is MapDataset
    assert registry._BUILDERS["sample_from_datasets"] is SampleFromDatasetsDataset
    assert registry._BUILDERS["choose_from_datasets"] is ChooseFromDatasetsDataset
    assert registry._BUILDERS["multiprocess"] is MultiprocessDataset
    assert registry._BUILDERS["distribute"] is distribute
    assert type(fl.Dataset.range(3).map(abs, num_parallel_calls=2)) is MapDataset
    assert repr(fl.Dataset.range(3).take(2)) == "<feedline.Dataset range(0, 3).take(2)>"


def test_a_method_whose_operation_is_not_attached_says_so(monkeypatch):
    monkeypatch.delitem(registry._BUILDERS, "shuffle")
    with pytest.raises(RuntimeError, match=r"^Dataset\.shuffle: no operation is registered"):
        fl.Dataset.range(3).shuffle(3)


def test_a_second_module_cannot_claim_a_method(monkeypatch):
    monkeypatch.setitem(registry._BUILDERS, "doc_claimed", registry._BUILDERS["map"])

    def impostor() -> None:
        pass

    with pytest.raises(ValueError, match="Dataset.doc_claimed is built by "
                                         "feedline.transforms.map.MapDataset already"):
        registry.operation("doc_claimed")(impostor)


def test_the_same_definition_registered_again_replaces_itself(monkeypatch):
    monkeypatch.setitem(registry._BUILDERS, "doc_again", registry._BUILDERS["map"])
    assert registry.operation("doc_again")(registry._BUILDERS["map"]) is registry._BUILDERS["map"]


def test_help_still_shows_each_methods_own_documentation():
    assert Dataset.map.__module__ == "feedline.core.dataset"
    assert Dataset.map.__doc__.startswith("Apply ``map_func`` to every element")
    assert "num_parallel_calls" in inspect.signature(Dataset.map).parameters
