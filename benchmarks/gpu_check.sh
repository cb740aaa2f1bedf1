#!/usr/bin/env bash
# The prepared GPU check (issue #13 item 7): mining throughput, loss step cost at 64 groups x 128 tokens in bf16,
# and a 100-step `xprt-st train --precision bf16` run, written to one results folder (default gpu-check/).
#
#   benchmarks/gpu_check.sh [OUT]           on one GPU; stops after 8 minutes (GPU_CHECK_TIMEOUT seconds)
#   benchmarks/gpu_check.sh --smoke [OUT]   tiny sizes on the CPU; CI runs this (tests/test_gpu_check.py)
#
# Everything runs offline from this checkout (PYTHONPATH), never from a model or dataset hub.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
export PYTHONPATH="$root${PYTHONPATH:+:$PYTHONPATH}"
export HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 HF_DATASETS_OFFLINE=1
exec timeout --signal=INT --kill-after=30 "${GPU_CHECK_TIMEOUT:-480}" \
    "${PYTHON:-python}" "$root/benchmarks/gpu_check.py" "$@"
