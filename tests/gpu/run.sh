#!/usr/bin/env bash
# The CUDA backend's GPU checks, one command (after the README's build):
# every kernel of GPT training steps on the GPU against the CPU backend
# (dtc-gpu-tests), the attention kernels against a double-precision
# reference (dtc-gpu-plan-tests' GpuAttention), then the example models
# end to end (tests/gpu/*.test).
# On a machine without a usable GPU both say they were skipped, and why.
set -euo pipefail
root="$(cd "$(dirname "$0")/../.." && pwd)"
build="${BUILD_DIR:-$root/build}"
"$build/bin/dtc-gpu-tests"
"$build/bin/dtc-gpu-plan-tests" --gtest_filter='GpuAttention.*'
python3 /usr/lib/llvm-19/build/utils/lit/lit.py -v "$build/tests" --filter '^dtc :: gpu/'
