"""Whether two `dtc run --log-json` logs have the same losses step by step.

usage: same_losses.py A.jsonl B.jsonl [--rtol R]
Prints each step's two losses; exits 1 naming the first step that differs
by more than R relative (or when the logs have different steps).
"""
import argparse
import json
import sys


def losses(path):
    with open(path) as f:
        return {r["step"]: r["loss"] for r in (json.loads(l) for l in f if l.strip())}


def main():
    p = argparse.ArgumentParser()
    p.add_argument("a")
    p.add_argument("b")
    p.add_argument("--rtol", type=float, default=1e-4)
    args = p.parse_args()
    a, b = losses(args.a), losses(args.b)
    if sorted(a) != sorted(b):
        sys.exit(f"the logs have different steps: {sorted(a)} and {sorted(b)}")
    for step in sorted(a):
        x, y = a[step], b[step]
        print(f"step {step}: {x:.6f} {y:.6f}")
        if abs(x - y) > args.rtol * max(abs(x), abs(y)):
            sys.exit(f"step {step}: losses {x} and {y} differ by more than {args.rtol:g} relative")
    print(f"same losses: {len(a)} steps within {args.rtol:g} relative")


if __name__ == "__main__":
    main()
