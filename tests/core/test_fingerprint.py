"""PipelineFingerprint: digests pinned (saved checkpoints must keep loading), each node
described once, readable text built only when it is read."""

import json
import pickle

import numpy as np
import pytest

import feedline as fl
from feedline.core import fingerprint, pipeline_state
from feedline.core.fingerprint import PipelineFingerprint, declared_types


def _concatenation(n):
    ds = fl.Dataset.range(1)
    for i in range(1, n):
        ds = ds.concatenate(fl.Dataset.range(i, i + 1))
    return ds


def _pinned_pipelines():
    shared = fl.Dataset.range(10)
    return {
        "chain": fl.Dataset.range(100).shuffle(10, seed=3).batch(4).prefetch(2),
        "zip": fl.Dataset.zip(fl.Dataset.range(10), fl.Dataset.range(10).skip(2)).take(7)
        .repeat(2),
        "concatenate": _concatenation(50),
        "diamond": fl.Dataset.zip(shared, shared.skip(1)).batch(2),
        "seed": fl.Dataset.range(10).shuffle(4).with_options(fl.Options(seed=7)),
        "slices": fl.Dataset.from_tensor_slices(
            {"a": np.arange(6).reshape(3, 2), "b": [b"x", b"y", b"z"]}),
    }


# Digests computed by feedline before the single-description walker (commit c3e5a05).
# Function-free pipelines only: a function's digest covers its bytecode, which changes with
# the Python version.
PINNED = {
    "chain": "b11812f8d2fe55bd",
    "zip": "81911566cc569680",
    "concatenate": "f23496127f912687",
    "diamond": "2025cdb318611fce",
    "seed": "d7d58c06aab71487",
    "slices": "55f30a1cd6ba3baf",
}

# A state sealed by that version (its root is synthetic: stage states are not pinned here).
SEALED = json.loads(
    '{"feedline_iterator": 2, "pipeline": {"digest": "5776bc7e9c7be6dc", "stages": '
    '[["RangeDataset(dtype=dtype(\'int64\'), range=range(0, 10))", "68037aa1e4a2d0bd"], '
    '["ShuffleDataset(buffer_size=4, reshuffle_each_iteration=True, seed=1)", '
    '"5cee9a019643187f"], ["BatchDataset(batch_size=2, drop_remainder=False)", '
    '"5776bc7e9c7be6dc"]]}, "root": {"position": 1, "buffer": [{"b": "AAE="}]}, '
    '"checksum": "crc32c:f6002f44"}')


@pytest.mark.parametrize("name", sorted(PINNED))
def test_digests_are_those_saved_checkpoints_carry(name):
    digest = PipelineFingerprint.of(_pinned_pipelines()[name]).digest
    assert digest == PINNED[name], (
        f"the fingerprint of {name!r} changed: checkpoints and cache files written before no "
        "longer load; if that is intended, update PINNED and say so in the commit")


def test_a_state_sealed_by_an_earlier_version_still_opens():
    fp = PipelineFingerprint.of(fl.Dataset.range(10).shuffle(4, seed=1).batch(2))
    assert pipeline_state.open_sealed(SEALED, fp) == {"position": 1, "buffer": [{"b": "AAE="}]}
    assert pipeline_state.seal(SEALED["root"], fp) == SEALED


def test_each_node_is_described_once(monkeypatch):
    described = []
    original = fingerprint._Walker._stage

    def counting(self, node):
        if id(node) not in self._stage_digests:
            described.append(id(node))
        return original(self, node)

    monkeypatch.setattr(fingerprint._Walker, "_stage", counting)
    chain = fl.Dataset.range(3)
    for i in range(300):  # was described 300 * 301 / 2 times
        chain = chain.map(lambda x, i=i: x + i)
    PipelineFingerprint.of(chain)
    assert len(described) == len(set(described)) == 301
    described.clear()
    PipelineFingerprint.of(_concatenation(1000))
    assert len(described) == len(set(described)) == 1001


def test_readable_text_is_built_only_when_read(monkeypatch):
    built = []
    original = fingerprint._readable
    monkeypatch.setattr(fingerprint, "_readable",
                        lambda node, arguments: built.append(node) or original(node, arguments))
    ds = _concatenation(100)
    fp = PipelineFingerprint.of(ds)
    declared_types(ds)
    assert fp.first_difference(PipelineFingerprint.of(ds)) is None
    assert built == []
    other = PipelineFingerprint.of(fl.Dataset.range(5).concatenate(fl.Dataset.range(7)))
    assert "stage 1 differs" in fp.first_difference(other)
    assert len(built) == 2  # the differing stage of each side
    assert fp.to_json()["stages"][0] == ["RangeDataset(dtype=dtype('int64'), range=range(0, 1))",
                                         fp.stages[0].digest]
    fp.to_json()
    assert len(built) == 2 + 100  # each text once, then kept


def test_a_fingerprint_pickles_and_compares_as_text():
    fp = PipelineFingerprint.of(fl.Dataset.range(4).map(lambda x: x + 1).batch(2))
    restored = pickle.loads(pickle.dumps(fp))
    assert restored == fp and restored.digest == fp.digest
    assert PipelineFingerprint.from_json(json.loads(json.dumps(fp.to_json()))) == fp


def test_a_dataset_a_function_refers_to_counts_by_its_whole_graph():
    inner = fl.Dataset.range(5)
    first = PipelineFingerprint.of(fl.Dataset.range(3).flat_map(lambda x: inner.take(x)))
    inner = fl.Dataset.range(6)
    second = PipelineFingerprint.of(fl.Dataset.range(3).flat_map(lambda x: inner.take(x)))
    assert "stage 2 differs" in second.first_difference(first)


def test_library_functions_count_by_name_and_user_functions_by_code():
    import json as json_module

    from feedline.formats.example import api

    def parse(batch):
        return api.parse_example(batch, {})

    assert fingerprint._is_library_function(api.parse_example)
    assert fingerprint._is_library_function(json_module.dumps)
    assert not fingerprint._is_library_function(parse)
    # The user's function counts by code, the library function it calls by name only.
    before = PipelineFingerprint.of(fl.Dataset.range(2).map(parse)).digest
    code = api.parse_example.__code__
    try:
        api.parse_example.__code__ = (lambda serialized, features, example_names=None:
                                      None).__code__
        assert PipelineFingerprint.of(fl.Dataset.range(2).map(parse)).digest == before
    finally:
        api.parse_example.__code__ = code

    def parse_other(batch):
        return api.parse_example(batch, {"x": 1})

    assert PipelineFingerprint.of(fl.Dataset.range(2).map(parse_other)).digest != before


def test_readable_stages_hold_no_memory_addresses():
    ds = fl.Dataset.zip((fl.Dataset.range(3), {"a": fl.Dataset.range(2)}))
    stages = PipelineFingerprint.of(ds).to_json()["stages"]
    assert stages[-1][0] == "ZipDataset(structure=(<RangeDataset>, {'a': <RangeDataset>}))"
    assert "0x" not in json.dumps(stages)
