#!/usr/bin/env python3
"""The sharding search's memory is the plan's.

The search limits each split's memory by its own count of what a device
holds for the step (weights, optimizer state, activations kept for the
backward); `dtc simulate` finds the plan's peak and what it is made of.
For each way of splitting a small GPT (f32 and bf16 steps; data, tensor
and pipeline parallelism; ZeRO-1), the search's figure ("predicted ... X
per device of weights, optimizer state and kept activations", the
fullest pipeline stage's) must lie between the simulator's weights +
optimizer state + activations kept for backward (it may not count less
than the plan holds of those) and the plan's whole peak (nor more than
the plan needs), each within --tolerance. The bounds are two because the
simulator sorts the peak's buffers into kinds by what is live at that
moment, which moves a tensor-parallel plan's kept activations into
"gradients and workspace". A bf16 step's masters, split with their
updates under ZeRO, and its bf16 copies, held once rather than per
micro-batch in flight, are where the two have parted. (ZeRO-3 is left
out: the weights it gathers whole for the forward are not counted by the
search, which prices each gather alone; how long they live is the
buckets' choice, made after it, and given up where the plan does not
fit.) Prints a line per split; exits 1 on the first outside its bounds.

    python3 tests/tools/search_memory.py --dtc build/bin/dtc --workdir DIR
"""
import argparse
import os
import re
import subprocess
import sys

MODEL = "gpt:layers=8,hidden=256,heads=4,seq=128,vocab=1024,batch=32"
SPLITS = [
    ["--dp", "4", "--zero", "1"],
    ["--precision", "bf16", "--dp", "4", "--zero", "1"],
    ["--precision", "bf16", "--tp", "2", "--dp", "2"],
    ["--precision", "bf16", "--pp", "4", "--dp", "2", "--micro-batches", "8"],
    ["--precision", "bf16", "--pp", "2", "--dp", "2", "--tp", "2", "--zero", "1",
     "--micro-batches", "4"],
]
UNITS = {"B": 1, "KiB": 2**10, "MiB": 2**20, "GiB": 2**30}
SIZE = r"([0-9.]+) (B|KiB|MiB|GiB)"


def size(match, group=1):
    return float(match.group(group)) * UNITS[match.group(group + 1)]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--dtc", required=True)
    ap.add_argument("--workdir", required=True)
    ap.add_argument("--tolerance", type=float, default=0.03,
                    help="slack on either bound, relative (default 0.03)")
    args = ap.parse_args()
    os.makedirs(args.workdir, exist_ok=True)
    for i, split in enumerate(SPLITS):
        plan = os.path.join(args.workdir, f"p{i}.dtcp")
        compiled = subprocess.run([args.dtc, "compile", MODEL, "--train", *split, "-o", plan],
                                  capture_output=True, text=True)
        if compiled.returncode != 0:
            raise SystemExit(f"{' '.join(split)}: compile failed:\n{compiled.stderr}")
        predicted = re.search(SIZE + r" per device of weights, optimizer state and kept "
                              r"activations", compiled.stdout)
        if not predicted:
            raise SystemExit(f"{' '.join(split)}: no search note:\n{compiled.stdout}")
        simulated = subprocess.run([args.dtc, "simulate", plan], capture_output=True,
                                   text=True).stdout
        parts = {}
        for kind in ("weights", "optimizer state", "activations kept for backward"):
            m = re.search(r"[=+] " + kind + " " + SIZE, simulated)
            parts[kind] = size(m) if m else 0.0
        if not parts["weights"]:
            raise SystemExit(f"{' '.join(split)}: no memory parts in dtc simulate's output:\n"
                             f"{simulated}")
        held = sum(parts.values())
        peak = re.search(r"memory peak +" + SIZE + " per rank", simulated)
        if not peak:
            raise SystemExit(f"{' '.join(split)}: no peak in dtc simulate's output:\n{simulated}")
        search = size(predicted)
        low, high = held * (1 - args.tolerance), size(peak) * (1 + args.tolerance)
        print(f"{' '.join(split)}: search {search / 2**20:.2f} MiB; plan: weights, state and "
              f"kept activations {held / 2**20:.2f} MiB, peak {size(peak) / 2**20:.2f} MiB")
        if not low <= search <= high:
            raise SystemExit(f"{' '.join(split)}: the search counts {search:.0f} B, outside the "
                             f"plan's {held:.0f} B held to {size(peak):.0f} B peak (within "
                             f"{args.tolerance:.0%})")
    print(f"{len(SPLITS)} splits, each search's memory between its plan's held parts and "
          f"peak")
    return 0


if __name__ == "__main__":
    sys.exit(main())
