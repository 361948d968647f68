#!/usr/bin/env python3
"""Compares the per-step losses two `dtc run` outputs print.

compare_losses.py A.out B.out --steps N --within TOL: both print N steps
("step K loss X ..."), and every pair of losses agrees within TOL relative
(0: exactly as printed). Exit status 1, saying the worst step, otherwise.
"""
import argparse
import re
import sys


def losses(path):
    return [float(x) for x in re.findall(r"^step \d+ loss (\S+)", open(path).read(), re.M)]


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("a")
    parser.add_argument("b")
    parser.add_argument("--steps", type=int, required=True)
    parser.add_argument("--within", type=float, required=True)
    args = parser.parse_args()
    a, b = losses(args.a), losses(args.b)
    if len(a) != args.steps or len(b) != args.steps:
        sys.exit(f"expected {args.steps} losses each, got {len(a)} and {len(b)}")
    worst = max(range(args.steps), key=lambda i: abs(a[i] - b[i]) / abs(a[i]))
    error = abs(a[worst] - b[worst]) / abs(a[worst])
    if error > args.within:
        sys.exit(f"step {worst + 1}: {a[worst]} vs {b[worst]} ({error:.3g} relative, "
                 f"more than {args.within})")
    print(f"{args.steps} losses agree (worst {error:.3g} relative at step {worst + 1})")


if __name__ == "__main__":
    main()
