#!/usr/bin/env bash
# Sets everything up, builds, generates the example models and imports the
# small GPT into dtc's graph dialect, printing it.
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
"$root/scripts/setup.sh"
models="$root/build/models"
python3 "$root/tests/models/generate.py" "$models"
echo "== dtc import $models/gpt.onnx --shape batch=2 --shape seq=16"
"$root/build/bin/dtc" import "$models/gpt.onnx" --shape batch=2 --shape seq=16
