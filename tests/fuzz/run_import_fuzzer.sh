#!/usr/bin/env bash
# Runs the ONNX importer fuzzer for a bounded time from a seed corpus of the
# generated models and a slice of ONNX's node tests. Fails on any crash,
# hang, leak or sanitizer report.
set -euo pipefail
fuzzer=$1 work=$2 seconds=${3:-60}
here=$(cd "$(dirname "$0")" && pwd)
rm -rf "$work" && mkdir -p "$work/corpus" "$work/seeds" "$work/artifacts"
python3 "$here/../models/generate.py" "$work/seeds" > /dev/null
node_dir=$(python3 -c "import onnx, os; print(os.path.join(os.path.dirname(onnx.__file__), 'backend/test/data/node'))")
i=0
for m in "$node_dir"/test_{add,relu,matmul,gemm,conv,reshape,slice,split,concat,gather,softmax,layer_norm,maxpool,reduce_sum}*/model.onnx; do
  [ -f "$m" ] && cp "$m" "$work/seeds/node_$((i++)).onnx"
done
echo "fuzzing the ONNX importer for ${seconds}s from $(ls "$work/seeds" | wc -l) seeds"
"$fuzzer" "$work/corpus" "$work/seeds" -max_total_time="$seconds" -timeout=10 \
  -rss_limit_mb=4096 -max_len=1048576 -artifact_prefix="$work/artifacts/" -print_final_stats=1 2>&1 \
  | grep -vE '^#[0-9]+\s+(NEW|REDUCE|pulse)' | tail -25
echo "fuzzer finished: no crashes"
