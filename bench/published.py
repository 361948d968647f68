#!/usr/bin/env python3
"""Simulated against published: per-GPU throughput of a large GPT layer.

Takes published training measurements with their full configuration
(bench/published/*.json, each citing its source), builds the same model with
dtc's weight-free GPT generator, compiles a bf16 training step with the
published tensor-parallel size pinned (`--tp`; what it splits, and sequence
parallelism, searched), and simulates it on the cluster preset of the
publication's hardware. A layer's time is the difference between the step
times of the model with 5 layers and with 1 (the same embedding, head, loss
and optimizer), divided by 4. Prints published and simulated time per layer
and per-GPU throughput (model FLOPs of the layer, forward and backward, as
the publication counts them: 72 b s h^2 (1 + s / 6h)), and their ratio.

    python3 bench/published.py --dtc build/bin/dtc [--check]

--check exits non-zero when a simulated time is more than 15% off.
"""
import argparse
import glob
import json
import os
import re
import subprocess
import sys
import tempfile

UNITS = {"us": 1e-6, "ms": 1e-3, "s": 1.0}
TOLERANCE = 0.15


def run(cmd):
    done = subprocess.run(cmd, capture_output=True, text=True)
    if done.returncode != 0:
        sys.exit(f"failed: {' '.join(cmd)}\n{done.stdout}{done.stderr}")
    return done.stdout


def step_seconds(dtc, tmp, result, preset, layers):
    m = result["model"]
    spec = (f"gpt:layers={layers},hidden={m['hidden']},heads={m['heads']},seq={m['seq']},"
            f"vocab={m['vocab']},batch={result['micro_batch']}")
    plan = os.path.join(tmp, f"plan{layers}.dtcp")
    tp = result["parallel"]["tensor"]
    run([dtc, "compile", spec, "--train", "--precision", "bf16", "--preset", preset,
         *(["--tp", str(tp)] if tp > 1 else []), "-o", plan])
    out = run([dtc, "simulate", plan, "--preset", preset])
    t = re.search(r"step time\s+([0-9.]+) (us|ms|s)", out)
    return float(t.group(1)) * UNITS[t.group(2)]


def layer_flops(result):
    """Model FLOPs of one layer, forward and backward (Korthikanti et al., Appendix A)."""
    m, b = result["model"], result["micro_batch"]
    s, h = m["seq"], m["hidden"]
    return 72 * b * s * h * h * (1 + s / (6 * h))


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--dtc", required=True)
    ap.add_argument("--check", action="store_true")
    args = ap.parse_args()
    here = os.path.dirname(os.path.abspath(__file__))
    worst = 0.0
    print(f"{'published result':58} {'GPUs':>4} {'layer ms':>17} {'TFLOP/s per GPU':>17} "
          f"{'sim/pub':>7}")
    print(f"{'':58} {'':>4} {'pub':>8} {'sim':>8} {'pub':>8} {'sim':>8}")
    with tempfile.TemporaryDirectory() as tmp:
        for path in sorted(glob.glob(os.path.join(here, "published", "*.json"))):
            data = json.load(open(path))
            for result in data["results"]:
                first, last = 1, 5
                layer = (step_seconds(args.dtc, tmp, result, data["preset"], last) -
                         step_seconds(args.dtc, tmp, result, data["preset"], first)) / (last - first)
                published = result["measured_layer_ms"] * 1e-3
                gpus = result["parallel"]["gpus"]
                flops = layer_flops(result) / gpus
                ratio = layer / published
                worst = max(worst, abs(ratio - 1))
                print(f"{result['name']:58} {gpus:>4} {published * 1e3:>8.1f} {layer * 1e3:>8.1f} "
                      f"{flops / published / 1e12:>8.1f} {flops / layer / 1e12:>8.1f} {ratio:>7.2f}")
            print(f"  source: {data['source']}")
            print(f"  hardware: {data['hardware']}; simulated on the '{data['preset']}' preset")
    print(f"largest difference {worst:.1%} (target: within {TOLERANCE:.0%})")
    if args.check and worst > TOLERANCE:
        sys.exit(1)


if __name__ == "__main__":
    main()
