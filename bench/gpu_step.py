#!/usr/bin/env python3
"""GPT-2 small on one NVIDIA GPU: dtc's CUDA backend against PyTorch, bf16.

Usage:
    python3 bench/gpu_step.py [--dtc build/bin/dtc] [--steps S] [--batch B] [--keep DIR]

Needs a GPU, torch with CUDA, transformers and onnxscript (pip); not run in
CI (it says so and exits 2 without a GPU).

The model is GPT-2 small's shape (12 layers, hidden 768, 12 heads, sequence
1024, vocabulary 50257), transformers' GPT2LMHeadModel with random weights
(bench/training_step.py's build), exported with PyTorch's default exporter.
  training  AdamW (lr 1e-4), cross-entropy over every position, bf16
            compute with fp32 weights: PyTorch eager under
            torch.autocast(bfloat16), torch.compile of the same when it
            works, and `dtc compile --train --precision bf16 --backend cuda`
            run by `dtc run --backend cuda` (its "time X ms" per step);
  inference the forward alone: PyTorch eager in bf16 and `dtc run --repeat`.
The first 3 steps are warm-up; figures are medians of the rest. Losses must
agree within bf16's precision (rtol 2e-2), else the benchmark fails.

Prints per engine: ms per step, tokens/s, and model FLOPs utilisation
against the bf16 dense peak (--peak, default 989 TFLOP/s, an H100 SXM's or
H200's), with 6 N T + 12 L H S T FLOPs a training step (N parameters, T
tokens, L layers, H hidden, S sequence) and a third of it for inference.
The issue's floors: dtc at least 1.0x PyTorch eager and 40% MFU training.
"""

import argparse
import contextlib
import io
import os
import re
import statistics
import subprocess
import sys
import tempfile
import time
import warnings

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from training_step import build  # noqa: E402
from gpu_torch_step import train_steps  # noqa: E402

LAYERS, HIDDEN, HEADS, VOCAB, SEQ = 12, 768, 12, 50257, 1024
WARMUP = 3


def model_flops(params, tokens):
    return 6 * params * tokens + 12 * LAYERS * HIDDEN * SEQ * tokens


def torch_training(model, ids, labels, batch, steps, compiled):
    import torch
    batches = [(torch.from_numpy(ids[s * batch:(s + 1) * batch]).cuda(),
                torch.from_numpy(labels[s * batch:(s + 1) * batch]).cuda())
               for s in range(steps)]
    return train_steps(model, batches, steps, compiled)


def torch_inference(model, ids, batch, steps):
    import torch
    model = model.to("cuda", dtype=torch.bfloat16).eval()
    x = torch.from_numpy(ids[:batch]).cuda()
    ms = []
    with torch.no_grad():
        for _ in range(steps):
            torch.cuda.synchronize()
            start = time.perf_counter()
            model(x)
            torch.cuda.synchronize()
            ms.append((time.perf_counter() - start) * 1e3)
    return ms


