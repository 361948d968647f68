#!/usr/bin/env python3
"""A checkpoint written under one split resumes under another.

The example GPT trains 4 steps under one plan with a checkpoint, then
resumes to step 8 under another plan of the same model on another split
(data parallel, tensor parallel, ZeRO-3, pipelined, replicated pipeline
stages, one device): `dtc run
--resume` converts the layout as it reads, and the losses of steps 5-8 equal
the uninterrupted run's within 1e-5 relative; `dtc checkpoint convert`
does the same offline. A checkpoint of another model is refused by name.

    python3 tests/reliability/reshard.py --dtc build/bin/dtc
"""
import argparse
import os
import shutil
import sys
import tempfile

import numpy as np
import onnx

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "models"))
sys.path.insert(0, os.path.join(HERE, "..", "training"))
import generate  # noqa: E402
from trainlib import check, finish, losses, next_token_data, run  # noqa: E402

SPLITS = {
    "dp=4": ["--dp", "4", "--zero", "0"],
    "dp=2 x tp=2": ["--dp", "2", "--tp", "2", "--zero", "0"],
    "ZeRO-3 over dp=4": ["--dp", "4", "--zero", "3"],
    "pp=2 x dp=2": ["--pp", "2", "--dp", "2", "--zero", "0", "--micro-batches", "2"],
    "1 device": [],
    "tp=4": ["--tp", "4"],
    # Each stage on two copies of a one-device mesh, taking turns.
    "pp=2, stage replicas 2,2": ["--pp", "2", "--stage-replicas", "2,2", "--micro-batches", "2"],
}
# (from, to): every split is read by another, pipelined and sharded both ways.
PAIRS = [("dp=4", "dp=2 x tp=2"), ("dp=2 x tp=2", "ZeRO-3 over dp=4"),
         ("ZeRO-3 over dp=4", "pp=2 x dp=2"), ("pp=2 x dp=2", "1 device"),
         ("1 device", "tp=4"), ("tp=4", "dp=4"), ("tp=4", "pp=2, stage replicas 2,2"),
         ("pp=2, stage replicas 2,2", "dp=2 x tp=2")]
STOP, END = 4, 8


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--dtc", required=True)
    args = parser.parse_args()
    dtc = os.path.abspath(args.dtc)
    with tempfile.TemporaryDirectory() as tmp:
        model = os.path.join(tmp, "gpt.onnx")
        onnx.save(generate.MODELS["gpt"](), model)
        r = np.random.RandomState(0)
        data = next_token_data(os.path.join(tmp, "data"))
        plans = {}
        for name, flags in SPLITS.items():
            file = "".join(c for c in name if c not in " =,") + ".dtcp"
            plans[name] = os.path.join(tmp, file)
            run([dtc, "compile", model, "--train", "--shape", "batch=8", "--shape", "seq=32",
                 "-o", plans[name]] + flags)

        def train(plan, steps, *extra):
            return run([dtc, "run", plan, "--data", data, "--steps", str(steps), "--threads",
                        "1"] + list(extra), expect_ok=False)

        for source, target in PAIRS:
            full = losses(train(plans[source], END).stdout)
            ck = os.path.join(tmp, f"ck-{len(os.listdir(tmp))}")
            train(plans[source], STOP, "--checkpoint", ck)
            resumed = train(plans[target], END, "--checkpoint", ck, "--resume")
            got = losses(resumed.stdout)
            close = (len(full) == END and [s for s, _ in got] == list(range(STOP + 1, END + 1))
                     and all(abs(float(a) - float(b)) <= 1e-5 * abs(float(b))
                             for (_, a), (_, b) in zip(got, full[STOP:])))
            check(resumed.returncode == 0 and "converted to this plan's" in resumed.stdout
                  and close, f"{source} -> {target}: resumed at step {STOP + 1} with the "
                  "uninterrupted losses (1e-5 relative)")
            if not close or resumed.returncode != 0:
                print(full[STOP:], got, resumed.stdout[-1500:], resumed.stderr[-1500:])

        # Converted offline (dtc checkpoint convert): the new plan's ranks
        # each read one file of their own, with no conversion at resume, and
        # go on with the uninterrupted losses; the source folder unchanged.
        source, target = "dp=2 x tp=2", "pp=2 x dp=2"
        full = losses(train(plans[source], END).stdout)
        ck = os.path.join(tmp, "ck-convert")
        out = os.path.join(tmp, "ck-converted")
        train(plans[source], STOP, "--checkpoint", ck)
        before = sorted(os.listdir(ck))
        converted = run([dtc, "checkpoint", "convert", ck, "--plan", plans[target], "-o", out])
        resumed = train(plans[target], END, "--checkpoint", out, "--resume")
        got = losses(resumed.stdout)
        check(converted.returncode == 0 and sorted(os.listdir(ck)) == before
              and resumed.returncode == 0 and "converted to this plan's" not in resumed.stdout
              and [s for s, _ in got] == list(range(STOP + 1, END + 1))
              and all(abs(float(a) - float(b)) <= 1e-5 * abs(float(b))
                      for (_, a), (_, b) in zip(got, full[STOP:])),
              f"dtc checkpoint convert {source} -> {target}: resumed directly at step "
              f"{STOP + 1} with the uninterrupted losses")
        bad = run([dtc, "checkpoint", "convert", ck, "--plan", plans[target], "-o", ck],
                  expect_ok=False)
        check(bad.returncode == 1 and "is the checkpoint folder itself" in bad.stderr,
              "converting into the source folder is refused: " + bad.stderr.strip()[-120:])

        # Another model's checkpoint: refused, naming the tensor.
        mlp = os.path.join(tmp, "mlp.onnx")
        onnx.save(generate.MODELS["mlp"](), mlp)
        mlp_plan = os.path.join(tmp, "mlp.dtcp")
        run([dtc, "compile", mlp, "--train", "--shape", "batch=8", "-o", mlp_plan])
        x = os.path.join(tmp, "mlp-data")
        os.makedirs(x)
        np.save(os.path.join(x, "x.npy"), r.randn(16, 64).astype(np.float32))
        np.save(os.path.join(x, "labels.npy"), r.randint(0, 10, 16).astype(np.int64))
        ck = os.path.join(tmp, "ck-gpt")
        train(plans["1 device"], STOP, "--checkpoint", ck)
        other = run([dtc, "run", mlp_plan, "--data", x, "--steps", str(END), "--checkpoint", ck,
                     "--resume"], expect_ok=False)
        check(other.returncode == 1 and "a checkpoint of another model?" in other.stderr
              and not losses(other.stdout),
              "a checkpoint of another model is refused: " + other.stderr.strip()[-160:])
    finish("resharding")


if __name__ == "__main__":
    main()
