#!/usr/bin/env python3
"""Trains the example MLP on scikit-learn's digits with dtc and checks it learned.

The MLP of tests/models/generate.py takes 64 features and gives 10 logits,
which is the 8x8 digits data set. The test:
  - compiles a training step (cross entropy, AdamW) and trains 400 steps of
    batch 32: the loss must fall from ~2.3 to a mean below 0.3 over the last
    20 steps;
  - exports the trained model and runs it in onnxruntime on 297 held-out
    digits: accuracy must reach 0.9; dtc's own inference on the exported
    model must match onnxruntime's;
  - stops after 30 steps with a checkpoint, resumes to 60 and checks the
    losses equal the uninterrupted run's exactly;
  - bad data: labels out of range, fewer samples than a batch, a NaN loss
    (which must stop with a message and leave the last checkpoint usable).
"""
import argparse
import os
import re
import sys
import tempfile

import numpy as np
import onnx
import onnxruntime as ort
from sklearn.datasets import load_digits

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "models"))
import generate  # noqa: E402
from trainlib import check, check_resume, dtc_outputs, finish, losses, run  # noqa: E402

def save_set(folder, x, y):
    os.makedirs(folder, exist_ok=True)
    np.save(os.path.join(folder, "x.npy"), x)
    np.save(os.path.join(folder, "labels.npy"), y)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--dtc", required=True)
    args = ap.parse_args()
    dtc = args.dtc

    digits = load_digits()
    x = (digits.data / 16.0).astype(np.float32)
    y = digits.target.astype(np.int64)
    order = np.random.RandomState(0).permutation(len(x))
    train, test = order[:1500], order[1500:]

    with tempfile.TemporaryDirectory() as tmp:
        model = os.path.join(tmp, "mlp.onnx")
        onnx.save(generate.MODELS["mlp"](), model)
        save_set(os.path.join(tmp, "train"), x[train], y[train])
        plan = os.path.join(tmp, "train.dtcp")
        out = run([dtc, "compile", model, "--shape", "batch=32", "--train", "--loss",
                   "cross_entropy", "--optimizer", "adamw", "--lr", "0.003", "-o", plan]).stdout
        check("training: loss cross_entropy, AdamW" in out, "compile --train notes the loss and optimizer")
        shown = run([dtc, "plan", "--full", plan]).stdout
        check(re.search(r"labels\s+i64\[32\]", shown) is not None, "dtc plan shows the labels input")

        # Training, export, accuracy.
        exported = os.path.join(tmp, "trained.onnx")
        p = run([dtc, "run", plan, "--data", os.path.join(tmp, "train"), "--steps", "400",
                 "--threads", "1", "--export", exported])
        curve = [float(v) for _, v in losses(p.stdout)]
        check(len(curve) == 400, f"400 step lines printed (got {len(curve)})")
        first, last = curve[0], float(np.mean(curve[-20:]))
        print(f"      loss: step 1 {first:.4f}, mean of steps 381-400 {last:.4f}")
        check(first > 2.0 and last < 0.3, "loss falls from > 2.0 to < 0.3")
        session = ort.InferenceSession(exported, providers=["CPUExecutionProvider"])
        logits = session.run(None, {"x": x[test]})[0]
        accuracy = float((logits.argmax(1) == y[test]).mean())
        print(f"      held-out accuracy {accuracy:.4f} ({len(test)} digits)")
        check(accuracy >= 0.9, "held-out accuracy >= 0.9")

        # dtc's inference on the exported model equals onnxruntime's.
        mine = dtc_outputs(dtc, exported, {"batch": len(test)}, {"x": x[test]}, tmp)
        check(np.allclose(mine, logits, rtol=1e-4, atol=1e-5), "dtc's forward on the exported model matches onnxruntime")

        # Resume reproduces the uninterrupted run exactly.
        data = os.path.join(tmp, "train")
        check_resume(dtc, plan, data, tmp, 30, 60, every=10)

        # Bad data.
        bad = os.path.join(tmp, "bad")
        labels = y[train].copy()
        labels[7] = 10
        save_set(bad, x[train], labels)
        p = run([dtc, "run", plan, "--data", bad, "--steps", "400", "--no-shuffle"], expect_ok=False)
        check(p.returncode == 1 and "label 10, outside [0, 10)" in p.stderr, "a label out of range is an error naming it")
        save_set(bad, x[train][:10], y[train][:10])
        p = run([dtc, "run", plan, "--data", bad, "--steps", "1"], expect_ok=False)
        check(p.returncode == 1 and "fewer than one batch" in p.stderr, "a data set shorter than a batch is an error")
        poisoned = x[train].copy()
        poisoned[40:] = np.nan
        save_set(bad, poisoned, y[train])
        ck2 = os.path.join(tmp, "ck2")
        p = run([dtc, "run", plan, "--data", bad, "--steps", "5", "--no-shuffle", "--checkpoint",
                 ck2, "--checkpoint-every", "1"], expect_ok=False)
        check(p.returncode == 1 and "the loss is NaN" in p.stderr and "intact" in p.stderr,
              "a NaN loss stops training with a message")
        p = run([dtc, "run", plan, "--data", data, "--steps", "2", "--checkpoint", ck2, "--resume"],
                expect_ok=False)
        check(p.returncode == 0 and "resumed from" in p.stdout and "at step 1" in p.stdout,
              "the checkpoint written before the NaN step still resumes")

    finish("training")


if __name__ == "__main__":
    main()
