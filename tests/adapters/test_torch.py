"""feedline.torch: tensors, epochs, checkpoints, and DDP on CPU with gloo (2 and 4 processes)."""

import json
import os
import socket
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

torch = pytest.importorskip("torch")

import feedline as fl
import feedline.torch as flt
from feedline.adapters.epochs import context_from_environment
from feedline.testing.threads import no_leaked_threads

ROOT = Path(__file__).resolve().parents[2]
WORKER = Path(__file__).with_name("ddp_worker.py")


def free_port():
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def run_ranks(script, args, processes, timeout=150):
    """Run ``script`` in ``processes`` ranks with torch.distributed.run; all must exit 0."""
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path), "OMP_NUM_THREADS": "1"}
    for key in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "MASTER_ADDR", "MASTER_PORT"):
        env.pop(key, None)
    command = [sys.executable, "-m", "torch.distributed.run", f"--nproc_per_node={processes}",
               "--master_addr=127.0.0.1", f"--master_port={free_port()}", str(script), *args]
    # run() waits for the launcher, which waits for every rank: no process outlives the test.
    result = subprocess.run(command, cwd=ROOT, env=env, capture_output=True, text=True,
                            timeout=timeout, check=False)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]


def reports(folder, processes):
    return [json.loads((Path(folder) / f"{rank}.json").read_text()) for rank in range(processes)]


# ---------------------------------------------------------------------------- one process
def test_tensors_share_memory_with_numpy():
    array = np.arange(6, dtype=np.float32)
    tensor = flt.to_tensors(array)
    array[0] = 42
    assert tensor[0].item() == 42
    read_only = np.arange(3)
    read_only.flags.writeable = False
    copied = flt.to_tensors(read_only)
    copied.add_(1)  # a copy: writing is safe
    assert copied.tolist() == [1, 2, 3] and read_only.tolist() == [0, 1, 2]
    nested = flt.to_tensors({"x": (np.ones(2), np.int64(3)),
                             "names": np.array([b"a", b"b"], dtype=object)})
    assert isinstance(nested["x"][0], torch.Tensor) and nested["x"][1].item() == 3
    assert nested["names"].tolist() == [b"a", b"b"]


def test_epochs_reshuffle_and_count():
    loader = flt.Loader(fl.Dataset.range(12).global_shuffle(seed=1).batch(4))
    epochs = [[v for b in loader for v in b.tolist()] for _ in range(3)]
    assert all(sorted(e) == list(range(12)) for e in epochs)
    assert len({tuple(e) for e in epochs}) == 3
    ds = fl.Dataset.range(12).global_shuffle(seed=1)
    assert epochs[1] == [int(x) for x in fl.PipelineIterator(ds, epoch=1)]
    assert loader.epoch == 3 and len(loader) == 3


def test_checkpoint_mid_epoch_restores_exactly():
    ds = fl.Dataset.range(40).shuffle(10, seed=2).map(lambda x: x * 2).batch(3).prefetch(2)
    loader = flt.Loader(ds)
    first_epoch = [b.tolist() for b in loader]
    it = iter(loader)
    head = [next(it).tolist() for _ in range(4)]
    state = json.loads(json.dumps(loader.state_dict()))
    rest = [b.tolist() for b in it]
    assert state["epoch"] == 1 and state["steps"] == 4
    restored = flt.Loader(ds)
    restored.load_state_dict(state)
    assert [b.tolist() for b in restored] == rest
    assert sorted(v for b in head + rest for v in b) == sorted(v for b in first_epoch for v in b)
    loader.close()


def test_a_broken_loop_goes_on_where_it_stopped():
    loader = flt.Loader(fl.Dataset.range(10).batch(2))
    for batch in loader:
        if batch.tolist() == [2, 3]:
            break
    assert [b.tolist() for b in loader] == [[4, 5], [6, 7], [8, 9]]
    next_epoch = [b.tolist() for b in loader]
    assert next_epoch[0] == [0, 1] and len(next_epoch) == 5


def test_errors_propagate_and_the_epoch_goes_on():
    def check(x):
        if x == 3:
            raise ValueError("bad element 3")
        return x

    loader = flt.Loader(fl.Dataset.range(6).map(check))
    got = []
    with pytest.raises(ValueError, match="bad element 3"):
        for x in loader:
            got.append(int(x))
    got += [int(x) for x in loader]
    assert got == [0, 1, 2, 4, 5]


def test_close_ends_the_pipeline_threads():
    ds = fl.Dataset.range(1000).map(lambda x: x, num_parallel_calls=2).prefetch(4)
    with no_leaked_threads(), flt.Loader(ds) as loader:
        next(iter(loader))


def test_dataset_function_and_context():
    ctx = fl.InputContext(4, 2, 4)
    loader = flt.Loader(lambda c: fl.Dataset.range(20).shard(c.num_input_pipelines,
                                                             c.input_pipeline_id),
                        context=ctx)
    assert [int(x) for x in loader] == [2, 6, 10, 14, 18]
    sharded = flt.Loader(fl.Dataset.range(10), context=fl.InputContext(4, 1, 4))
    assert [int(x) for x in sharded] == [1, 5]  # full rounds: 10 // 4 each
    with pytest.raises(TypeError, match="not a feedline.Dataset"):
        flt.Loader(lambda c: [1, 2], context=ctx)


