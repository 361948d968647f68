#!/usr/bin/env python3
"""Training step time: dtc's CPU runtime against PyTorch eager on the same model.

Usage:
    python3 bench/training_step.py [--dtc build/bin/dtc] [--threads N] [--steps S]
                                   [--rounds K] [--keep DIR]

Needs torch, transformers and onnxscript (pip); not run in CI.

For each GPT-2-shaped model below, builds transformers' GPT2LMHeadModel with
random weights (untied embeddings, no dropout), exports it with PyTorch's
default exporter (torch.onnx.export(dynamo=True), static shape) and trains
it both ways on the same batches of random token ids, AdamW (lr 1e-3, no
weight decay), cross-entropy over every position:
  PyTorch  eager, torch.set_num_threads(N): forward, loss, backward,
           optimizer.step(), zero_grad(set_to_none=True), timed per step;
  dtc      `dtc compile --train` once, then `dtc run --data DIR --steps S
           --no-shuffle --threads N`, its "time X ms" per step (the whole
           step: inputs in, forward, backward, update).
The first 3 steps are warm-up in both; the figure is the median of the
rest. The engines alternate for K rounds (default 3), each keeping its best
median. The losses of every step must agree (rtol 1e-4), else the benchmark
fails: timing a different computation is worthless.

Prints one line per model: PyTorch ms, dtc ms, and dtc/PyTorch (below 1:
dtc is faster). Exit status 0 when every model's losses matched.
"""

import argparse
import copy
import os
import re
import statistics
import subprocess
import sys
import tempfile
import time
import warnings

import numpy as np

# (label, layers, hidden, heads, vocab, batch, seq)
MODELS = [
    ("gpt2 L2 H64 b4 s32", 2, 64, 2, 256, 4, 32),
    ("gpt2 L4 H256 b4 s128", 4, 256, 4, 1024, 4, 128),
]
WARMUP = 3


def build(layers, hidden, heads, vocab, seq):
    import torch
    import transformers
    torch.manual_seed(0)
    model = transformers.GPT2LMHeadModel(transformers.GPT2Config(
        n_layer=layers, n_embd=hidden, n_head=heads, vocab_size=vocab, n_positions=seq,
        use_cache=False, tie_word_embeddings=False, attn_pdrop=0.0, embd_pdrop=0.0,
        resid_pdrop=0.0))
    with torch.no_grad():  # no two initializers equal: the exporter would merge them
        for name, p in model.named_parameters():
            if p.dim() == 1:
                p.copy_((1.0 if name.endswith("weight") else 0.0) + 0.1 * torch.randn_like(p))
    return model.eval()


def torch_steps(model, ids, labels, batch, steps, threads):
    """Losses and per-step milliseconds of PyTorch eager."""
    import torch
    torch.set_num_threads(threads)
    model = copy.deepcopy(model).train()
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3, weight_decay=0.0, eps=1e-8)
    vocab = model.config.vocab_size
    ids, labels = torch.from_numpy(ids), torch.from_numpy(labels)
    losses, ms = [], []
    for step in range(steps):
        rows = slice(step * batch, (step + 1) * batch)
        start = time.perf_counter()
        logits = model(ids[rows]).logits
        loss = torch.nn.functional.cross_entropy(logits.reshape(-1, vocab),
                                                 labels[rows].reshape(-1))
        loss.backward()
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        ms.append((time.perf_counter() - start) * 1e3)
        losses.append(loss.item())
    return losses, ms


def dtc_steps(dtc, plan, data, steps, threads):
    out = subprocess.run([dtc, "run", plan, "--data", data, "--steps", str(steps),
                          "--no-shuffle", "--threads", str(threads)],
                         capture_output=True, text=True)
    if out.returncode:
        sys.exit(f"dtc run failed:\n{out.stderr}")
    found = re.findall(r"step \d+ loss ([0-9.]+) lr \S+ time ([0-9.]+) ms", out.stdout)
    return [float(l) for l, _ in found], [float(t) for _, t in found]


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    ap.add_argument("--dtc", default=os.path.join(root, "build", "bin", "dtc"))
    ap.add_argument("--threads", type=int, default=os.cpu_count() or 1)
    ap.add_argument("--steps", type=int, default=23, help="steps per round, warm-up included")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--keep", metavar="DIR", help="work in DIR and keep models and plans")
    args = ap.parse_args()
    warnings.filterwarnings("ignore")
    import torch
    work = args.keep or tempfile.mkdtemp(prefix="dtc-train-bench-")
    os.makedirs(work, exist_ok=True)
    print(f"training step on {args.threads} threads, {args.steps - WARMUP} timed steps, "
          f"best of {args.rounds} rounds (torch {torch.__version__})")
    ok = True
    for label, layers, hidden, heads, vocab, batch, seq in MODELS:
        tag = re.sub(r"\W+", "_", label)
        model = build(layers, hidden, heads, vocab, seq)
        path = os.path.join(work, f"{tag}.onnx")
        import contextlib
        import io
        with contextlib.redirect_stdout(io.StringIO()):
            torch.onnx.export(model, (torch.zeros(batch, seq, dtype=torch.long),), path,
                              input_names=["input_ids"], dynamo=True)
        data = os.path.join(work, f"{tag}_data")
        os.makedirs(data, exist_ok=True)
        rng = np.random.RandomState(1)
        tokens = rng.randint(0, vocab, (batch * args.steps, seq + 1)).astype(np.int64)
        ids, labels = tokens[:, :-1].copy(), tokens[:, 1:].copy()
        np.save(os.path.join(data, "input_ids.npy"), ids)
        np.save(os.path.join(data, "labels.npy"), labels)
        plan = os.path.join(work, f"{tag}.dtcp")
        subprocess.run([args.dtc, "compile", path, "--train", "--lr", "1e-3", "-o", plan],
                       check=True, capture_output=True)
        best_torch = best_dtc = float("inf")
        for _ in range(args.rounds):
            t_losses, t_ms = torch_steps(model, ids, labels, batch, args.steps, args.threads)
            d_losses, d_ms = dtc_steps(args.dtc, plan, data, args.steps, args.threads)
            if len(d_losses) != args.steps or not np.allclose(d_losses, t_losses, rtol=1e-4):
                print(f"FAIL {label}: dtc's losses {d_losses[:4]}... differ from PyTorch's "
                      f"{t_losses[:4]}...")
                ok = False
                break
            best_torch = min(best_torch, statistics.median(t_ms[WARMUP:]))
            best_dtc = min(best_dtc, statistics.median(d_ms[WARMUP:]))
        else:
            print(f"{label:24s} PyTorch {best_torch:8.2f} ms  dtc {best_dtc:8.2f} ms  "
                  f"dtc/PyTorch {best_dtc / best_torch:.2f}")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
