#!/usr/bin/env bash
# The prepared GPU check: device facts, greedy equality of every method in fp32 and bf16 on random-weight models
# it builds, the verify-cost curve, eager vs --compile tok/s, a short drafter training and (with nvcc) a CUDA
# llama.cpp build, each under its own time budget, in at most 8 minutes on one GPU with no network; a JSON
# report (--out FILE, default gpu_check.json here) and a summary table. `--device cpu`: tiny and 135M shapes,
# at most 3 minutes. Exits 1 only when greedy equality fails (or the check itself breaks). See README.md.
set -euo pipefail
PYTHON=${PYTHON:-python3}
exec "$PYTHON" "$(dirname "$0")/gpu_check.py" "$@"
