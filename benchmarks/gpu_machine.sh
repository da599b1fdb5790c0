#!/usr/bin/env bash
# The GPU/many-core checks on a machine with no package registry (a lent 16-core H100 box):
# gpu_feed, the worker-count sweep and the scaling model, in one run of a few minutes.
#
#   bash benchmarks/gpu_machine.sh download   # here, with pip: wheels into .whl/ (cp312)
#   bash benchmarks/gpu_machine.sh run OUT    # there, from the repository root: results in OUT
#
# "run" expects an interpreter that already holds numpy, torch (CUDA), torchvision, pillow,
# psutil, protobuf, fsspec, tqdm and cloudpickle (the machine's image); it installs the
# carried wheels into it, builds feedline's C extensions in place, and runs every peer in
# that one interpreter (FEEDLINE_BENCH_PEERS_PYTHON; tf.data is absent there: TensorFlow's
# wheel is larger than what travels).
set -uo pipefail
cd "$(dirname "$0")/.."
PY="${PYTHON:-python3}"

case "${1:-}" in
  download)
    mkdir -p .whl
    platforms=()
    for p in manylinux_2_28_x86_64 manylinux_2_27_x86_64 manylinux_2_24_x86_64 \
             manylinux_2_17_x86_64 manylinux2014_x86_64 manylinux1_x86_64 any; do
      platforms+=(--platform "$p")
    done
    "$PY" -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 \
      --implementation cp "${platforms[@]}" -d .whl google-crc32c zstandard simplejpeg \
      crc32c grain==0.2.18 array-record==0.8.6 portpicker
    # tfrecord 1.14.6 (protobuf >= 4 compatible) is an sdist only; 1.14.4's generated
    # example_pb2 fails under the protobuf of the machine's image.
    "$PY" -m pip wheel -q --no-deps -w .whl tfrecord==1.14.6
    du -sh .whl
    ;;
  run)
    out="${2:?usage: gpu_machine.sh run OUT}"
    mkdir -p "$out"
    export PYTHONUNBUFFERED=1 PYTHONPATH="$PWD" FEEDLINE_BENCH_PEERS_PYTHON="$(command -v "$PY")"
    start=$(date +%s)
    stamp() { echo "[gpu_machine] $1 at +$(( $(date +%s) - start )) s"; }
    nproc
    nvidia-smi --query-gpu=name,memory.total --format=csv,noheader
    "$PY" -m pip install -q --no-index --no-deps .whl/*.whl >"$out/setup.log" 2>&1 \
      || { cat "$out/setup.log"; exit 1; }
    "$PY" setup.py -q build_ext --inplace >>"$out/setup.log" 2>&1
    "$PY" -c "import torch, feedline; print('torch', torch.__version__, torch.cuda.is_available())"
    stamp setup
    timeout 300 "$PY" -m benchmarks.gpu_feed --loaders feedline,feedline-processes,feedline-gpu-decode,torch \
      --max-seconds 10 --warmup-steps 15 --json "$out/gpu_feed.json" >"$out/gpu_feed.log" 2>&1
    grep "^|" "$out/gpu_feed.log"
    stamp gpu_feed
    timeout 200 "$PY" -m benchmarks.run sweep --systems feedline,torch --sweep-workers 4,8,15 \
      --rounds 1 --max-seconds 6 --check-batches 2 --chess-records 800000 --chess-files 32 \
      --json "$out/sweep.json" --results-md "$out/sweep.md" >"$out/sweep.log" 2>&1
    grep -A10 "worker-count sweep — throughput" "$out/sweep.log"
    grep "CHECK FAILED\|WRONG OUTPUT" "$out/sweep.log" | head -5
    stamp sweep
    timeout 70 "$PY" -m benchmarks.scaling --chess-data benchmarks/.cache/chess-800000-32-s1234 \
      --json "$out/scaling.json" >"$out/scaling.log" 2>&1
    tail -12 "$out/scaling.log"
    stamp end
    ;;
  *)
    echo "usage: bash benchmarks/gpu_machine.sh download | run OUT" >&2
    exit 2
    ;;
esac
