"""Checks a compile note "pipeline: stage replicas kept|not kept: simulated
X a step with them, Y without": the plan kept is the faster of the two."""
import re
import sys

UNITS = {"s": 1.0, "ms": 1e-3, "us": 1e-6, "ns": 1e-9}
text = open(sys.argv[1]).read()
m = re.search(r"stage replicas (kept|not kept): simulated ([0-9.]+) (s|ms|us|ns) a step with "
              r"them, ([0-9.]+) (s|ms|us|ns) without", text)
assert m, "no stage replicas note"
with_ = float(m.group(2)) * UNITS[m.group(3)]
without = float(m.group(4)) * UNITS[m.group(5)]
kept = m.group(1) == "kept"
assert kept == (with_ < without), f"kept={kept} but {with_} with, {without} without"
print(f"replicas {'kept' if kept else 'not kept'}: {with_:.4g} s with, {without:.4g} s without")
