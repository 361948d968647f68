#!/usr/bin/env bash
# Packs what a bare GPU machine needs to run dtc's GPU checks, built here:
# dtc-run (`dtc run` without the compiler) and the libraries it links that
# such a machine may lack (not glibc or libstdc++, which it has newer, nor
# the CUDA libraries, which dtc opens from the machine's own),
# dtc-gpu-plan-tests (each instruction of a plan on the GPU against the CPU
# backend; the attention kernels against a reference), dtc-gpu-gemm-bench (dtc's cuBLASLt GEMMs against cuBLAS), the
# CUDA plans of the checks compiled here with their inputs
# and the CPU's results, and check.sh, which runs them there:
#
#   scripts/gpu_bundle.sh [DIR]           # here (default DIR: gpu-bundle)
#   bash DIR/check.sh                     # there: checks, then the benchmark
#
# DIR holds dtc.tar.xz (its size is printed) and check.sh; check.sh unpacks
# the archive under /tmp and says what passed. The checks are every
# instruction of GPT (fp32; bf16 over dp 2 x tp 2), ResNet (fp32, bf16),
# BERT (bf16, its padding mask as attention's bias), Llama (bf16) and
# transformers' GPT-2 (fp32, bf16: packed attention) training steps
# against the CPU backend, then those of
# tests/gpu/models.test that run one rank (two ranks need mpirun, which a
# bare machine lacks): inference outputs against the CPU's, training losses
# against the CPU's (GPT fp32 and bf16, on cuDNN's attention and on dtc's
# flash kernels, an exported ResNet in fp32 and bf16, BERT, Llama), then
# the benchmarks: GPT-2 small's bf16 GEMMs against cuBLAS, and its bf16
# training step against PyTorch eager (and torch.compile). check.sh
# (scripts/gpu_check.sh) orders them by what they say (a smoke test, the
# benchmark's dtc side, each plan's kernels, losses, PyTorch's side), bounds
# each in time and the whole by a budget, and writes every log to
# $OUT/dtc-gpu-logs.txt. The folder is ignored by git: the device call
# carries it (carry ["gpu-bundle"]).
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
build="${BUILD_DIR:-$root/build}"
out="$(realpath -m "${1:-$root/gpu-bundle}")"
dtc="$build/bin/dtc"
run="$build/bin/dtc-run"
kernels="$build/bin/dtc-gpu-plan-tests"
gemms="$build/bin/dtc-gpu-gemm-bench"
for tool in "$dtc" "$run" "$kernels" "$gemms"; do
  if [[ ! -x "$tool" ]]; then
    echo "gpu_bundle: $tool is missing: build first (scripts/setup.sh)" >&2
    exit 1
  fi
done
stage="$(mktemp -d)"
trap 'rm -rf "$stage"' EXIT
mkdir -p "$stage/dtc/bin" "$stage/dtc/lib" "$stage/dtc/checks"
cp "$run" "$kernels" "$gemms" "$stage/dtc/bin/"
# Every library they load but the C and C++ runtimes and the loader.
ldd "$run" "$kernels" "$gemms" | awk '/=> \//{print $3}' | sort -u | while read -r lib; do
  case "$(basename "$lib")" in
    libc.so*|libm.so*|libpthread.so*|libdl.so*|librt.so*|libstdc++.so*|libgcc_s.so*|ld-linux*) ;;
    *) cp -L "$lib" "$stage/dtc/lib/" ;;
  esac
done
# OpenBLAS finds its kernels by itself; oneDNN too. Nothing else to carry.

