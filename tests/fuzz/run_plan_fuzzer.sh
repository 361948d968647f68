#!/usr/bin/env bash
# Runs the plan fuzzer for a bounded time from the plans of the generated
# models. Fails on any crash, hang, leak or sanitizer report.
set -euo pipefail
fuzzer=$1 dtc=$2 work=$3 seconds=${4:-30}
here=$(cd "$(dirname "$0")" && pwd)
rm -rf "$work" && mkdir -p "$work/corpus" "$work/seeds" "$work/artifacts" "$work/models"
python3 "$here/../models/generate.py" "$work/models" > /dev/null
"$dtc" compile "$work/models/mlp.onnx" --shape batch=2 -o "$work/seeds/mlp.dtcp" > /dev/null
"$dtc" compile "$work/models/cnn.onnx" --shape batch=1 -o "$work/seeds/cnn.dtcp" > /dev/null
"$dtc" compile "$work/models/gpt.onnx" --shape batch=1 --shape seq=4 -o "$work/seeds/gpt.dtcp" > /dev/null
echo "fuzzing plans for ${seconds}s from $(ls "$work/seeds" | wc -l) seeds"
"$fuzzer" "$work/corpus" "$work/seeds" -max_total_time="$seconds" -timeout=10 \
  -rss_limit_mb=4096 -max_len=1048576 -artifact_prefix="$work/artifacts/" -print_final_stats=1 2>&1 \
  | grep -vE '^#[0-9]+\s+(NEW|REDUCE|pulse)' | tail -25
echo "fuzzer finished: no crashes"
