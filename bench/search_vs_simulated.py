#!/usr/bin/env python3
"""The sharding search's predicted compute against the simulator's.

The search prices ops before the fusion passes run, mirroring what they
will fuse (compiler/SearchFusion.cpp); the simulator times the plan the
passes made. Where the two disagree the search weighs compute against
communication wrongly, and picks splits for the wrong reason. For generated
GPTs (and transformers' GPT-2 small, when given), in fp32 and bf16, on a
few pinned meshes of H100s: compiles the training step, reads the search's
predicted compute (its `search:` note) and the simulated compute per rank
(`dtc simulate`), and prints their ratio (1.0 is exact; the search's
decisions need the ratio alike across splits more than near 1).

    python3 bench/search_vs_simulated.py --dtc build/bin/dtc [--gpt2 gpt2.onnx]
"""
import argparse
import os
import re
import subprocess
import sys
import tempfile

UNITS = {"us": 1e-6, "ms": 1e-3, "s": 1.0}
MESHES = (["--dp", "2"], ["--tp", "2"], ["--dp", "2", "--tp", "2"], ["--devices", "4"])


def seconds(text, pattern):
    m = re.search(pattern, text)
    if not m:
        return None
    return float(m.group(1)) * UNITS[m.group(2)]


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--dtc", required=True)
    ap.add_argument("--gpt2", help="transformers' GPT-2 small exported to ONNX (static shapes)")
    args = ap.parse_args()
    models = ["gpt:layers=2,hidden=768,heads=12,seq=1024,vocab=50257,batch=8",
              "gpt:layers=4,hidden=1024,heads=16,seq=1024,vocab=32000,batch=8"]
    if args.gpt2:
        models.append(args.gpt2)
    print(f"{'model':58s} {'precision':9s} {'mesh':14s} {'search':>9s} {'simulated':>10s} "
          f"{'ratio':>6s}")
    ratios = {}
    with tempfile.TemporaryDirectory() as tmp:
        plan = os.path.join(tmp, "p.dtcp")
        for model in models:
            for precision in ("fp32", "bf16"):
                for mesh in MESHES:
                    compiled = subprocess.run(
                        [args.dtc, "compile", model, "--train", "--precision", precision,
                         *mesh, "--preset", "h100-sxm", "-o", plan],
                        capture_output=True, text=True)
                    if compiled.returncode:
                        print(f"{model}: {compiled.stderr.strip()[:200]}", file=sys.stderr)
                        return 1
                    search = seconds(compiled.stdout,
                                     r"predicted per step ([\d.]+) (us|ms|s) compute")
                    simulated = subprocess.run([args.dtc, "simulate", plan, "--preset",
                                                "h100-sxm"], capture_output=True, text=True)
                    sim = seconds(simulated.stdout, r"compute ([\d.]+) (us|ms|s)")
                    if search is None or sim is None:
                        print(f"{model} {mesh}: no figures", file=sys.stderr)
                        return 1
                    ratio = search / sim
                    ratios.setdefault(precision, []).append(ratio)
                    name = os.path.basename(model)[:58]
                    print(f"{name:58s} {precision:9s} {' '.join(mesh):14s} "
                          f"{search * 1e3:7.2f}ms {sim * 1e3:8.2f}ms {ratio:6.2f}")
    for precision, r in ratios.items():
        print(f"{precision}: search / simulated compute {min(r):.2f} to {max(r):.2f} "
              f"(spread {max(r) / min(r):.2f}x)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
