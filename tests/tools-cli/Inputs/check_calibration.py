"""Each plan's searched compute ("predicted per step X compute" in dtc plan
--explain) against the simulator's per-rank compute ("compute Y" in dtc
simulate): within [0.9, 1.1] of it. Arguments: path prefixes P, with
P.explain and P.sim."""
import re
import sys

UNITS = {"s": 1.0, "ms": 1e-3, "us": 1e-6}


def seconds(pattern, text, path):
    match = re.search(pattern, text)
    if not match:
        sys.exit(f"{path}: no match for {pattern!r}")
    return float(match.group(1)) * UNITS[match.group(2)]


for prefix in sys.argv[1:]:
    searched = seconds(r"predicted per step ([0-9.]+) (s|ms|us) compute",
                       open(prefix + ".explain").read(), prefix + ".explain")
    simulated = seconds(r"per rank on average: compute ([0-9.]+) (s|ms|us)",
                        open(prefix + ".sim").read(), prefix + ".sim")
    ratio = searched / simulated
    print(f"{prefix}: searched {searched * 1e3:.3f} ms, simulated {simulated * 1e3:.3f} ms, "
          f"ratio {ratio:.2f}")
    if not 0.9 <= ratio <= 1.1:
        sys.exit(f"{prefix}: the search's compute is {ratio:.2f} times the simulator's")
