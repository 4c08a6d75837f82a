#!/usr/bin/env bash
# One prepared run on a machine with a CUDA GPU: the CUDA variants of the tests, then the CUDA
# benchmark tables, written to $OUT (default: docs/) as benchmarks-device.md.
#
#     bash benchmarks/device_check.sh            # from the repository root
#
# Needs a python with a CUDA build of torch, numpy, pillow, pytest and hypothesis; py_gpu itself
# is used from this checkout (no install).
set -uo pipefail
PY="${PYTHON:-python3}"
OUT="${OUT:-docs}"
mkdir -p "$OUT"
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}" PYTHONUNBUFFERED=1
"$PY" -c "import torch; assert torch.cuda.is_available(), 'no CUDA device'; print(torch.__version__, torch.cuda.get_device_name(0))" || exit 2
# Every test file with tests that take the `device` fixture (tests/test_infrastructure.py checks
# this list); with PY_GPU_TEST_DEVICES=cuda only their CUDA variants are collected.
DEVICE_TESTS=(
    tests/test_antialias.py
    tests/test_camera.py
    tests/test_clip.py
    tests/test_fit.py
    tests/test_fit_examples.py
    tests/test_integration.py
    tests/test_interpolate.py
    tests/test_lights.py
    tests/test_obj_mtl.py
    tests/test_renderer.py
    tests/test_silhouette.py
    tests/test_soft.py
    tests/test_soft_defaults.py
    tests/test_soft_pruning.py
    tests/test_texture.py
    tests/test_torch_hard.py
)
PY_GPU_TEST_DEVICES=cuda "$PY" -m pytest -q -rs -p no:cacheprovider "${DEVICE_TESTS[@]}" 2>&1 | tee "$OUT/device-tests.log"
# host synchronisations counted with torch.cuda.set_sync_debug_mode (its CUDA test needs no device fixture)
"$PY" -m pytest -q -rs -p no:cacheprovider tests/test_syncs.py 2>&1 | tee -a "$OUT/device-tests.log"
"$PY" benchmarks/run.py --only torch,soft --output "$OUT/benchmarks-device.md" 2>&1 | tee "$OUT/device-bench.log"
