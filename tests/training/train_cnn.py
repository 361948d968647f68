#!/usr/bin/env python3
"""Trains the example CNN (conv, batch norm, max and average pooling) on digits.

The CNN of tests/models/generate.py takes 3x32x32 images: scikit-learn's 8x8
digits, each pixel repeated 4x4 and over 3 channels. The test:
  - compiles a training step (cross entropy, AdamW): its two batch norms use
    the batch's statistics and update their running mean and variance;
  - one step with the data in order: the exported running mean of the first
    batch norm must be 0.9 * its initial value + 0.1 * the batch mean of
    the first convolution's output (computed here in numpy);
  - trains 300 steps of batch 16: the loss must fall from > 2.0 to a mean
    below 1.0 over the last 20 steps, and the exported model (running
    statistics) must classify held-out digits with accuracy >= 0.6 in
    onnxruntime; dtc's inference on the exported model must match it;
  - checkpoint at step 10 and resume to 20 reproduce the uninterrupted losses.
"""
import argparse
import os
import sys
import tempfile

import numpy as np
import onnx
import onnxruntime as ort
from onnx import numpy_helper
from sklearn.datasets import load_digits

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "models"))
import generate  # noqa: E402
from trainlib import check, check_resume, dtc_outputs, finish, losses, run, step_times  # noqa: E402

BATCH = 16


def images(digits):
    x = (digits.data / 16.0).astype(np.float32).reshape(-1, 1, 8, 8)
    x = np.repeat(np.repeat(x, 4, axis=2), 4, axis=3)
    return np.ascontiguousarray(np.repeat(x, 3, axis=1))


def conv3x3(x, w, b):
    """NCHW convolution, 3x3 kernel, pads 1, in float64."""
    n, c, h, wd = x.shape
    padded = np.pad(x.astype(np.float64), ((0, 0), (0, 0), (1, 1), (1, 1)))
    out = np.zeros((n, w.shape[0], h, wd))
    for i in range(3):
        for j in range(3):
            out += np.einsum("nchw,mc->nmhw", padded[:, :, i:i + h, j:j + wd], w[:, :, i, j])
    return out + b[None, :, None, None]


def initializers(path):
    return {t.name: numpy_helper.to_array(t) for t in onnx.load(path).graph.initializer}


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--dtc", required=True)
    args = ap.parse_args()
    dtc = args.dtc

    digits = load_digits()
    x, y = images(digits), digits.target.astype(np.int64)
    order = np.random.RandomState(0).permutation(len(x))
    train, test = order[:1500], order[1504:]  # 293 held out

    with tempfile.TemporaryDirectory() as tmp:
        model = os.path.join(tmp, "cnn.onnx")
        onnx.save(generate.MODELS["cnn"](), model)
        data = os.path.join(tmp, "train")
        os.makedirs(data)
        np.save(os.path.join(data, "image.npy"), x[train])
        np.save(os.path.join(data, "labels.npy"), y[train])
        plan = os.path.join(tmp, "train.dtcp")
        out = run([dtc, "compile", model, "--shape", f"batch={BATCH}", "--train", "--loss",
                   "cross_entropy", "--optimizer", "adamw", "--lr", "0.003", "-o", plan]).stdout
        check("2 batch norms normalise with the batch's statistics; 4 running means and "
              "variances updated each step" in out, "compile notes the batch norms' training form")

        # One step: the running mean moves towards the batch's mean.
        one = os.path.join(tmp, "one.onnx")
        run([dtc, "run", plan, "--data", data, "--steps", "1", "--no-shuffle", "--export", one])
        before, after = initializers(model), initializers(one)
        conv = conv3x3(x[train][:BATCH], before["conv1.weight"].astype(np.float64),
                       before["conv1.bias"].astype(np.float64))
        want = 0.9 * before["bn1.running_mean"] + 0.1 * conv.mean(axis=(0, 2, 3))
        want_var = 0.9 * before["bn1.running_var"] + 0.1 * conv.var(axis=(0, 2, 3))
        check(np.allclose(after["bn1.running_mean"], want, rtol=1e-4, atol=1e-6) and
              np.allclose(after["bn1.running_var"], want_var, rtol=1e-4, atol=1e-6),
              "after one step the running mean and variance are 0.9 old + 0.1 batch")

        # Training, export, accuracy.
        exported = os.path.join(tmp, "trained.onnx")
        p = run([dtc, "run", plan, "--data", data, "--steps", "300", "--export", exported])
        curve = [float(v) for _, v in losses(p.stdout)]
        check(len(curve) == 300, f"300 step lines printed (got {len(curve)})")
        first, last = curve[0], float(np.mean(curve[-20:]))
        ms = float(np.median(step_times(p.stdout)))
        print(f"      loss: step 1 {first:.4f}, mean of steps 281-300 {last:.4f}; "
              f"median step {ms:.2f} ms (batch {BATCH})")
        check(first > 2.0 and last < 1.0, "loss falls from > 2.0 to < 1.0")
        session = ort.InferenceSession(exported, providers=["CPUExecutionProvider"])
        logits = session.run(None, {"image": x[test]})[0]
        accuracy = float((logits.argmax(1) == y[test]).mean())
        print(f"      held-out accuracy {accuracy:.4f} ({len(test)} digits)")
        check(accuracy >= 0.6, "held-out accuracy >= 0.6")

        mine = dtc_outputs(dtc, exported, {"batch": len(test)}, {"image": x[test]}, tmp)
        check(np.allclose(mine, logits, rtol=1e-4, atol=1e-4),
              "dtc's forward on the exported model matches onnxruntime")

        # Resume reproduces the uninterrupted run, batch norm statistics included.
        check_resume(dtc, plan, data, tmp, 10, 20)

    finish("CNN training")


if __name__ == "__main__":
    main()