checks="$stage/dtc/checks"
python3 "$root/tests/models/generate.py" "$checks/models" > /dev/null
python3 - "$checks" <<'PY'
import numpy as np, os, sys
d = sys.argv[1]
r = np.random.RandomState(0)
os.makedirs(f"{d}/mlp-in", exist_ok=True)
np.save(f"{d}/mlp-in/x.npy", r.randn(8, 64).astype(np.float32))
g = np.random.default_rng(0)
os.makedirs(f"{d}/gpt-data", exist_ok=True)
np.save(f"{d}/gpt-data/input_ids.npy", g.integers(0, 128, (32, 32)))
np.save(f"{d}/gpt-data/labels.npy", g.integers(0, 128, (32, 32)))
os.makedirs(f"{d}/cnn-data", exist_ok=True)
r = np.random.RandomState(0)
np.save(f"{d}/cnn-data/pixel_values.npy", r.randn(16, 3, 32, 32).astype(np.float32))
np.save(f"{d}/cnn-data/labels.npy", r.randint(0, 4, (16, 32, 4)))
# BERT's padding mask (attention with a bias): every sequence padded at
# its own length.
os.makedirs(f"{d}/bert-data", exist_ok=True)
mask = np.ones((16, 8), np.int64)
for i in range(16):
    mask[i, r.randint(1, 9):] = 0
np.save(f"{d}/bert-data/input_ids.npy", r.randint(0, 64, (16, 8)))
np.save(f"{d}/bert-data/attention_mask.npy", mask)
np.save(f"{d}/bert-data/labels.npy", r.randint(0, 32, (16, 8)))
PY
small="gpt:layers=2,hidden=64,heads=4,seq=32,vocab=128,batch=8"
"$dtc" compile "$checks/models/mlp.onnx" --shape batch=8 --backend cuda \
  -o "$checks/mlp.dtcp" > /dev/null
"$dtc" run "$checks/mlp.dtcp" --inputs "$checks/mlp-in" --outputs "$checks/mlp-in" > /dev/null
"$dtc" compile "$small" --train --backend cuda -o "$checks/gpt.dtcp" > /dev/null
"$dtc" run "$checks/gpt.dtcp" --data "$checks/gpt-data" --steps 4 --log-json "$checks/gpt-cpu.jsonl" > /dev/null
"$dtc" compile "$small" --train --precision bf16 --backend cuda -o "$checks/bf16.dtcp" > /dev/null
# Each instruction against the CPU backend (dtc-gpu-plan-tests), of a bf16
# step split over dp 2 x tp 2 too.
"$dtc" compile "$small" --train --precision bf16 --dp 2 --tp 2 --backend cuda \
  -o "$checks/bf16-dp2-tp2.dtcp" > /dev/null
"$dtc" run "$checks/bf16.dtcp" --data "$checks/gpt-data" --steps 4 --log-json "$checks/bf16-cpu.jsonl" > /dev/null
"$dtc" compile "$root/tests/models/exported/resnet.onnx" --shape batch=8 --train --backend cuda \
  -o "$checks/cnn.dtcp" > /dev/null
"$dtc" compile "$root/tests/models/exported/resnet.onnx" --shape batch=8 --train --precision bf16 \
  --backend cuda -o "$checks/cnn-bf16.dtcp" > /dev/null
cp "$root/tests/models/exported/resnet.onnx" "$root/tests/models/exported/resnet.onnx.data" \
  "$checks/"
"$dtc" compile "$root/tests/models/exported/bert.onnx" --shape batch=4 --train --precision bf16 \
  --backend cuda -o "$checks/bert.dtcp" > /dev/null
cp "$root/tests/models/exported/bert.onnx" "$root/tests/models/exported/bert.onnx.data" "$checks/"
"$dtc" run "$checks/bert.dtcp" --data "$checks/bert-data" --steps 4 --log-json "$checks/bert-cpu.jsonl" > /dev/null
# Llama in bf16: RMSNorm row kernels, f32 rotary tables, the loss one row kernel.
"$dtc" compile "$root/tests/models/exported/llama.onnx" --train --precision bf16 --backend cuda \
  -o "$checks/llama.dtcp" > /dev/null
cp "$root/tests/models/exported/llama.onnx" "$root/tests/models/exported/llama.onnx.data" "$checks/"
cp -r "$root/tests/models/exported/llama_train" "$checks/llama-data"
"$dtc" run "$checks/llama.dtcp" --data "$checks/llama-data" --no-shuffle --steps 4 \
  --log-json "$checks/llama-cpu.jsonl" > /dev/null
