"""Checks that the plan a replicated one was weighed against ("pipeline:
stage replicas kept|not kept: simulated X a step with them, Y without" in
COMPILE.out) is the one compiled with its stage count pinned: Y equals
the step `dtc simulate` gives that plan (SIMULATE.out), as printed."""
import re
import sys

note = re.search(r"stage replicas (?:kept|not kept): simulated \S+ \S+ a step with them, "
                 r"(\S+ \S+) without", open(sys.argv[1]).read())
assert note, "no stage replicas note"
step = re.search(r"step time\s+(\S+ \S+)", open(sys.argv[2]).read())
assert step, "no step time"
print(f"without replicas: {note.group(1)}; the pinned count's plan: {step.group(1)}")
assert note.group(1) == step.group(1), f"{note.group(1)} != {step.group(1)}"
