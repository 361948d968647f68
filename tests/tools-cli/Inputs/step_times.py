"""Checks two `dtc simulate` outputs of one plan: the first with a
communication stream, the second with communication on the compute stream
(--no-communication-stream). The second's step is its compute plus its
communication, with no idle time, and is longer than the first's."""
import re
import sys

UNITS = {"us": 1e-6, "ms": 1e-3, "s": 1.0}


def figures(path):
    text = open(path).read()
    number = r"([0-9.]+) (us|ms|s)"
    m = re.search(rf"step time\s+{number} \(per rank on average: compute {number}, "
                  rf"communication {number}, idle {number}\)", text)
    assert m, text
    values = [float(m.group(i)) * UNITS[m.group(i + 1)] for i in (1, 3, 5, 7)]
    return dict(zip(("step", "compute", "communication", "idle"), values))


stream, blocking = figures(sys.argv[1]), figures(sys.argv[2])
assert blocking["communication"] > 0, blocking
assert blocking["idle"] == 0, blocking
ends = blocking["compute"] + blocking["communication"]
assert abs(blocking["step"] - ends) <= 0.01 * ends, blocking
assert blocking["step"] > stream["step"], (stream, blocking)
assert stream["compute"] == blocking["compute"], (stream, blocking)
