"""Checks a dtc training run against PyTorch's (tests/models/export_hf.py).

    check_replay.py LOG LOSSES.json [--model ORIGINAL.onnx --exported TRAINED.onnx
                                     --frozen NAME...]

LOG is `dtc run --data ... --no-shuffle` output; its losses must equal the
recorded PyTorch losses within 1e-5 relative. With --exported: onnxruntime
loads the exported model from where it was written, the --frozen
initializers are bit-for-bit the original's and every other float weight
changed.
"""
import argparse
import json
import re
import sys

import numpy as np
import onnx
import onnxruntime as ort
from onnx import numpy_helper


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("log")
    ap.add_argument("losses")
    ap.add_argument("--model")
    ap.add_argument("--exported")
    ap.add_argument("--frozen", nargs="*", default=[])
    args = ap.parse_args()
    got = [float(x) for x in re.findall(r"step \d+ loss ([0-9.]+)", open(args.log).read())]
    want = json.load(open(args.losses))["losses"]
    if len(got) != len(want) or not np.allclose(got, want, rtol=1e-5, atol=0):
        sys.exit(f"losses {got} != PyTorch's {want}")
    print(f"{len(got)} losses equal PyTorch's within 1e-5")
    if not args.exported:
        return
    ort.InferenceSession(args.exported, providers=["CPUExecutionProvider"])
    original = {t.name: numpy_helper.to_array(t, base_dir=args.model.rsplit("/", 1)[0])
                for t in onnx.load(args.model, load_external_data=False).graph.initializer}
    exported = onnx.load(args.exported)
    trained = 0
    for t in exported.graph.initializer:
        before, after = original[t.name], numpy_helper.to_array(t)
        weight = before.dtype == np.float32 and before.size > 1
        if t.name in args.frozen or not weight:
            if not np.array_equal(before, after):
                sys.exit(f"{t.name} changed")
        elif np.array_equal(before, after):
            sys.exit(f"{t.name} was not trained")
        else:
            trained += 1
    print(f"exported: {trained} weights trained, {len(args.frozen)} frozen untouched")


if __name__ == "__main__":
    main()
