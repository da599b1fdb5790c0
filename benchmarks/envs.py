"""Virtual environments of the systems under test, made on first use under ``.venvs/``.

Each peer gets its own environment so that their pinned dependencies never meet (TensorFlow
and PyTorch want different NumPy/protobuf ranges at times) and feedline is measured without
any of them installed. An environment is reused while its ``installed.json`` lists the same
requirements; a failed install is reported with its log, never hidden. On a machine with no
package registry (a lent GPU machine), ``FEEDLINE_BENCH_PEERS_PYTHON`` names one interpreter
that already holds the peers; every system then runs in it and nothing is installed.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

HERE = Path(__file__).resolve().parent
VENVS = HERE / ".venvs"
# What every environment needs to run benchmarks.worker (decoders, memory probes, progress).
COMMON = ["numpy", "psutil", "simplejpeg", "pillow", "tqdm"]
PEERS: dict[str, list[str]] = {
    # TensorFlow's CPU-only build.
    # tensorflow-datasets: `python -m benchmarks.datasets` writes and reads a TFDS directory.
    "tf": ["tensorflow-cpu==2.21.0", "tensorflow-datasets==4.9.10"],
    # Pinned: the CPU wheel pip finds locally. Plain "torch" would pull the CUDA build (GBs).
    # ``tfrecord`` is what PyTorch users read TFRecord files with (no TensorFlow needed).
    # Not torchvision: 0.28.0 is the release for torch 2.13.0, but pip finds only its CUDA
    # wheel (PyPI); against torch 2.13.0+cpu its native ops do not load, and a torchvision that
    # fails to import breaks every user of the env (gpu_feed.py's ResNet). The "torchvision"
    # variant runs where it imports (see VARIANT_IMPORTS).
    "torch": ["torch==2.13.0", "tfrecord"],
    # array-record: Grain's ArrayRecordDataSource (benchmarks.datasets).
    "grain": ["grain", "tfrecord", "array-record"],
    # Only `python -m benchmarks.datasets` uses these two: the `webdataset` package's
    # loader and Hugging Face `datasets` (each alone, as every peer).
    "webdataset": ["webdataset"],
    "datasets": ["datasets"],
}
INSTALL_TIMEOUT_S = 1800
PEERS_PYTHON_VARIABLE = "FEEDLINE_BENCH_PEERS_PYTHON"
# The module whose import says a peer is there (FEEDLINE_BENCH_PEERS_PYTHON).
PEER_MODULE = {"tf": "tensorflow", "torch": "torch", "grain": "grain",
               "webdataset": "webdataset", "datasets": "datasets"}
# Variants that need more than their system's environment: the module each imports. A pip
# install can succeed and the module still fail to load (torchvision's PyPI wheel is built
# for CUDA torch; against a ``+cpu`` torch its native ops do not load): the variant is then
# reported unavailable, with the import's error, rather than failing its runs.
VARIANT_IMPORTS: dict[tuple[str, str], tuple[str, str]] = {
    ("torch", "torchvision"): (
        "torchvision.io",
        "torchvision==0.28.0 (the release for torch 2.13.0) has no CPU wheel where pip looks "
        "(PyPI's is the CUDA build, whose ops do not load against torch 2.13.0+cpu); install "
        "torchvision==0.28.0+cpu from https://download.pytorch.org/whl/cpu into "
        "benchmarks/.venvs/torch to run it"),
}


@dataclass
class Environment:
    """Where a system runs, or why it cannot.

    Attributes:
        system: The system's name.
        python: Its interpreter, or ``None`` when unavailable.
        error: Why it is unavailable (with the log's path), else ``None``.
    """

    system: str
    python: str | None
    error: str | None = None


def requirements(system: str) -> list[str]:
    """The pip requirements of ``system``'s environment.

    Example:
        >>> requirements("torch")[:2]
        ['torch==2.13.0', 'tfrecord']
    """
    return PEERS[system] + COMMON


def _installed_marker(system: str) -> Path:
    return VENVS / system / "installed.json"


def is_current(system: str) -> bool:
    """Whether ``system``'s environment exists with exactly today's requirements."""
    marker = _installed_marker(system)
    python = VENVS / system / "bin" / "python"
    if not (marker.is_file() and python.exists()):
        return False
    try:
        return json.loads(marker.read_text()) == requirements(system)
    except (OSError, ValueError):
        return False


def ensure(system: str, log: Path | None = None) -> Environment:
    """The environment of ``system``, creating or updating it if needed."""
    if system == "feedline":
        return _ensure_feedline()
    shared = os.environ.get(PEERS_PYTHON_VARIABLE)
    if shared:
        module = PEER_MODULE.get(system, system)
        if not can_import(shared, module):
            return Environment(system, None, f"import {module} failed in {shared} "
                                             f"(${PEERS_PYTHON_VARIABLE})")
        return Environment(system, shared)
    python = VENVS / system / "bin" / "python"
    if is_current(system):
        return Environment(system, str(python))
    log = log or VENVS / f"{system}.install.log"
    VENVS.mkdir(parents=True, exist_ok=True)
    print(f"[bench] installing {system} into {VENVS / system} (log: {log}) ...", file=sys.stderr,
          flush=True)
    with open(log, "w") as out:
        try:
            if not python.exists():
                subprocess.run([sys.executable, "-m", "venv", str(VENVS / system)], check=True,
                               stdout=out, stderr=subprocess.STDOUT, timeout=300)
            subprocess.run([str(python), "-m", "pip", "install", "--quiet",
                            *requirements(system)], check=True, stdout=out,
                           stderr=subprocess.STDOUT, timeout=INSTALL_TIMEOUT_S)
        except (subprocess.CalledProcessError, subprocess.TimeoutExpired, OSError) as error:
            return Environment(system, None, f"install failed ({error}); see {log}")
    _installed_marker(system).write_text(json.dumps(requirements(system)))
    return Environment(system, str(python))


def _ensure_feedline() -> Environment:
    """feedline runs from the repository's own ``.venv`` (installed with ``pip install -e``)."""
    missing = []
    for module in ("psutil", "simplejpeg", "PIL", "tqdm"):
        try:
            __import__(module)
        except ImportError:
            missing.append(module)
    if missing:
        result = subprocess.run(
            [sys.executable, "-m", "pip", "install", "--quiet", "-r",
             str(HERE / "requirements.txt")], capture_output=True, text=True, check=False)
        if result.returncode != 0:
            return Environment("feedline", None,
                               f"installing {missing} failed: {result.stderr.strip()[-300:]}")
    try:
        import feedline  # noqa: F401
    except ImportError as error:
        return Environment("feedline", None, f"feedline is not importable: {error}")
    return Environment("feedline", sys.executable)


def variant_problem(system: str, variant: str, python: str) -> str | None:
    """Why ``variant`` of ``system`` cannot run in the environment of ``python``, or None.

    Example:
        >>> variant_problem("torch", "expert", sys.executable) is None
        True
    """
    if (system, variant) not in VARIANT_IMPORTS:
        return None
    module, hint = VARIANT_IMPORTS[(system, variant)]
    result = subprocess.run([python, "-c", f"import {module}"], capture_output=True, text=True,
                            check=False)
    if result.returncode == 0:
        return None
    last = (result.stderr.strip().splitlines() or ["(no output)"])[-1]
    return f"import {module} failed ({last}): {hint}"


def can_import(python: str, module: str) -> bool:
    """Whether ``module`` imports in the environment of ``python``."""
    result = subprocess.run([python, "-c", f"import {module}"], capture_output=True, check=False)
    return result.returncode == 0
