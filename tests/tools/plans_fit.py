#!/usr/bin/env python3
"""Every plan dtc compile accepts is one dtc simulate says fits.

The compiler and the simulator count a device's memory with one model:
for each way of splitting a small GPT (data, tensor and pipeline
parallelism, ZeRO, micro-batches, schedules, searched stages), the plan
is compiled with no limit to learn its peak, then again on devices of
less and less memory. Each compile must either succeed with a plan the
simulator, on those devices, says fits, or fail with a message and exit
status 1 (never a crash). Prints a line per split and exits 1 on the
first disagreement.

    python3 tests/tools/plans_fit.py --dtc build/bin/dtc --cluster C.json --workdir DIR
"""
import argparse
import json
import os
import re
import subprocess
import sys

MODEL = "gpt:layers=4,hidden=64,heads=4,seq=32,vocab=256,batch=16"
SPLITS = [
    ["--dp", "2"],
    ["--tp", "2"],
    ["--dp", "2", "--zero", "3"],
    ["--dp", "2", "--micro-batches", "4"],
    ["--pp", "2", "--micro-batches", "4"],
    ["--pp", "4", "--micro-batches", "4"],
    ["--pp", "2", "--micro-batches", "4", "--schedule", "gpipe"],
    ["--pp", "2", "--micro-batches", "4", "--virtual-stages", "2"],
    ["--pp", "2", "--dp", "2", "--micro-batches", "4"],
    ["--pp", "2", "--tp", "2", "--micro-batches", "4", "--recompute", "full"],
    ["--devices", "4"],
]
# Device memory as fractions of the unconstrained plan's peak.
FRACTIONS = [1.0, 0.85, 0.7, 0.5]
UNITS = {"B": 1, "KiB": 2**10, "MiB": 2**20, "GiB": 2**30}


def peak_of(simulated):
    m = re.search(r"memory peak +([0-9.]+) (B|KiB|MiB|GiB) per rank \(device capacity .*: "
                  r"(fits|DOES NOT FIT)\)", simulated)
    if not m:
        raise SystemExit("no memory line in dtc simulate's output:\n" + simulated)
    return float(m.group(1)) * UNITS[m.group(2)], m.group(3) == "fits"


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--dtc", required=True)
    ap.add_argument("--cluster", required=True, help="a cluster file to shrink the memory of")
    ap.add_argument("--workdir", required=True)
    args = ap.parse_args()
    os.makedirs(args.workdir, exist_ok=True)
    base = json.load(open(args.cluster))

    def run(cmd):
        return subprocess.run(cmd, capture_output=True, text=True)

    accepted = refused = 0
    for i, split in enumerate(SPLITS):
        plan = os.path.join(args.workdir, f"p{i}.dtcp")
        cluster = os.path.join(args.workdir, f"c{i}.json")
        json.dump(base, open(cluster, "w"))
        compiled = run([args.dtc, "compile", MODEL, "--train", "--cluster", cluster, *split,
                        "-o", plan])
        if compiled.returncode != 0:
            raise SystemExit(f"{' '.join(split)}: no plan without a limit:\n{compiled.stderr}")
        full, _ = peak_of(run([args.dtc, "simulate", plan, "--cluster", cluster]).stdout)
        outcomes = []
        for fraction in FRACTIONS:
            c = dict(base, device=dict(base["device"], memory_capacity=int(full * fraction)))
            json.dump(c, open(cluster, "w"))
            if os.path.exists(plan):
                os.remove(plan)
            compiled = run([args.dtc, "compile", MODEL, "--train", "--cluster", cluster, *split,
                            "-o", plan])
            if compiled.returncode != 0:
                if compiled.returncode != 1 or "error:" not in compiled.stderr:
                    raise SystemExit(f"{' '.join(split)} at {fraction:.0%}: exit status "
                                     f"{compiled.returncode}, no message:\n{compiled.stderr}")
                outcomes.append(f"{fraction:.0%} refused")
                refused += 1
                continue
            simulated = run([args.dtc, "simulate", plan, "--cluster", cluster])
            peak, fits = peak_of(simulated.stdout)
            if not fits:
                raise SystemExit(f"{' '.join(split)} at {fraction:.0%} of {full:.0f} B: the "
                                 f"compiler accepted a plan the simulator says needs {peak:.0f} "
                                 f"B, more than the device's {int(full * fraction)} B")
            outcomes.append(f"{fraction:.0%} fits ({peak / full:.0%})")
            accepted += 1
        print(f"{' '.join(split)}: peak {full / 2**20:.2f} MiB; " + ", ".join(outcomes))
    print(f"{accepted} plans accepted, each fits by the simulator; {refused} refused with a "
          f"message")
    return 0


if __name__ == "__main__":
    sys.exit(main())
