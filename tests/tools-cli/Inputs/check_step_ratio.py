"""Checks that one plan's simulated step is at most a given share of
another's: check_step_ratio.py FAST.out SLOW.out MAX (each `dtc simulate`
output)."""
import re
import sys

UNITS = {"s": 1.0, "ms": 1e-3, "us": 1e-6, "ns": 1e-9}


def step(path):
    m = re.search(r"step time\s+([0-9.]+) (s|ms|us|ns)", open(path).read())
    assert m, f"no step time in {path}"
    return float(m.group(1)) * UNITS[m.group(2)]


fast, slow, most = step(sys.argv[1]), step(sys.argv[2]), float(sys.argv[3])
print(f"{fast:.4g} s against {slow:.4g} s: {fast / slow:.3f} (at most {most})")
assert fast <= most * slow, f"{fast} s is more than {most} of {slow} s"
