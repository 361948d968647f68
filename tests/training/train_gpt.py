#!/usr/bin/env python3
"""Trains the example GPT on a real English text, byte by byte.

The GPT of tests/models/generate.py has a 256-token vocabulary: one token
per byte. The text is the GNU GPL version 3 (Debian ships it in
/usr/share/common-licenses; any other text on the machine would do), 90% for
training as a uint16 token file, the last 10% held out. The test:
  - compiles a training step for batch 8 x 64 tokens (cross entropy, AdamW,
    20 warm-up steps then cosine decay) and trains 300 steps: the loss must
    fall from about ln(256) = 5.5 to a mean below 2.8 over the last 20 steps;
  - exports the model; onnxruntime's next-byte cross entropy on the held-out
    text must beat the training text's byte (unigram) entropy, which is the
    best a model that learned only byte frequencies can do;
  - mixed precision (--precision bf16): the first 60 losses stay within 2% of
    the fp32 run's, and its checkpoints resume bit for bit too;
  - checkpoint at step 10 and resume to 20 reproduce the uninterrupted losses.
"""
import argparse
import glob
import os
import sys
import tempfile

import numpy as np
import onnx
import onnxruntime as ort

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "models"))
import generate  # noqa: E402
from trainlib import check, check_resume, finish, losses, run, step_times  # noqa: E402

BATCH, SEQ, STEPS = 8, 64, 300
TEXTS = ["/usr/share/common-licenses/GPL-3"] + sorted(glob.glob("/usr/share/common-licenses/*"))


def read_text():
    for path in TEXTS:
        if os.path.isfile(path) and os.path.getsize(path) > 20000:
            return path, np.frombuffer(open(path, "rb").read(), np.uint8)
    sys.exit("no text of 20 kB or more found among " + ", ".join(TEXTS))


def log_softmax(z):
    z = z - z.max(axis=-1, keepdims=True)
    return z - np.log(np.exp(z).sum(axis=-1, keepdims=True))


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--dtc", required=True)
    args = ap.parse_args()
    dtc = args.dtc

    path, text = read_text()
    cut = len(text) * 9 // 10
    train, held = text[:cut], text[cut:]
    counts = np.bincount(train, minlength=256).astype(np.float64)
    p = counts / counts.sum()
    unigram = float(-(p[p > 0] * np.log(p[p > 0])).sum())
    print(f"      text {path}: {len(train)} training bytes, {len(held)} held out; "
          f"byte entropy {unigram:.3f} nats")

    with tempfile.TemporaryDirectory() as tmp:
        model = os.path.join(tmp, "gpt.onnx")
        onnx.save(generate.MODELS["gpt"](), model)
        tokens = os.path.join(tmp, "train.bin")
        train.astype(np.uint16).tofile(tokens)
        plan = os.path.join(tmp, "train.dtcp")
        run([dtc, "compile", model, "--shape", f"batch={BATCH}", "--shape", f"seq={SEQ}",
             "--train", "--loss", "cross_entropy", "--optimizer", "adamw", "--lr", "0.003",
             "--schedule", "cosine", "--warmup", "20", "--total-steps", str(STEPS), "-o", plan])

        exported = os.path.join(tmp, "trained.onnx")
        out = run([dtc, "run", plan, "--data", tokens, "--steps", str(STEPS),
                   "--export", exported]).stdout
        curve = [float(v) for _, v in losses(out)]
        check(len(curve) == STEPS, f"{STEPS} step lines printed (got {len(curve)})")
        first, last = curve[0], float(np.mean(curve[-20:]))
        ms = float(np.median(step_times(out)))
        print(f"      loss: step 1 {first:.4f}, mean of steps {STEPS - 19}-{STEPS} {last:.4f}; "
              f"median step {ms:.2f} ms (batch {BATCH} x {SEQ} tokens)")
        check(first > 5.0 and last < 2.8, "loss falls from > 5.0 to < 2.8")

        # Held-out next-byte cross entropy of the exported model.
        n = (len(held) - 1) // SEQ
        ids = held[:n * SEQ].reshape(n, SEQ).astype(np.int64)
        nxt = held[1:n * SEQ + 1].reshape(n, SEQ).astype(np.int64)
        session = ort.InferenceSession(exported, providers=["CPUExecutionProvider"])
        logits = session.run(None, {"input_ids": ids})[0].astype(np.float64)
        held_loss = float(-np.take_along_axis(log_softmax(logits), nxt[..., None], -1).mean())
        print(f"      held-out cross entropy {held_loss:.4f} nats per byte "
              f"(byte frequencies alone: {unigram:.4f})")
        check(held_loss < unigram, "the trained model predicts held-out text better than byte frequencies")

        # Mixed precision: the model in bf16, fp32 master weights; the same data
        # order, so its losses follow the fp32 run's.
        bf16 = os.path.join(tmp, "bf16.dtcp")
        notes = run([dtc, "compile", model, "--shape", f"batch={BATCH}", "--shape", f"seq={SEQ}",
                     "--train", "--lr", "0.003", "--schedule", "cosine", "--warmup", "20",
                     "--total-steps", str(STEPS), "--precision", "bf16", "-o", bf16]).stdout
        check("the model computes in bf16" in notes, "compile --precision bf16 says the model computes in bf16")
        mixed = run([dtc, "run", bf16, "--data", tokens, "--steps", "60"]).stdout
        low = [float(v) for _, v in losses(mixed)]
        worst = max(abs(a - b) / b for a, b in zip(low, curve[:60]))
        print(f"      bf16: step 60 loss {low[-1]:.4f} (fp32 {curve[59]:.4f}); largest relative "
              f"difference over 60 steps {worst:.2e}; median step {np.median(step_times(mixed)):.2f} ms")
        check(len(low) == 60 and worst < 0.02, "bf16 losses stay within 2% of the fp32 run's")
        # Its bf16 copies of the weights are not checkpointed: resuming makes
        # them from the restored weights.
        check("kept in bf16 between steps" in notes, "the bf16 step keeps bf16 copies of its weights")
        check_resume(dtc, bf16, tokens, tmp, 3, 6)

        check_resume(dtc, plan, tokens, tmp, 10, 20)

    finish("GPT training")


if __name__ == "__main__":
    main()
