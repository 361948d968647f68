#!/usr/bin/env python3
"""Compares two folders of a plan's outputs (`dtc run --outputs`, ONNX
TensorProto files): the same files, shapes and dtypes, and each output's
largest difference at most --max-relative of the first folder's largest
magnitude (a bf16 plan's rounding against an fp32 plan's). Prints each
output's figure; exits 1 on a mismatch."""

import argparse
import os
import sys

import numpy as np
import onnx
from onnx import numpy_helper


def load(folder):
    return {name: numpy_helper.to_array(onnx.load_tensor(os.path.join(folder, name)))
            for name in sorted(os.listdir(folder)) if name.endswith(".pb")}


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("expected")
    parser.add_argument("actual")
    parser.add_argument("--max-relative", type=float, required=True)
    args = parser.parse_args()
    want, got = load(args.expected), load(args.actual)
    if not want or sorted(want) != sorted(got):
        print(f"outputs differ: {sorted(want)} and {sorted(got)}")
        return 1
    ok = True
    for name, a in want.items():
        b = got[name]
        if a.shape != b.shape or a.dtype != b.dtype:
            print(f"{name}: {a.dtype}{list(a.shape)} against {b.dtype}{list(b.shape)}")
            ok = False
            continue
        scale = float(np.abs(a).max()) or 1.0
        worst = float(np.abs(a.astype(np.float64) - b.astype(np.float64)).max()) / scale
        good = np.isfinite(b).all() and worst <= args.max_relative
        print(f"{name}: largest difference {worst:.2e} of the largest magnitude "
              f"{'(ok)' if good else f'> {args.max_relative}'}")
        ok = ok and good
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
