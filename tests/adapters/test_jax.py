"""feedline.jax: global sharded arrays over 8 host devices, prefetch, resume, 2 processes."""

import json
import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("jax")

ROOT = Path(__file__).resolve().parents[2]
WORKER = Path(__file__).with_name("jax_worker.py")


def environment(devices):
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path),
           "XLA_FLAGS": f"--xla_force_host_platform_device_count={devices}",
           "JAX_PLATFORMS": "cpu"}
    return env


def run(args, devices=8, timeout=120):
    # The device count must be set before JAX starts: a fresh interpreter per scenario.
    result = subprocess.run([sys.executable, *map(str, args)], cwd=ROOT, env=environment(devices),
                            capture_output=True, text=True, timeout=timeout, check=False)
    assert result.returncode == 0, result.stderr[-4000:]
    return json.loads(result.stdout.strip().splitlines()[-1])


@pytest.fixture(scope="module")
def single():
    return run([WORKER, "single"])


@pytest.mark.slow
def test_batches_are_global_arrays_sharded_over_every_device(single):
    assert single["devices"] == 8
    assert single["shape"] == [16, 3] and single["sharded_over"] == 8
    assert single["shards"] == [[2 * d, [2.0 * d, 2.0 * d + 1]] for d in range(8)]


def test_structures_are_kept(single):
    assert single["pair_type"] == "Pair" and single["pair_a"] == list(range(16))
    assert single["names"] == ["0", "1", "2"]
    assert single["epoch_rows"] == list(range(64))


def test_resume_with_transfers_in_flight(single):
    assert single["head"] == [list(range(16)), list(range(16, 32))]
    assert single["resumed"]


def test_a_jitted_step_trains(single):
    first, last = single["loss_first_last"]
    assert last < first / 10


def test_batches_that_do_not_split_over_the_devices_are_refused(single):
    assert "a local batch of 6 rows does not split over this process's 8 devices" \
        in single["indivisible"]


def test_threads_end(single):
    assert single["threads_left"] == []


def free_port():
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


@pytest.mark.slow
def test_two_processes_feed_one_global_batch():
    port = free_port()
    env = environment(4)
    processes = [subprocess.Popen([sys.executable, str(WORKER), "multi", str(i), str(port)],
                                  cwd=ROOT, env=env, stdout=subprocess.PIPE,
                                  stderr=subprocess.PIPE, text=True) for i in range(2)]
    outputs = []
    try:
        for process in processes:
            out, err = process.communicate(timeout=120)
            assert process.returncode == 0, err[-4000:]
            outputs.append(json.loads(out.strip().splitlines()[-1]))
    finally:
        for process in processes:
            if process.poll() is None:
                process.kill()
                process.wait()
    for i, found in enumerate(outputs):
        assert found["context"] == [2, i, 8] and found["local_devices"] == 4
        # Process i reads batches i, i + 2, ... of 8: each global batch is rows 16k..16k+15.
        assert found["sums"] == [sum(range(16 * k, 16 * k + 16)) for k in range(4)]
        assert found["global_shape"] == [16]


@pytest.mark.slow
def test_jax_example_trains(tmp_path):
    report = tmp_path / "report.json"
    result = subprocess.run([sys.executable, str(ROOT / "examples" / "jax_train.py"),
                             "--epochs", "2", "--report", str(report)], cwd=ROOT,
                            env=environment(8), capture_output=True, text=True, timeout=120,
                            check=False)
    assert result.returncode == 0, result.stderr[-4000:]
    found = json.loads(report.read_text())
    assert found["devices"] == 8 and found["sharded_over"] == [8]
    assert found["steps"] == 2 * 2048 // 64
    assert abs(found["w"][1] + 2) < 0.01 and abs(found["b"] - 0.25) < 0.01


def test_import_error_names_the_extra():
    code = ("import sys; sys.modules['jax'] = None\n"
            "import feedline\n"
            "try:\n    import feedline.jax\n"
            "except ImportError as e:\n    print(e)\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         timeout=60, check=False,
                         env={**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)})
    assert "pip install 'feedline[jax]'" in out.stdout, out.stderr
