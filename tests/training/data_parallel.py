#!/usr/bin/env python3
"""Data-parallel training over MPI equals the single-device run.

For the example MLP, CNN and GPT, and a generated GPT: compile the same
training step for one device and with --dp 4 (the batch split over four
ranks, gradients all-reduced), train 5 steps on the same data, and check
that every loss agrees within 1e-5 relative. `dtc run -n 4` starts the four
ranks itself through mpirun.
"""
import argparse
import os
import sys
import tempfile

import numpy as np
import onnx

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "models"))
sys.path.insert(0, os.path.dirname(__file__))
import generate  # noqa: E402
from trainlib import check, finish, losses, run  # noqa: E402

STEPS = 5


def save_set(folder, **arrays):
    os.makedirs(folder, exist_ok=True)
    for name, array in arrays.items():
        np.save(os.path.join(folder, f"{name}.npy"), array)
    return folder


def compare(dtc, tmp, name, model, shapes, data, extra=()):
    plans = {}
    for dp in (1, 4):
        plan = os.path.join(tmp, f"{name}-dp{dp}.dtcp")
        cmd = [dtc, "compile", model, *shapes, "--train", "--loss", "cross_entropy",
               "--optimizer", "adamw", "--lr", "0.01", *extra, "-o", plan]
        if dp > 1:
            cmd += ["--dp", str(dp)]
        out = run(cmd).stdout
        if dp > 1:
            check(f"mesh: dp={dp}" in out, f"{name}: compile notes the data-parallel mesh")
        plans[dp] = plan
    single = [float(v) for _, v in losses(run([dtc, "run", plans[1], "--data", data, "--steps",
                                               str(STEPS), "--threads", "1"]).stdout)]
    split = [float(v) for _, v in losses(run([dtc, "run", plans[4], "-n", "4", "--data", data,
                                              "--steps", str(STEPS)]).stdout)]
    check(len(single) == STEPS and len(split) == STEPS, f"{name}: {STEPS} losses from each run")
    worst = max(abs(a - b) / abs(a) for a, b in zip(single, split))
    print(f"      {name}: losses {', '.join(f'{v:.5f}' for v in split)}; "
          f"largest relative difference to one device {worst:.1e}")
    check(worst <= 1e-5, f"{name}: dp=4 losses equal the single-device losses within 1e-5")


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--dtc", required=True)
    dtc = ap.parse_args().dtc
    rng = np.random.RandomState(0)
    with tempfile.TemporaryDirectory() as tmp:
        models = {}
        for name in ("mlp", "cnn", "gpt"):
            models[name] = os.path.join(tmp, f"{name}.onnx")
            onnx.save(generate.MODELS[name](), models[name])
        inputs = {n: onnx.load(models[n]).graph.input[0] for n in ("mlp", "cnn")}

        def dims(name):
            return [d.dim_value for d in inputs[name].type.tensor_type.shape.dim[1:]]

        mlp = save_set(os.path.join(tmp, "mlp-data"),
                       **{inputs["mlp"].name: rng.rand(64, *dims("mlp")).astype(np.float32),
                          "labels": rng.randint(0, 10, 64).astype(np.int64)})
        compare(dtc, tmp, "mlp", models["mlp"], ["--shape", "batch=16"], mlp)
        cnn = save_set(os.path.join(tmp, "cnn-data"),
                       **{inputs["cnn"].name: rng.rand(32, *dims("cnn")).astype(np.float32),
                          "labels": rng.randint(0, 10, 32).astype(np.int64)})
        compare(dtc, tmp, "cnn", models["cnn"], ["--shape", "batch=8"], cnn)
        text = os.path.join(tmp, "text.bin")
        np.frombuffer(b"the quick brown fox jumps over the lazy dog. " * 40,
                      np.uint8).astype(np.uint16).tofile(text)
        compare(dtc, tmp, "gpt", models["gpt"], ["--shape", "batch=8", "--shape", "seq=16"], text)
        compare(dtc, tmp, "generated gpt", "gpt:layers=2,hidden=32,heads=2,seq=16,vocab=128,batch=8",
                [], text)
    finish("data parallel")


if __name__ == "__main__":
    main()
