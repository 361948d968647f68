#!/usr/bin/env python3
"""Compares two ONNX models' initializers (trained weights exported by dtc).

compare_initializers.py A.onnx B.onnx --within TOL: the same initializers,
each element within TOL times the initializer's largest magnitude of the
other's; exit status 1 naming the worst one otherwise.
"""
import argparse
import sys

import numpy as np
import onnx
from onnx import numpy_helper


def weights(path):
    model = onnx.load(path, load_external_data=True)
    return {t.name: numpy_helper.to_array(t).astype(np.float64) for t in model.graph.initializer}


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("a")
    parser.add_argument("b")
    parser.add_argument("--within", type=float, required=True)
    args = parser.parse_args()
    a, b = weights(args.a), weights(args.b)
    if sorted(a) != sorted(b):
        sys.exit(f"different initializers: {sorted(set(a) ^ set(b))}")
    worst, name = 0.0, None
    for k in a:
        if a[k].shape != b[k].shape:
            sys.exit(f"{k}: shape {a[k].shape} vs {b[k].shape}")
        scale = max(np.abs(a[k]).max(), 1e-30) if a[k].size else 1.0
        error = float(np.abs(a[k] - b[k]).max() / scale) if a[k].size else 0.0
        if error > worst:
            worst, name = error, k
    if worst > args.within:
        sys.exit(f"{name}: differs by {worst:.3g} of its largest value (more than {args.within})")
    print(f"{len(a)} initializers agree (worst {worst:.3g}{' in ' + name if name else ''})")


if __name__ == "__main__":
    main()
