#!/usr/bin/env bash
# dtc's GPU checks on a machine with an NVIDIA GPU and no dtc build (the
# bundle's check.sh; scripts/gpu_bundle.sh makes it and dtc.tar.xz beside
# it): unpacks dtc-run and its libraries under $DTC_GPU_WORK (/tmp/dtc-gpu),
# finds the CUDA libraries (the toolkit's, and the pip wheels' beside
# PyTorch), then runs each check with its output kept in the work folder,
# printing PASS, FAIL (with the end of its output) or SKIP per check, and
# the benchmark's figures. Every check has a time limit and the whole run a
# budget ($DTC_GPU_BUDGET seconds, default 480): what is past it is not
# started. The checks that say most come first: a smoke test, the
# benchmark's dtc side (and its step profiled, its trace written to
# $OUT/gpt2-gpu-trace.json for dtc simulate --compare-trace), each plan's
# kernels, the losses, PyTorch's side
# (torch.compile last), then compute-sanitizer's memcheck and racecheck
# where the machine has it. Every check's output also goes to
# $OUT/dtc-gpu-logs.txt when $OUT is set (the device tool's folder), so
# the whole of it comes back. Exit status: the number of failed checks.
set -uo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
work="${DTC_GPU_WORK:-/tmp/dtc-gpu}"
budget="${DTC_GPU_BUDGET:-480}"
rm -rf "$work" && mkdir -p "$work"
logs="$work/dtc-gpu-logs.txt"
[[ -n "${OUT:-}" ]] && mkdir -p "$OUT" && logs="$OUT/dtc-gpu-logs.txt"
: > "$logs"
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
export PYTHONUNBUFFERED=1
run="$d/bin/dtc-run"
c="$d/checks"
if ! nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader; then
  echo "check.sh: no NVIDIA GPU here (nvidia-smi failed): nothing checked"
  exit 2
fi
# The bundle's programs start here (a C library older than the build
# machine's would stop them before any check: say so once).
for tool in dtc-run dtc-gpu-plan-tests dtc-gpu-gemm-bench; do
  if ldd "$d/bin/$tool" 2>&1 | grep "not found"; then
    echo "check.sh: $tool does not start on this machine (above: what it lacks)"
    exit 3
  fi
done
started=$SECONDS
failed=0
check() { # [--limit S] NAME COMMAND...: PASS, FAIL or SKIP, its output in the logs
  local limit=120
  [[ "$1" == --limit ]] && limit="$2" && shift 2
  local name="$1"
  shift
  local left=$((budget - (SECONDS - started)))
  if ((left < 10)); then
    echo "SKIP $name (the ${budget} s budget is spent)"
    return
  fi
  ((limit > left)) && limit=$left
  local begin=$SECONDS status=0
  # Through bash, so that a function (losses) runs under the limit too.
  timeout -k 10 "$limit" bash -c '"$@"' check "$@" > "$work/$name.log" 2>&1 || status=$?
  local took=$((SECONDS - begin))
  { echo "== $name: exit $status after $took s"; cat "$work/$name.log"; } >> "$logs"
  if ((status == 124 || status == 137)); then
    echo "FAIL $name (no end after $limit s)"
    tail -n 15 "$work/$name.log"
    failed=$((failed + 1))
  elif ((status != 0)); then
    echo "FAIL $name ($took s)"
    tail -n 25 "$work/$name.log"
    failed=$((failed + 1))
  elif grep -q '^\[  SKIPPED \]' "$work/$name.log"; then
    echo "FAIL $name: skipped on a GPU machine:"
    grep -m 3 -i "skip" "$work/$name.log"
    failed=$((failed + 1))
  else
    echo "PASS $name ($took s)"
  fi
  # Where each instruction ran (GPU kernels, or the host for want of one).
  grep -h '^run: on\|on the host' "$work/$name.log" | head -n 3
}
losses() { # NAME PLAN DATA RTOL [dtc-run options]
  local name="$1" plan="$2" data="$3" rtol="$4"
  shift 4
  "$run" "$plan" --data "$data" --steps 4 --backend cuda --log-json "$work/$name-gpu.jsonl" "$@" &&
    python3 "$c/same_losses.py" "$c/$name-cpu.jsonl" "$work/$name-gpu.jsonl" --rtol "$rtol"
}
export -f losses
export run c work
# A smoke test: an inference against the CPU's outputs, a GPT's losses.
check mlp-inference "$run" "$c/mlp.dtcp" --model "$c/mlp.onnx" --inputs "$c/mlp-in" --backend cuda --check
if grep -q "no usable NVIDIA GPU" "$work/mlp-inference.log"; then
  echo "check.sh: dtc sees no usable GPU here (above): nothing else to check"
  exit 2
fi
check gpt-fp32-training losses gpt "$c/gpt.dtcp" "$c/gpt-data" 1e-4
# The benchmark's dtc side: GPT-2 small's bf16 training step.
python3 - "$work/gpt2-data" <<'PY'
import numpy as np, os, sys
os.makedirs(sys.argv[1], exist_ok=True)
r = np.random.RandomState(1)
t = r.randint(0, 50257, (8 * 13, 1025)).astype(np.int64)
np.save(os.path.join(sys.argv[1], "input_ids.npy"), t[:, :-1].copy())
np.save(os.path.join(sys.argv[1], "labels.npy"), t[:, 1:].copy())
PY
check --limit 150 gpt2-small-dtc "$run" "$c/gpt2.dtcp" --data "$work/gpt2-data" --steps 13 \
  --backend cuda --log-json "$work/gpt2.jsonl"
