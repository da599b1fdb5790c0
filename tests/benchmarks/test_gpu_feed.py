"""benchmarks/gpu_feed.py without a GPU: it says so and exits 0; its pure parts; its models."""

from __future__ import annotations

import subprocess
from pathlib import Path

import numpy as np
import pytest

from benchmarks import gpu_feed

ROOT = Path(__file__).resolve().parents[2]
TORCH_PYTHON = ROOT / "benchmarks" / ".venvs" / "torch" / "bin" / "python"


def test_without_cuda_it_says_so_and_exits_zero(capsys):
    problem = gpu_feed.cuda_problem()
    if problem is None:
        pytest.skip("this machine has a CUDA GPU")
    assert gpu_feed.main(["--small"]) == 0
    out = capsys.readouterr().out
    assert "no CUDA GPU" in out and "Nothing was measured" in out and problem in out


def test_idle_fraction_counts_gaps_between_steps_only():
    assert gpu_feed.gpu_idle_fraction([0, 10, 20], [10, 20, 30]) == 0.0
    assert gpu_feed.gpu_idle_fraction([0, 15], [10, 20]) == pytest.approx(5 / 20)
    # A step queued before the previous one ended overlaps it: no idle time, not negative.
    assert gpu_feed.gpu_idle_fraction([0, 5], [10, 20]) == 0.0
    assert gpu_feed.gpu_idle_fraction([], []) is None
    assert gpu_feed.gpu_idle_fraction([0], [0]) is None


class FakeTensorFlowTensor:
    def __init__(self, value):
        self.value = value

    def numpy(self):
        return self.value


def test_inputs_and_targets_of_each_batch_kind():
    board = np.zeros((4, 8, 8, 24), np.float32)
    x, y = gpu_feed.inputs_and_targets(
        {"board": FakeTensorFlowTensor(board), "score": np.ones(4, np.float32),
         "flags": np.zeros((4, 10))}, "chess")
    assert x is board and y.shape == (4,)
    images = np.zeros((2, 224, 224, 3), np.float32)
    assert gpu_feed.inputs_and_targets(images, "images") == (images, None)
    with pytest.raises(TypeError):
        gpu_feed.inputs_and_targets({"image": images}, "images")


def test_arguments_plan_and_table():
    args = gpu_feed.parse_args(["--loaders", "feedline,torch", "--workers", "3"])
    assert args.workers == 3 and args.workloads == ["chess", "images"]
    assert gpu_feed.plan(args)[:3] == [("chess", "limit"), ("chess", "feedline"),
                                       ("chess", "torch")]
    for bad in (["--loaders", "mxnet"], ["--workloads", "audio"], ["--workers", "0"]):
        with pytest.raises(SystemExit):
            gpu_feed.parse_args(bad)
    text = gpu_feed.markdown([
        {"workload": "images", "loader": "limit", "ok": True, "throughput": 6890.0},
        {"workload": "images", "loader": "tf", "ok": False, "error": "unavailable: no tf"},
        {"workload": "images", "loader": "feedline", "ok": True, "throughput": 3445.0,
         "gpu_waited": 0.5, "next_waited": 0.4, "notes": "threads"}], "H100")
    assert "| images | feedline | 3,445 | 50.0% | 50.0% | 40.0% | threads |" in text
    assert "| images | tf | – | – | – | – | unavailable: no tf |" in text


@pytest.mark.skipif(not TORCH_PYTHON.exists(), reason="no PyTorch environment")
def test_models_train_one_step_on_the_cpu():
    """The models' shapes and a backward pass, on the CPU (no timing, nothing reported)."""
    code = """
import torch
from benchmarks import gpu_feed
net = gpu_feed.chess_net(torch)
out = net(torch.zeros(3, 24, 8, 8))
assert out.shape == (3,), out.shape
out.sum().backward()
resnet, name = gpu_feed.resnet18(torch)
logits = resnet(torch.zeros(2, 3, 64, 64))
assert logits.shape == (2, 1000), logits.shape
print(sum(p.numel() for p in resnet.parameters()))
"""
    done = subprocess.run([str(TORCH_PYTHON), "-c", code], cwd=ROOT, capture_output=True,
                          text=True, timeout=120, check=False)
    assert done.returncode == 0, done.stderr[-2000:]
    assert int(done.stdout.split()[-1]) == 11_689_512  # ResNet-18's, as torchvision's