def test_context_from_the_environment():
    assert context_from_environment({"RANK": "1", "WORLD_SIZE": "2"}) == fl.InputContext(2, 1, 2)
    assert context_from_environment({"OMPI_COMM_WORLD_RANK": "0",
                                     "OMPI_COMM_WORLD_SIZE": "3"}).num_input_pipelines == 3
    with pytest.raises(ValueError, match="must be integers"):
        context_from_environment({"RANK": "x", "WORLD_SIZE": "2"})


def test_cuda_needs_a_gpu():
    if torch.cuda.is_available():
        pytest.skip("this machine has CUDA")
    with pytest.raises(RuntimeError, match="CUDA is not available"):
        flt.Loader(fl.Dataset.range(3), device="cuda")
    with pytest.raises(RuntimeError, match="pin_memory=True\\) needs CUDA"):
        flt.Loader(fl.Dataset.range(3), pin_memory=True)


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
def test_device_prefetch_on_cuda():
    loader = flt.Loader(fl.Dataset.range(64).map(lambda x: np.full(1000, x, np.float32)).batch(8),
                        device="cuda", prefetch_to_device=3)
    batches = [b for b in loader]
    assert all(b.is_cuda for b in batches)
    assert [int(b[0, 0].item()) for b in batches] == list(range(0, 64, 8))
    it = iter(loader)
    next(it)
    state = loader.state_dict()  # 1 handed out, up to 3 in flight
    rest = [int(b[0, 0].item()) for b in it]
    again = flt.Loader(fl.Dataset.range(64).map(lambda x: np.full(1000, x, np.float32)).batch(8),
                       device="cuda")
    again.load_state_dict(state)
    assert [int(b[0, 0].item()) for b in again] == rest


def test_import_error_names_the_extra():
    code = ("import sys; sys.modules['torch'] = None\n"
            "import feedline\n"
            "try:\n    import feedline.torch\n"
            "except ImportError as e:\n    print(e)\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         timeout=60, check=False, env={**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)})
    assert "pip install 'feedline[torch]'" in out.stdout, out.stderr


# ---------------------------------------------------------------------- several processes
@pytest.mark.slow
@pytest.mark.parametrize("processes", [2, 4])
def test_ranks_get_disjoint_complete_equal_shares(tmp_path, processes):
    run_ranks(WORKER, ["disjoint", str(tmp_path)], processes)
    ranks = reports(tmp_path, processes)
    batches_per_rank = 21 // processes  # 103 elements: 20 batches of 5 and one of 3
    for epoch in range(2):
        seen = [v for r in ranks for b in r["epochs"][epoch] for v in b]
        assert len(seen) == len(set(seen)) == batches_per_rank * processes * 5
        assert len({len(r["epochs"][epoch]) for r in ranks}) == 1  # equal steps
    assert ranks[0]["epochs"][0] != ranks[0]["epochs"][1]  # reshuffled
    assert not any(r["even_steps"] for r in ranks)  # equal by construction: no all-reduce


@pytest.mark.slow
def test_uneven_shares_end_on_the_same_step(tmp_path):
    run_ranks(WORKER, ["uneven", str(tmp_path)], 4)
    ranks = reports(tmp_path, 4)
    assert all(r["even_steps"] for r in ranks)
    for epoch in range(2):
        steps = {len(r["epochs"][epoch]) for r in ranks}
        assert len(steps) == 1
        seen = [v for r in ranks for b in r["epochs"][epoch] for v in b[::2]]
        assert len(seen) == len(set(seen))
    # Rank 0 has 5 elements (2 batches of 4), the others 25 (7 batches): every rank stops
    # after 2 steps, and the 3 other ranks drop 5 batches each, every epoch.
    assert [len(r["epochs"][0]) for r in ranks] == [2, 2, 2, 2]
    assert [r["dropped"] for r in ranks] == [0, 10, 10, 10]


@pytest.mark.slow
def test_each_rank_resumes_exactly(tmp_path):
    run_ranks(WORKER, ["resume", str(tmp_path)], 2)
    for r in reports(tmp_path, 2):
        assert r["restored"] == r["rest"]


@pytest.mark.slow
def test_ddp_example_trains(tmp_path):
    run_ranks(ROOT / "examples" / "ddp_train.py",
              ["--epochs", "2", "--report", str(tmp_path / "{rank}.json")], 2)
    ranks = reports(tmp_path, 2)
    assert ranks[0]["steps"] == ranks[1]["steps"] == 2 * 4096 // 64
    assert ranks[0]["weight"] == ranks[1]["weight"]  # DDP kept the replicas equal
    assert abs(ranks[0]["weight"] - 3) < 0.05 and abs(ranks[0]["bias"] + 1) < 0.05
    losses = ranks[0]["losses"]
    assert np.mean(losses[-10:]) < np.mean(losses[:10]) / 100
    assert ranks[0]["epoch"] == 2
