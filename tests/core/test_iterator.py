import gc
import json
import subprocess
import sys
import textwrap

import numpy as np
import pytest

import feedline as fl
from feedline.testing import no_leaked_threads


def test_iterating_twice_starts_over():
    ds = fl.Dataset.range(3)
    assert [int(x) for x in ds] == [int(x) for x in ds] == [0, 1, 2]


def test_len_and_cardinality():
    assert len(fl.Dataset.range(4).batch(3)) == 2
    with pytest.raises(TypeError, match="infinite"):
        len(fl.Dataset.range(4).repeat())


def test_element_spec_from_first_element_and_empty_dataset():
    ds = fl.Dataset.range(3).map(lambda x: (x, np.zeros(2, np.float32)))
    assert ds.element_spec == (fl.TensorSpec((), np.dtype(np.int64)),
                               fl.TensorSpec((2,), np.dtype(np.float32)))
    assert fl.Dataset.range(0).map(lambda x: x).element_spec is None


def test_wrong_state_is_rejected_clearly():
    it = iter(fl.Dataset.range(3).batch(2))
    with pytest.raises(fl.CheckpointError, match="not a feedline iterator state"):
        it.load_state_dict({"position": 1})
    state = iter(fl.Dataset.range(3)).state_dict()
    with pytest.raises(fl.CheckpointError, match="different pipeline: the saved pipeline has 1 "
                                                 "stages, this one 2"):
        it.load_state_dict(state)
    # A stage state of another kind or version (forged with a valid envelope) is refused by
    # the stage itself.
    from feedline.core import pipeline_state

    fingerprint = it._fingerprint()
    wrong_kind = pipeline_state.seal(iter(fl.Dataset.range(3)).state_dict()["root"], fingerprint)
    with pytest.raises(fl.CheckpointError, match="'RangeIterator' stage given to a 'batch'"):
        it.load_state_dict(wrong_kind)
    bad_version = json.loads(json.dumps(iter(fl.Dataset.range(3).batch(2)).state_dict()))
    bad_version["root"]["version"] = 99
    with pytest.raises(fl.CheckpointError, match="damaged"):
        it.load_state_dict(bad_version)
    with pytest.raises(fl.CheckpointError, match="version 99"):
        it.load_state_dict(pipeline_state.seal(bad_version["root"], fingerprint))


def test_context_manager_and_close_are_idempotent():
    with no_leaked_threads():
        with iter(fl.Dataset.range(10).prefetch(2)) as it:
            assert int(next(it)) == 0
        it.close()
        it.close()
        with pytest.raises(StopIteration):
            next(it)


def test_garbage_collected_iterator_stops_threads():
    with no_leaked_threads():
        it = iter(fl.Dataset.range(1000).map(lambda x: x, num_parallel_calls=2).prefetch(3))
        next(it)
        del it
        gc.collect()


def test_interpreter_exit_with_open_iterators_does_not_hang(tmp_path):
    script = textwrap.dedent("""
        import feedline as fl
        it = iter(fl.Dataset.range(10**9).map(lambda x: x, num_parallel_calls=2).prefetch(4))
        next(it)
        keep = [it]  # still referenced at exit: atexit must close it
        print("ok")
    """)
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                          timeout=60, check=False)
    assert done.returncode == 0 and done.stdout.strip() == "ok", done.stderr


def test_reduce_and_as_numpy_iterator():
    assert int(fl.Dataset.range(5).reduce(np.int64(0), lambda s, x: s + x)) == 10
    assert [int(x) for x in fl.Dataset.range(2).as_numpy_iterator()] == [0, 1]


def test_apply_requires_a_dataset_result():
    with pytest.raises(TypeError, match="not a Dataset"):
        fl.Dataset.range(3).apply(lambda ds: 3)


def test_graph_is_picklable_without_running():
    import pickle

    ds = fl.Dataset.range(5).batch(2).prefetch(1)
    clone = pickle.loads(pickle.dumps(ds))
    assert [b.tolist() for b in clone] == [[0, 1], [2, 3], [4]]


def test_next_called_on_a_temporary_iterator_returns_its_first_element():
    # The temporary's only reference is the call's own frame: the call must not close it.
    ds = fl.Dataset.range(5).map(lambda x: x + 1, num_parallel_calls=2).prefetch(2)
    assert int(iter(ds).__next__()) == 1
    assert int(ds.as_numpy_iterator().__next__()) == 1
    assert int(iter(fl.Dataset.range(5)).__next__()) == 0


def test_a_refused_checkpoint_names_the_stage_that_refused():
    # A shuffle buffer holding datasets from an input it cannot read again the same way
    # (deterministic=False) cannot be saved: the error says which stage it is (it named
    # none), once, however many stages it passes through on its way out.
    import feedline as fl

    ds = fl.Dataset.range(4).map(lambda x: fl.Dataset.from_tensors(x), num_parallel_calls=2,
                                 deterministic=False).shuffle(3, seed=1) \
        .flat_map(lambda d: d).map(lambda x: x + 1)
    with iter(ds) as it:
        next(it)
        with pytest.raises(fl.CheckpointError) as refused:
            it.state_dict()
    notes = [n for n in getattr(refused.value, "__notes__", []) if "saving the state" in n]
    assert notes == ["feedline: raised saving the state of the ShuffleIterator stage"]