"$dtc" run "$checks/cnn.dtcp" --data "$checks/cnn-data" --steps 4 --log-json "$checks/cnn-cpu.jsonl" > /dev/null
"$dtc" run "$checks/cnn-bf16.dtcp" --data "$checks/cnn-data" --steps 4 \
  --log-json "$checks/cnn-bf16-cpu.jsonl" > /dev/null
# transformers' GPT-2 as PyTorch exports it: attention reading q, k and v
# packed in c_attn's product (fp32 and bf16).
for precision in fp32 bf16; do
  "$dtc" compile "$root/tests/models/exported/gpt2.onnx" --shape batch=2 --train --lr 0.01 \
    --precision "$precision" --backend cuda -o "$checks/hf-gpt2-$precision.dtcp" > /dev/null
  "$dtc" run "$checks/hf-gpt2-$precision.dtcp" --data "$root/tests/models/exported/gpt2_train" \
    --no-shuffle --steps 4 --log-json "$checks/hf-gpt2-$precision-cpu.jsonl" > /dev/null
done
# Its inference in bf16 (weights cast in the prologue, logits written f32).
"$dtc" compile "$root/tests/models/exported/gpt2.onnx" --shape batch=2 --precision bf16 \
  --backend cuda -o "$checks/hf-gpt2-infer-bf16.dtcp" > /dev/null
cp "$root/tests/models/exported/gpt2.onnx" "$root/tests/models/exported/gpt2.onnx.data" "$checks/"
cp -r "$root/tests/models/exported/gpt2_train" "$checks/hf-gpt2-data"
# Split by heads over two ranks (--tp 2): c_attn laid out by heads in the
# step, the attention interleaved ([B, S, H, 3, D]), bf16.
"$dtc" compile "$root/tests/models/exported/gpt2_heads.onnx" --shape batch=4 --train --lr 0.01 \
  --precision bf16 --tp 2 --backend cuda -o "$checks/hf-gpt2-heads-tp2.dtcp" > /dev/null
cp "$root/tests/models/exported/gpt2_heads.onnx" "$root/tests/models/exported/gpt2_heads.onnx.data" \
  "$checks/"
# A tied vocabulary of 4099 over two ranks (--tp 2), bf16: padded to 4224,
# the table split by rows (gathers and scatter-adds of a block of rows,
# skip_outside) and the loss by classes.
python3 - "$root/tests/models" "$checks/odd-vocab.onnx" <<'PY'
import sys
sys.path.insert(0, sys.argv[1])
import generate, onnx
onnx.save(generate.build_gpt(vocab=4099, tied=True), sys.argv[2])
PY
"$dtc" compile "$checks/odd-vocab.onnx" --shape batch=8 --shape seq=16 --train --precision bf16 \
  --tp 2 --backend cuda -o "$checks/odd-vocab-tp2.dtcp" > /dev/null
# The benchmark: GPT-2 small's shape, dtc's own generated model (seeded
# weights: nothing to carry), bf16 training.
"$dtc" compile "gpt:layers=12,hidden=768,heads=12,seq=1024,vocab=50257,batch=8" --train \
  --precision bf16 --backend cuda --preset h100-sxm -o "$checks/gpt2.dtcp" > /dev/null
cp "$root/tests/tools/same_losses.py" "$root/bench/gpu_torch_step.py" "$checks/"
cp "$checks/models/mlp.onnx" "$checks/"
rm -rf "$checks/models"
mkdir -p "$out"
# A plan names its model by path: check.sh gives the carried ones (--model).
tar -C "$stage" -cJf "$out/dtc.tar.xz" dtc
cp "$root/scripts/gpu_check.sh" "$out/check.sh"
echo "gpu_bundle: $out/dtc.tar.xz ($(du -h "$out/dtc.tar.xz" | cut -f1)) and $out/check.sh"