grep -h '^step' "$work/gpt2-small-dtc.log" | tail -n 2
[[ -s "$work/gpt2.jsonl" ]] &&
  check --limit 60 gpt2-small-figures python3 "$c/gpu_torch_step.py" "$work/gpt2.jsonl" \
    --dtc-only && cat "$work/gpt2-small-figures.log"
# The same step timed instruction by instruction (a synchronize after each:
# launch-bound kernels read long), per op class, and as a trace in the
# simulator's format: `dtc simulate gpt2.dtcp --compare-trace
# gpt2-gpu-trace.json` here sets the cost model's H100 against it.
traces="${OUT:-$work}"
check --limit 90 gpt2-small-profile "$run" "$c/gpt2.dtcp" --data "$work/gpt2-data" --steps 5 \
  --backend cuda --profile --trace "$traces/gpt2-gpu-trace.json"
grep -A 12 -i '^profile' "$work/gpt2-small-profile.log" | head -n 14
# Every instruction of each plan against the CPU backend, a plan a check.
for plan in gpt bf16-dp2-tp2 hf-gpt2-bf16 hf-gpt2-fp32 hf-gpt2-infer-bf16 hf-gpt2-heads-tp2 \
            odd-vocab-tp2 llama bert cnn cnn-bf16; do
  check --limit 90 "kernels-$plan" env DTC_GPU_PLANS="$c/$plan.dtcp" \
    "$d/bin/dtc-gpu-plan-tests" --gtest_filter='GpuPlans.*'
  grep -h ' on .*generated kernels' "$work/kernels-$plan.log"
done
# The attention kernels (dtc's flash kernels, cuDNN's fused attention)
# against a double-precision reference: how many cases, the worst errors.
check attention "$d/bin/dtc-gpu-plan-tests" --gtest_filter='GpuAttention.*'
grep -c '^attention ' "$work/attention.log" | sed 's/^/attention cases: /'
grep '^attention ' "$work/attention.log" | grep -o 'worst relative error.*' | sort | tail -n 3
# Training losses against the CPU's.
check gpt-bf16-training losses bf16 "$c/bf16.dtcp" "$c/gpt-data" 2e-2
# The same on dtc's flash kernels (cuDNN's fused attention takes it above).
DTC_ATTENTION_KERNELS=flash check gpt-bf16-training-flash losses bf16 "$c/bf16.dtcp" \
  "$c/gpt-data" 2e-2
# transformers' GPT-2: attention on c_attn's packed product.
check hf-gpt2-bf16-training losses hf-gpt2-bf16 "$c/hf-gpt2-bf16.dtcp" "$c/hf-gpt2-data" 2e-2 \
  --model "$c/gpt2.onnx" --no-shuffle
check hf-gpt2-fp32-training losses hf-gpt2-fp32 "$c/hf-gpt2-fp32.dtcp" "$c/hf-gpt2-data" 1e-4 \
  --model "$c/gpt2.onnx" --no-shuffle
# Llama's RMSNorms and loss as row kernels, bf16.
check llama-bf16-training losses llama "$c/llama.dtcp" "$c/llama-data" 2e-2 \
  --model "$c/llama.onnx" --no-shuffle
# BERT's padding mask as attention's bias, bf16 (cuDNN's bias tensor).
check bert-bf16-training losses bert "$c/bert.dtcp" "$c/bert-data" 2e-2 --model "$c/bert.onnx"
check resnet-training losses cnn "$c/cnn.dtcp" "$c/cnn-data" 1e-3 --model "$c/resnet.onnx"
# bf16: cuDNN's bf16 convolutions, generated bf16 pools and their gradients.
check resnet-bf16-training losses cnn-bf16 "$c/cnn-bf16.dtcp" "$c/cnn-data" 2e-2 \
  --model "$c/resnet.onnx"
# GPT-2 small's GEMMs: dtc's cuBLASLt against cuBLAS.
check gemms-vs-cublas "$d/bin/dtc-gpu-gemm-bench"
cat "$work/gemms-vs-cublas.log"
# PyTorch's side of the benchmark, eager then torch.compile.
[[ -s "$work/gpt2.jsonl" ]] &&
  check --limit 240 gpt2-small-vs-pytorch python3 "$c/gpu_torch_step.py" "$work/gpt2.jsonl" &&
  cat "$work/gpt2-small-vs-pytorch.log"
# NVIDIA's compute-sanitizer, where the machine has it: out-of-bounds and
# misaligned accesses (memcheck) and shared-memory races (racecheck: the
# row kernels' block reductions, the flash kernels' tiles) in a small
# GPT's every kernel and in the attention kernels.
if command -v compute-sanitizer > /dev/null; then
  for tool in memcheck racecheck; do
    DTC_GPU_PLANS="$c/gpt.dtcp" check --limit 150 "sanitizer-$tool-plan" compute-sanitizer \
      --tool "$tool" --error-exitcode 1 "$d/bin/dtc-gpu-plan-tests" --gtest_filter='GpuPlans.*'
    check --limit 150 "sanitizer-$tool-attention" compute-sanitizer --tool "$tool" \
      --error-exitcode 1 "$d/bin/dtc-gpu-plan-tests" \
      --gtest_filter='GpuAttention.ForwardAndBackwardAgainstADoubleReference'
  done
fi
echo "$failed check(s) failed after $((SECONDS - started)) s; logs in $logs"
exit "$failed"
