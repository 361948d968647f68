#!/usr/bin/env bash
# Runs the checkpoint fuzzer for a bounded time from the checkpoints of a
# short training run (as whole files, and as messages the fuzzer frames).
# Fails on any crash, hang, leak or sanitizer report.
set -euo pipefail
fuzzer=$1 dtc=$2 work=$3 seconds=${4:-20}
rm -rf "$work" && mkdir -p "$work/corpus" "$work/seeds" "$work/artifacts" "$work/data"
python3 -c "
import numpy as np
r = np.random.default_rng(0)
np.save('$work/data/input_ids.npy', r.integers(0, 16, (8, 8)))
np.save('$work/data/labels.npy', r.integers(0, 16, (8, 8)))"
"$dtc" compile gpt:layers=1,hidden=8,heads=2,seq=8,vocab=16,batch=2 --train -o "$work/gpt.dtcp" > /dev/null
"$dtc" run "$work/gpt.dtcp" --data "$work/data" --steps 1 --checkpoint "$work/ck" > /dev/null
python3 -c "
data = open('$work/ck/checkpoint.dtck', 'rb').read()
open('$work/seeds/file', 'wb').write(b'\x01' + data)             # a whole file
open('$work/seeds/message', 'wb').write(b'\x00' + data[16:-4])   # its message, framed by the fuzzer"
echo "fuzzing checkpoints for ${seconds}s from $(ls "$work/seeds" | wc -l) seeds"
"$fuzzer" "$work/corpus" "$work/seeds" -max_total_time="$seconds" -timeout=10 \
  -rss_limit_mb=2048 -max_len=65536 -artifact_prefix="$work/artifacts/" -print_final_stats=1 2>&1 \
  | grep -vE '^#[0-9]+\s+(NEW|REDUCE|pulse)' | tail -25
echo "fuzzer finished: no crashes"
