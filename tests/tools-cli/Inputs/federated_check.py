#!/usr/bin/env python3
"""Checks of federated averaging's exported models (onnxruntime, numpy).

federated_check.py accuracy MODEL.onnx DIR --least A
    the held-out accuracy of MODEL on DIR/test_{x,y}.npy is at least A.
federated_check.py weighted OUT.onnx DIR --clients C0.onnx,C1.onnx,...
    OUT's weights are the mean of the clients' weights weighted by their
    sample counts (DIR/data/c/labels.npy), within 1e-6 of the largest.
"""
import argparse
import os
import sys

import numpy as np
import onnx
import onnxruntime as ort
from onnx import numpy_helper


def weights(path):
    return {t.name: numpy_helper.to_array(t).astype(np.float64)
            for t in onnx.load(path).graph.initializer}


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("check", choices=["accuracy", "weighted"])
    parser.add_argument("model")
    parser.add_argument("dir")
    parser.add_argument("--least", type=float)
    parser.add_argument("--clients")
    args = parser.parse_args()
    if args.check == "accuracy":
        session = ort.InferenceSession(args.model, providers=["CPUExecutionProvider"])
        x = np.load(os.path.join(args.dir, "test_x.npy"))
        y = np.load(os.path.join(args.dir, "test_y.npy"))
        accuracy = float((session.run(None, {session.get_inputs()[0].name: x})[0].argmax(1) == y).mean())
        print(f"held-out accuracy {accuracy:.4f}")
        if accuracy < args.least:
            sys.exit(f"held-out accuracy {accuracy:.4f} is below {args.least}")
        return
    clients = args.clients.split(",")
    counts = [len(np.load(os.path.join(args.dir, "data", str(c), "labels.npy")))
              for c in range(len(clients))]
    got = weights(args.model)
    each = [weights(c) for c in clients]
    worst = 0.0
    for name, value in got.items():
        want = sum(n * w[name] for n, w in zip(counts, each)) / sum(counts)
        unweighted = sum(w[name] for w in each) / len(each)
        scale = max(np.abs(want).max(), 1e-30)
        worst = max(worst, float(np.abs(value - want).max() / scale))
        if name.endswith("weight") and np.abs(unweighted - want).max() / scale < 1e-4:
            sys.exit(f"{name}: the weighted and plain means agree; the check cannot tell them apart")
    print(f"weighted by {counts}: worst {worst:.3g}")
    if worst > 1e-6:
        sys.exit(f"the averaged weights differ from the sample-weighted mean by {worst:.3g}")


if __name__ == "__main__":
    main()
