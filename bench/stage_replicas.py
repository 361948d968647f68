#!/usr/bin/env python3
"""Stage replicas against even and uneven pipelines, simulated.

A GPT whose head outweighs its layers (vocabulary 32768, hidden 256, 2
layers: the head is about 88% of the forward's FLOPs) cannot be cut into
even pipeline stages. On 3 A100s (the a100-80g preset) this compiles its
training step (batch 24 in 6 micro-batches, 1F1B) as
  replicas 1,2   --pp 2 --stage-replicas 1,2 (the head's stage on 2 devices)
  replicas 2,1   --pp 2 --stage-replicas 2,1 (the other way round)
  pp=3           --pp 3 (three stages, one device each)
  pp=2 (2 GPUs)  --pp 2 on 2 of the devices
  dp=3           --dp 3 (data parallelism: the model fits a device here)
and prints each plan's simulated step (`dtc simulate`) and its ratio to
pp=3's. Then the search (--devices 3 under a 300 MiB limit, where one
stage does not fit; and with 6 micro-batches under 500 MiB, where one
stage fits but cannot split its micro-batch of 4 over 3 devices) and what
its simulator check kept.

    python3 bench/stage_replicas.py --dtc build/bin/dtc
"""
import argparse
import os
import re
import subprocess
import sys
import tempfile

MODEL = "gpt:layers=2,hidden=256,heads=4,seq=128,vocab=32768,batch=24"
PLANS = [
    ("replicas 1,2", ["--pp", "2", "--stage-replicas", "1,2", "--micro-batches", "6"]),
    ("replicas 2,1", ["--pp", "2", "--stage-replicas", "2,1", "--micro-batches", "6"]),
    ("pp=3", ["--pp", "3", "--micro-batches", "6"]),
    ("pp=2 (2 GPUs)", ["--pp", "2", "--micro-batches", "6"]),
    ("dp=3", ["--dp", "3"]),
]
UNITS = {"s": 1.0, "ms": 1e-3, "us": 1e-6}


def step_seconds(dtc, plan):
    out = subprocess.run([dtc, "simulate", plan], capture_output=True, text=True, check=True).stdout
    m = re.search(r"step time\s+([0-9.]+) (s|ms|us)", out)
    return float(m.group(1)) * UNITS[m.group(2)]


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--dtc", required=True)
    dtc = ap.parse_args().dtc
    with tempfile.TemporaryDirectory() as tmp:
        steps = {}
        for label, flags in PLANS:
            plan = os.path.join(tmp, "plan.dtcp")
            subprocess.run([dtc, "compile", MODEL, "--train", "--preset", "a100-80g", *flags,
                            "-o", plan], capture_output=True, text=True, check=True)
            steps[label] = step_seconds(dtc, plan)
        print(f"{MODEL} on 3 A100s, simulated step (ratio to pp=3):")
        for label, _ in PLANS:
            print(f"  {label:14s} {steps[label] * 1e3:7.2f} ms  {steps[label] / steps['pp=3']:.2f}")
        for flags in (["--memory-limit", "300MiB"],
                      ["--micro-batches", "6", "--memory-limit", "500MiB"]):
            plan = os.path.join(tmp, "searched.dtcp")
            out = subprocess.run([dtc, "compile", MODEL, "--train", "--preset", "a100-80g",
                                  "--devices", "3", *flags, "-o", plan],
                                 capture_output=True, text=True, check=True).stdout
            chosen = re.search(r"pipeline: ([0-9]+ stages? (of|on) [0-9]+ (copies of )?[0-9]+ "
                               r"devices?)", out)
            check = re.search(r"stage replicas (kept|not kept): [^\n]*", out)
            print(f"searched (--devices 3 {' '.join(flags)}): "
                  f"{chosen.group(1) if chosen else '?'}; simulated "
                  f"{step_seconds(dtc, plan) * 1e3:.2f} ms"
                  + (f"; {check.group(0)}" if check else "; no replicated plan predicted faster"))
    ok = steps["replicas 1,2"] < min(steps["pp=3"], steps["pp=2 (2 GPUs)"])
    print("replicating the costlier stage beats the uneven pipelines" if ok else
          "replicating the costlier stage does NOT beat the uneven pipelines")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
