#!/usr/bin/env bash
# dtc's GPU checks on a machine with an NVIDIA GPU and no dtc build (the
# bundle's check.sh; scripts/gpu_bundle.sh makes it and dtc.tar.xz beside
# it): unpacks dtc-run and its libraries under $DTC_GPU_WORK (/tmp/dtc-gpu),
# finds the CUDA libraries (the toolkit's, and the pip wheels' beside
# PyTorch), then runs each check with its output kept in the work folder,
# printing PASS or FAIL (with the end of its output) per check, and the
# benchmark's figures. Exit status: the number of failed checks.
set -uo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
work="${DTC_GPU_WORK:-/tmp/dtc-gpu}"
rm -rf "$work" && mkdir -p "$work"
python3 -c "import sys, tarfile; tarfile.open(sys.argv[1]).extractall(sys.argv[2])" \
  "$here/dtc.tar.xz" "$work" || exit 1
d="$work/dtc"
cuda_libs="$(python3 - <<'PY'
import glob, os
dirs = [p for p in ("/usr/local/cuda/lib64", "/usr/local/cuda/targets/x86_64-linux/lib")
        if os.path.isdir(p)]
try:
    import nvidia
    for root in nvidia.__path__:
        dirs += sorted(glob.glob(os.path.join(root, "*", "lib")))
except ImportError:
    pass
print(":".join(dirs))
PY
)"
# The driver's libcuda where the loader does not look by itself.
for driver in /usr/local/nvidia/lib64 /usr/local/nvidia/lib; do
  [[ -e "$driver/libcuda.so.1" ]] && cuda_libs="$cuda_libs:$driver"
done
export LD_LIBRARY_PATH="$d/lib${cuda_libs:+:$cuda_libs}${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
run="$d/bin/dtc-run"
c="$d/checks"
if ! nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader; then
  echo "check.sh: no NVIDIA GPU here (nvidia-smi failed): nothing checked"
  exit 2
fi
failed=0
check() {
  local name="$1"
  shift
  if "$@" > "$work/$name.log" 2>&1; then
    echo "PASS $name"
  else
    echo "FAIL $name"
    tail -n 25 "$work/$name.log"
    failed=$((failed + 1))
  fi
}
losses() { # NAME PLAN DATA RTOL [dtc-run options]
  local name="$1" plan="$2" data="$3" rtol="$4"
  shift 4
  "$run" "$plan" --data "$data" --steps 4 --backend cuda --log-json "$work/$name-gpu.jsonl" "$@" &&
    python3 "$c/same_losses.py" "$c/$name-cpu.jsonl" "$work/$name-gpu.jsonl" --rtol "$rtol"
}
plans="$c/gpt.dtcp,$c/bf16-dp2-tp2.dtcp,$c/cnn.dtcp,$c/cnn-bf16.dtcp,$c/bert.dtcp,$c/llama.dtcp"
plans="$plans,$c/hf-gpt2-fp32.dtcp,$c/hf-gpt2-bf16.dtcp,$c/hf-gpt2-infer-bf16.dtcp"
plans="$plans,$c/hf-gpt2-heads-tp2.dtcp"
check kernels env DTC_GPU_PLANS="$plans" \
  "$d/bin/dtc-gpu-plan-tests" --gtest_filter='GpuPlans.*'
# The attention kernels (dtc's flash kernels, cuDNN's fused attention)
# against a double-precision reference.
check attention "$d/bin/dtc-gpu-plan-tests" --gtest_filter='GpuAttention.*'
grep '^attention ' "$work/attention.log"
check mlp-inference "$run" "$c/mlp.dtcp" --model "$c/mlp.onnx" --inputs "$c/mlp-in" --backend cuda --check
check gpt-fp32-training losses gpt "$c/gpt.dtcp" "$c/gpt-data" 1e-4
check gpt-bf16-training losses bf16 "$c/bf16.dtcp" "$c/gpt-data" 2e-2
grep -h '^run: on' "$work/gpt-bf16-training.log" || true
# The same on dtc's flash kernels (cuDNN's fused attention takes it above).
DTC_ATTENTION_KERNELS=flash check gpt-bf16-training-flash losses bf16 "$c/bf16.dtcp" \
  "$c/gpt-data" 2e-2
check resnet-training losses cnn "$c/cnn.dtcp" "$c/cnn-data" 1e-3 --model "$c/resnet.onnx"
# bf16: cuDNN's bf16 convolutions, generated bf16 pools and their gradients.
check resnet-bf16-training losses cnn-bf16 "$c/cnn-bf16.dtcp" "$c/cnn-data" 2e-2 \
  --model "$c/resnet.onnx"
# BERT's padding mask as attention's bias, bf16 (cuDNN's bias tensor).
check bert-bf16-training losses bert "$c/bert.dtcp" "$c/bert-data" 2e-2 --model "$c/bert.onnx"
# Llama's RMSNorms and loss as row kernels, bf16.
check llama-bf16-training losses llama "$c/llama.dtcp" "$c/llama-data" 2e-2 \
  --model "$c/llama.onnx" --no-shuffle
# transformers' GPT-2: attention on c_attn's packed product.
check hf-gpt2-fp32-training losses hf-gpt2-fp32 "$c/hf-gpt2-fp32.dtcp" "$c/hf-gpt2-data" 1e-4 \
  --model "$c/gpt2.onnx" --no-shuffle
check hf-gpt2-bf16-training losses hf-gpt2-bf16 "$c/hf-gpt2-bf16.dtcp" "$c/hf-gpt2-data" 2e-2 \
  --model "$c/gpt2.onnx" --no-shuffle
# The benchmarks: GPT-2 small's GEMMs, dtc's cuBLASLt against cuBLAS;
# then its bf16 training step, dtc then PyTorch.
check gemms-vs-cublas "$d/bin/dtc-gpu-gemm-bench"
cat "$work/gemms-vs-cublas.log"
python3 - "$work/gpt2-data" <<'PY'
import numpy as np, os, sys
os.makedirs(sys.argv[1], exist_ok=True)
r = np.random.RandomState(1)
t = r.randint(0, 50257, (8 * 13, 1025)).astype(np.int64)
np.save(os.path.join(sys.argv[1], "input_ids.npy"), t[:, :-1].copy())
np.save(os.path.join(sys.argv[1], "labels.npy"), t[:, 1:].copy())
PY
check gpt2-small-dtc "$run" "$c/gpt2.dtcp" --data "$work/gpt2-data" --steps 13 --backend cuda \
  --log-json "$work/gpt2.jsonl"
grep -h '^run: on' "$work/gpt2-small-dtc.log" || true
[[ -s "$work/gpt2.jsonl" ]] && python3 "$c/gpu_torch_step.py" "$work/gpt2.jsonl"
echo "$failed check(s) failed; logs in $work"
exit "$failed"
