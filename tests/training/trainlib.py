"""What the training tests share: checks that count failures, running dtc,
reading its step lines."""
import re
import subprocess
import sys

FAILURES = []


def check(ok, what):
    print(("ok    " if ok else "FAIL  ") + what)
    if not ok:
        FAILURES.append(what)


def run(cmd, expect_ok=True):
    p = subprocess.run(cmd, capture_output=True, text=True)
    if expect_ok and p.returncode != 0:
        sys.exit(f"command failed ({p.returncode}): {' '.join(cmd)}\n{p.stdout}{p.stderr}")
    return p


def losses(text):
    """(step, loss as printed) of every `step N loss X` line."""
    return [(int(m.group(1)), m.group(2)) for m in re.finditer(r"^step (\d+) loss (\S+)", text, re.M)]


def step_times(text):
    """Milliseconds of every step line after the first (which warms up)."""
    return [float(m.group(1)) for m in re.finditer(r"^step \d+ loss \S+ .*time (\S+) ms", text, re.M)][1:]


def finish(what):
    if FAILURES:
        sys.exit(f"{len(FAILURES)} {what} check(s) failed")
    print(f"{what} checks passed")
