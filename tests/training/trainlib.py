"""What the training tests share: checks that count failures, running dtc,
reading its step lines."""
import os
import re
import subprocess
import sys

import numpy as np

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


def next_token_data(folder, rows=64, seq=32, vocab=256):
    """`folder` with input_ids.npy (seeded random tokens) and labels.npy (the
    next token of each); returns it."""
    ids = np.random.RandomState(0).randint(0, vocab, (rows, seq)).astype(np.int64)
    os.makedirs(folder, exist_ok=True)
    np.save(os.path.join(folder, "input_ids.npy"), ids)
    np.save(os.path.join(folder, "labels.npy"), np.roll(ids, -1, 1))
    return folder


def dtc_outputs(dtc, model, shapes, inputs, tmp):
    """Compiles `model` for inference with `shapes` ({dim: size}) and runs it
    on `inputs` ({name: array}); returns its first output."""
    plan = os.path.join(tmp, "infer.dtcp")
    cmd = [dtc, "compile", model, "-o", plan]
    for name, size in shapes.items():
        cmd += ["--shape", f"{name}={size}"]
    run(cmd)
    folder, out = os.path.join(tmp, "infer-in"), os.path.join(tmp, "infer-out")
    os.makedirs(folder, exist_ok=True)
    for name, array in inputs.items():
        np.save(os.path.join(folder, f"{name}.npy"), array)
    run([dtc, "run", plan, "--inputs", folder, "--outputs", out, "--output-format", "npy"])
    return np.load(os.path.join(out, "output_0.npy"))


def check_resume(dtc, plan, data, tmp, stop, end, every=None):
    """Training to `end` equals training to `stop` with a checkpoint, then
    resuming from it to `end`, loss for loss (one thread: the same sums)."""
    common = [dtc, "run", plan, "--data", data, "--threads", "1"]
    full = losses(run(common + ["--steps", str(end)]).stdout)
    ck = os.path.join(tmp, "ck-resume")
    first = common + ["--steps", str(stop), "--checkpoint", ck]
    if every:
        first += ["--checkpoint-every", str(every)]
    a = losses(run(first).stdout)
    b = losses(run(common + ["--steps", str(end), "--checkpoint", ck, "--resume"]).stdout)
    check(a + b == full and len(full) == end,
          f"checkpoint at {stop} + resume gives the uninterrupted losses bit for bit")
