#!/usr/bin/env bash
# Sets everything up, builds, and runs every test (lit, unit, ONNX node-test
# conformance, importer fuzzing); ends with ctest's summary.
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
"$root/scripts/setup.sh"
cd "$root/build"
ctest --output-on-failure -j "$(nproc)" "$@"