def run(cmd):
    out = subprocess.run(cmd, capture_output=True, text=True)
    if out.returncode:
        sys.exit(f"{' '.join(cmd)} failed:\n{out.stderr}")
    return out.stdout


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    ap.add_argument("--dtc", default=os.path.join(root, "build", "bin", "dtc"))
    ap.add_argument("--steps", type=int, default=13, help="steps, warm-up included")
    ap.add_argument("--batch", type=int, default=8)
    ap.add_argument("--peak", type=float, default=989e12, help="bf16 dense FLOP/s")
    ap.add_argument("--keep", metavar="DIR", help="work in DIR and keep models and plans")
    args = ap.parse_args()
    warnings.filterwarnings("ignore")
    import torch
    if not torch.cuda.is_available():
        print("gpu_step: no CUDA GPU here (torch.cuda.is_available() is false): not run")
        return 2
    work = args.keep or tempfile.mkdtemp(prefix="dtc-gpu-bench-")
    os.makedirs(work, exist_ok=True)
    batch, steps = args.batch, args.steps
    model = build(LAYERS, HIDDEN, HEADS, VOCAB, SEQ)
    params = sum(p.numel() for p in model.parameters())
    onnx = os.path.join(work, "gpt2.onnx")
    with contextlib.redirect_stdout(io.StringIO()):
        torch.onnx.export(model, (torch.zeros(batch, SEQ, dtype=torch.long),), onnx,
                          input_names=["input_ids"], dynamo=True)
    rng = np.random.RandomState(1)
    tokens = rng.randint(0, VOCAB, (batch * steps, SEQ + 1)).astype(np.int64)
    ids, labels = tokens[:, :-1].copy(), tokens[:, 1:].copy()
    data = os.path.join(work, "data")
    os.makedirs(data, exist_ok=True)
    np.save(os.path.join(data, "input_ids.npy"), ids)
    np.save(os.path.join(data, "labels.npy"), labels)
    train_tokens = batch * SEQ
    flops = model_flops(params, train_tokens)
    print(f"GPT-2 small ({params / 1e6:.1f} M parameters), batch {batch} x {SEQ} tokens, "
          f"bf16, on {torch.cuda.get_device_name()} (torch {torch.__version__}), "
          f"{steps - WARMUP} timed steps")

    def line(what, ms, step_flops):
        m = statistics.median(ms[WARMUP:])
        print(f"  {what:28s} {m:9.2f} ms  {train_tokens / m * 1e3:12.0f} tokens/s  "
              f"MFU {step_flops / (m / 1e3) / args.peak * 100:5.1f}%")
        return m

    import copy
    t_losses, t_ms = torch_training(copy.deepcopy(model), ids, labels, batch, steps, False)
    eager = line("training PyTorch eager", t_ms, flops)
    try:
        _, c_ms = torch_training(copy.deepcopy(model), ids, labels, batch, steps, True)
        line("training torch.compile", c_ms, flops)
    except Exception as e:  # torch.compile needs a working Triton
        print(f"  training torch.compile      not run: {type(e).__name__}: {str(e)[:120]}")
    plan = os.path.join(work, "train.dtcp")
    run([args.dtc, "compile", onnx, "--train", "--precision", "bf16", "--lr", "1e-4",
         "--backend", "cuda", "-o", plan])
    out = run([args.dtc, "run", plan, "--backend", "cuda", "--data", data, "--steps", str(steps),
               "--no-shuffle"])
    print("  " + next((l for l in out.splitlines() if l.startswith("run: on")), "run: ?"))
    found = re.findall(r"step \d+ loss ([0-9.]+) lr \S+ time ([0-9.]+) ms", out)
    d_losses, d_ms = [float(l) for l, _ in found], [float(t) for _, t in found]
    ok = len(d_losses) == steps and np.allclose(d_losses, t_losses, rtol=2e-2)
    dtc = line("training dtc --backend cuda", d_ms, flops)
    print(f"  dtc / PyTorch eager: {eager / dtc:.2f}x throughput")
    if not ok:
        print(f"FAIL: dtc's losses {d_losses[:4]} differ from PyTorch's {t_losses[:4]}")

    i_ms = torch_inference(copy.deepcopy(model), ids, batch, steps)
    line("inference PyTorch eager", i_ms, flops / 3)
    iplan = os.path.join(work, "infer.dtcp")
    run([args.dtc, "compile", onnx, "--precision", "bf16", "--backend", "cuda", "-o", iplan])
    inputs = os.path.join(work, "in")
    os.makedirs(inputs, exist_ok=True)
    np.save(os.path.join(inputs, "input_ids.npy"), ids[:batch])
    out = run([args.dtc, "run", iplan, "--backend", "cuda", "--inputs", inputs, "--repeat",
               str(steps)])
    median = re.search(r"median ([0-9.]+) ms", out)
    if median:
        m = float(median.group(1))
        print(f"  {'inference dtc --backend cuda':28s} {m:9.2f} ms  "
              f"{train_tokens / m * 1e3:12.0f} tokens/s  "
              f"MFU {flops / 3 / (m / 1e3) / args.peak * 100:5.1f}%")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
