#!/usr/bin/env bash
# Sets everything up, builds, generates the example models, then compiles the
# small GPT into a plan, shows the plan, runs it on the CPU and compares the
# logits with onnxruntime's; then trains the MLP on digits and the GPT on text.
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
"$root/scripts/setup.sh"
dtc="$root/build/bin/dtc"
demo="$root/build/demo"
rm -rf "$demo" && mkdir -p "$demo/inputs"
python3 "$root/tests/models/generate.py" "$demo/models"

echo
echo "== dtc compile gpt.onnx --shape batch=2 --shape seq=16 -o gpt.dtcp"
"$dtc" compile "$demo/models/gpt.onnx" --shape batch=2 --shape seq=16 -o "$demo/gpt.dtcp"

echo
echo "== dtc plan gpt.dtcp (its summary; every instruction, from dtc plan --full, in $demo/gpt.plan.txt)"
"$dtc" plan "$demo/gpt.dtcp"
"$dtc" plan --full "$demo/gpt.dtcp" -o "$demo/gpt.plan.txt"

python3 -c "import numpy as np; np.save('$demo/inputs/input_ids.npy', np.random.RandomState(0).randint(0, 256, (2, 16)).astype(np.int64))"
echo
echo "== dtc run gpt.dtcp --inputs inputs --outputs outputs --output-format npy --repeat 20"
"$dtc" run "$demo/gpt.dtcp" --inputs "$demo/inputs" --outputs "$demo/outputs" --output-format npy --repeat 20

python3 - "$demo" <<'PY'
import sys
import numpy as np
import onnxruntime as ort
demo = sys.argv[1]
ids = np.load(f"{demo}/inputs/input_ids.npy")
want = ort.InferenceSession(f"{demo}/models/gpt.onnx", providers=["CPUExecutionProvider"]).run(
    None, {"input_ids": ids})[0]
got = np.load(f"{demo}/outputs/output_0.npy")
ok = got.shape == want.shape and np.allclose(got, want, rtol=1e-4, atol=1e-5)
print(f"\nlogits {got.shape}: max |dtc - onnxruntime| = {np.abs(got - want).max():.3g} "
      f"-> {'matches onnxruntime' if ok else 'MISMATCH'}")
sys.exit(0 if ok else 1)
PY

# Training: the MLP on scikit-learn's 8x8 digits (64 features, 10 classes).
python3 - "$demo" <<'PY'
import os, sys
import numpy as np
from sklearn.datasets import load_digits
demo = sys.argv[1]
d = load_digits()
os.makedirs(f"{demo}/digits", exist_ok=True)
np.save(f"{demo}/digits/x.npy", (d.data / 16.0).astype(np.float32))
np.save(f"{demo}/digits/labels.npy", d.target.astype(np.int64))
PY
echo
echo "== dtc compile mlp.onnx --shape batch=32 --train --loss cross_entropy --optimizer adamw --lr 0.003 -o mlp-train.dtcp"
"$dtc" compile "$demo/models/mlp.onnx" --shape batch=32 --train --loss cross_entropy \
  --optimizer adamw --lr 0.003 -o "$demo/mlp-train.dtcp"
echo
echo "== dtc run mlp-train.dtcp --data digits --steps 200 --export mlp-trained.onnx (every 20th step shown)"
"$dtc" run "$demo/mlp-train.dtcp" --data "$demo/digits" --steps 200 \
  --export "$demo/mlp-trained.onnx" | awk 'NR == 1 || /^step/ && ($2 == 1 || $2 % 20 == 0) || /^exported/'

# Training the small GPT on English text, one token per byte (the GPL that
# Debian ships; the vocabulary is 256).
python3 -c "
import numpy as np, sys
np.frombuffer(open('/usr/share/common-licenses/GPL-3', 'rb').read(), np.uint8).astype(np.uint16).tofile(sys.argv[1])
" "$demo/gpl.bin"
echo
echo "== dtc compile gpt.onnx --shape batch=8 --shape seq=64 --train --lr 0.003 --schedule cosine --warmup 20 --total-steps 200 -o gpt-train.dtcp"
"$dtc" compile "$demo/models/gpt.onnx" --shape batch=8 --shape seq=64 --train --lr 0.003 \
  --schedule cosine --warmup 20 --total-steps 200 -o "$demo/gpt-train.dtcp" | grep -E "^compiled|training:"
echo
echo "== dtc run gpt-train.dtcp --data gpl.bin --steps 200 (every 20th step shown; ln 256 = 5.55 is a uniform guess)"
"$dtc" run "$demo/gpt-train.dtcp" --data "$demo/gpl.bin" --steps 200 \
  | awk 'NR == 1 || /^step/ && ($2 == 1 || $2 % 20 == 0)'
