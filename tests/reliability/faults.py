#!/usr/bin/env python3
"""Fault injection: what a long training run meets, on four CPU ranks.

The example GPT trains on four ranks (two pipeline stages, each data
parallel over two), checkpointing every few steps. Against an uninterrupted
run of the same steps:

  kills      SIGKILL of a random rank at random steps, several times, under
             `dtc run --max-restarts`: every restart resumes from the last
             checkpoint and the final weights (every rank's checkpoint file)
             are bit-identical to the uninterrupted run's;
  hang       SIGSTOP of a random rank under --timeout 3: the other ranks'
             watchdogs end the job within the timeout, naming the stopped
             rank from the heartbeats, and --max-restarts goes on;
  nonfinite  an inf in a batch under --skip-nonfinite on 4 ranks (data and
             tensor parallel, ZeRO-3): the step is skipped on every rank;
  damage     a flipped bit or a truncation at a random offset of a random
             rank's checkpoint file (its last or its previous): `dtc
             checkpoint inspect` names the file, and a resume either falls
             back to the previous checkpoint and goes on with the
             uninterrupted run's losses, or (both of a rank's files damaged)
             stops with a message naming the rank; never a silent use;
  disk full  a file-size limit (RLIMIT_FSIZE) that the next checkpoint
             overruns (one rank), and a small tmpfs in a mount namespace of
             the test's own (four ranks): the write fails with a message,
             every rank stops, and the previous checkpoint is intact and
             resumable.

Prints the figures: restarts survived, time from a kill to the ranks
resumed, from a stopped rank to the hang noticed and to the ranks resumed,
damaged files tried and caught.

    python3 tests/reliability/faults.py --dtc build/bin/dtc [--seed N]
"""
import argparse
import os
import random
import resource
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time

import numpy as np
import onnx

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "models"))
sys.path.insert(0, os.path.join(HERE, "..", "training"))
import generate  # noqa: E402
from trainlib import check, finish, losses, next_token_data, run  # noqa: E402

STEPS, EVERY = 120, 10
KILLS = 3
DAMAGES = 16


def rank_processes(root):
    """{rank: pid} of the MPI ranks among `root`'s descendants."""
    children = {}
    for pid in os.listdir("/proc"):
        if not pid.isdigit():
            continue
        try:
            with open(f"/proc/{pid}/stat") as f:
                ppid = int(f.read().rsplit(")", 1)[1].split()[1])
        except OSError:
            continue
        children.setdefault(ppid, []).append(int(pid))
    found, pending = {}, [root]
    while pending:
        pid = pending.pop()
        for child in children.get(pid, []):
            pending.append(child)
            try:
                with open(f"/proc/{child}/environ", "rb") as f:
                    env = dict(e.split(b"=", 1) for e in f.read().split(b"\0") if b"=" in e)
            except OSError:
                continue
            if b"OMPI_COMM_WORLD_RANK" in env:
                found[int(env[b"OMPI_COMM_WORLD_RANK"])] = child
    return found


def files_of(folder):
    """Every rank's last checkpoint file's bytes."""
    return {name: open(os.path.join(folder, name), "rb").read()
            for name in sorted(os.listdir(folder)) if name.endswith(".dtck")}


def kills(dtc, plan, data, reference, tmp, rng):
    """SIGKILL a random rank at random steps under --max-restarts."""
    ck = os.path.join(tmp, "ck-kills")
    cmd = [dtc, "run", plan, "--data", data, "--steps", str(STEPS), "--threads", "1",
           "--checkpoint", ck, "--checkpoint-every", str(EVERY), "--max-restarts", str(KILLS + 1)]
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, bufsize=1)
    # Kill points spread over the run, each after the checkpoint before it.
    targets = sorted(rng.sample(range(EVERY + 3, STEPS - 5), KILLS))
    killed, recovery, out = [], [], []
    killed_at = None
    for line in proc.stdout:
        out.append(line)
        if line.startswith("resumed from") and killed_at is not None:
            recovery.append(time.monotonic() - killed_at)
            killed_at = None
        if not line.startswith("step ") or not targets or killed_at is not None:
            continue
        step = int(line.split()[1])
        if step >= targets[0]:
            ranks = rank_processes(proc.pid)
            if not ranks:
                continue
            victim = rng.choice(sorted(ranks))
            os.kill(ranks[victim], signal.SIGKILL)
            killed_at = time.monotonic()
            killed.append((victim, step))
            targets.pop(0)
    err = proc.stderr.read()
    proc.wait()
    restarts = err.count("restart ")
    check(proc.returncode == 0, f"the run survives {len(killed)} kills "
          f"(ranks and steps {killed}) with --max-restarts: exit status {proc.returncode}")
    check(restarts == len(killed) == KILLS and "run: finished after" in "".join(out),
          f"each kill restarts the job once ({restarts} restarts said)")
    check(files_of(ck) == reference,
          "the final weights and optimizer state of every rank are bit-identical to the "
          "uninterrupted run's")
    if proc.returncode != 0 or restarts != KILLS:
        print(err)
    return len(killed), recovery


def stopped_by_user(dtc, plan, data, tmp):
    """SIGTERM to dtc (a batch system ending the job) under --max-restarts:
    the ranks stop and the job is not started again."""
    cmd = [dtc, "run", plan, "--data", data, "--steps", str(STEPS), "--threads", "1",
           "--checkpoint", os.path.join(tmp, "ck-term"), "--checkpoint-every", str(EVERY),
           "--max-restarts", "3"]
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, bufsize=1)
    for line in proc.stdout:
        if line.startswith("step ") and int(line.split()[1]) >= 20:
            os.kill(proc.pid, signal.SIGTERM)
            break
    out, err = proc.communicate(timeout=60)
    check(proc.returncode != 0 and "not restarting it" in err and "restart 1" not in err
          and not rank_processes(proc.pid),
          "SIGTERM to dtc under --max-restarts stops the job for good")


def parent_of(pid):
    """A process's parent id from /proc, or None when it has exited since
    /proc was listed (any process on the machine may)."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[1]
    except (FileNotFoundError, ProcessLookupError, IndexError):
        return None


def kill_one_rank(dtc, plan1, data, tmp, rng):
    """One rank (no MPI: dtc runs it as its child) killed once under --max-restarts."""
    ref, ck = os.path.join(tmp, "ref-1"), os.path.join(tmp, "ck-kill-1")
    common = [dtc, "run", plan1, "--data", data, "--steps", str(STEPS // 2), "--threads", "1",
              "--checkpoint-every", str(EVERY)]
    run(common + ["--checkpoint", ref])
    proc = subprocess.Popen(common + ["--checkpoint", ck, "--max-restarts", "1"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, bufsize=1)
    target, killed = rng.randrange(EVERY + 2, STEPS // 2 - 5), None
    for line in proc.stdout:
        if killed is None and line.startswith("step ") and int(line.split()[1]) >= target:
            children = [p for p in os.listdir("/proc") if p.isdigit() and
                        parent_of(p) == str(proc.pid)]
            if children:
                os.kill(int(children[0]), signal.SIGKILL)
                killed = int(line.split()[1])
    err = proc.stderr.read()
    proc.wait()
    check(proc.returncode == 0 and killed is not None and "restart 1 of 1: dtc was killed by "
          "signal 9" in err and files_of(ck) == files_of(ref),
          f"one rank killed at step {killed}: restarted, final weights bit-identical")
    if proc.returncode != 0:
        print(err)


def hang(dtc, plan, data, tmp, rng):
    """SIGSTOP of a rank: the others' watchdogs end the job within the
    timeout, naming the stopped rank; under --max-restarts the job goes on."""
    timeout = 3
    ck = os.path.join(tmp, "ck-hang")
    cmd = [dtc, "run", plan, "--data", data, "--steps", str(STEPS), "--threads", "1",
           "--checkpoint", ck, "--checkpoint-every", str(EVERY), "--timeout", str(timeout),
           "--max-restarts", "1"]
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, bufsize=1)
    target, stopped, victim = rng.randrange(EVERY + 2, STEPS // 2), None, None
    detected, said = None, []  # said: (when, line) of stderr, read as it comes

    def read_stderr():
        for line in proc.stderr:
            said.append((time.monotonic(), line))
    reader = threading.Thread(target=read_stderr)
    reader.start()
    for line in proc.stdout:
        if stopped is None and line.startswith("step ") and int(line.split()[1]) >= target:
            ranks = rank_processes(proc.pid)
            victim = rng.choice(sorted(ranks))
            os.kill(ranks[victim], signal.SIGSTOP)
            stopped = time.monotonic()
        if line.startswith("resumed from") and stopped is not None and detected is None:
            detected = time.monotonic() - stopped
    proc.wait()
    reader.join()
    err = "".join(line for _, line in said)
    named = f"rank {victim} stopped" in err and "no progress for" in err
    noticed = next((when - stopped for when, line in said
                    if stopped is not None and "no progress for" in line), None)
    check(stopped is not None and named and "restart 1 of 1" in err and noticed is not None
          and noticed < timeout + 2,
          f"rank {victim} stopped (SIGSTOP): the job ends naming it "
          f"{noticed if noticed is None else round(noticed, 2)} s later (--timeout {timeout}), "
          "and restarts")
    check(proc.returncode == 0 and files_of(ck) == files_of(os.path.join(tmp, "reference")),
          "after the restart the run finishes with the uninterrupted weights")
    if not named or proc.returncode != 0:
        print(err[-3000:])
    return noticed, detected


def nonfinite_pipelined(dtc, model, data, tmp):
    """A learning rate that overflows the weights after step 1: on two
    pipeline stages every later step is skipped, as on one rank."""
    seen = {}
    for name, flags in {"1 rank": [], "pp=2 x dp=2": ["--pp", "2", "--dp", "2", "--zero", "0",
                                                      "--micro-batches", "2"]}.items():
        plan = os.path.join(tmp, f"overflow-{len(seen)}.dtcp")
        run([dtc, "compile", model, "--train", "--shape", "batch=8", "--shape", "seq=32",
             "--optimizer", "sgd", "--momentum", "0", "--lr", "1e38", "--skip-nonfinite",
             "-o", plan] + flags)
        out = run([dtc, "run", plan, "--data", data, "--steps", "4", "--threads", "1"],
                  expect_ok=False)
        seen[name] = (out.returncode, [line.split(":")[0] for line in out.stdout.splitlines()
                                       if line.startswith("skipped step")], losses(out.stdout))
    check(seen["pp=2 x dp=2"] == seen["1 rank"] and
          seen["1 rank"][1] == ["skipped step 2", "skipped step 3", "skipped step 4"],
          "--skip-nonfinite on a pipeline: the overflowing steps skipped as on one rank")


def nonfinite(dtc, tmp):
    """An inf in one batch under --skip-nonfinite, on 4 ranks split two ways:
    every rank skips that step together and the losses are one rank's."""
    x = np.random.RandomState(0).randn(64, 64).astype(np.float32)
    x[20, 3] = np.inf  # in the second batch of 16, on one data-parallel rank's rows
    data = os.path.join(tmp, "inf-data")
    os.makedirs(data)
    np.save(os.path.join(data, "x.npy"), x)
    np.save(os.path.join(data, "labels.npy"), np.random.RandomState(1).randint(0, 10, 64))
    mlp = os.path.join(tmp, "mlp.onnx")
    onnx.save(generate.MODELS["mlp"](), mlp)
    got = {}
    for name, flags in {"1 rank": [], "dp=4": ["--dp", "4", "--zero", "0"],
                        "dp=2 x tp=2, ZeRO-3": ["--dp", "2", "--tp", "2", "--zero", "3"]}.items():
        plan = os.path.join(tmp, f"skip-{len(got)}.dtcp")
        run([dtc, "compile", mlp, "--train", "--shape", "batch=16", "--skip-nonfinite", "-o",
             plan] + flags)
        out = run([dtc, "run", plan, "--data", data, "--steps", "6", "--no-shuffle", "--threads",
                   "1"], expect_ok=False)
        got[name] = (out.returncode, losses(out.stdout),
                     out.stdout.count("skipped step 2:"), out.stdout.count("skipped step 6:"))
    one = got["1 rank"]
    for name, (status, seen, second, sixth) in got.items():
        same = len(seen) == 6 and all(
            (a == b == "nan") or (a != "nan" and b != "nan" and
                                  abs(float(a) - float(b)) <= 1e-5 * abs(float(b)))
            for (_, a), (_, b) in zip(seen, one[1]))
        check(status == 0 and second == sixth == 1 and same,
              f"--skip-nonfinite, {name}: steps 2 and 6 (an inf in their batch) skipped, said "
              "once, the other losses those of one rank")


def damage(path, rng):
    """Flips a random bit or truncates at a random offset; says which."""
    data = bytearray(open(path, "rb").read())
    if rng.random() < 0.5:
        at = rng.randrange(len(data))
        data[at] ^= 1 << rng.randrange(8)
        what = f"bit flipped at byte {at}"
    else:
        at = rng.randrange(len(data))
        data = data[:at]
        what = f"truncated to {at} bytes"
    open(path, "wb").write(bytes(data))
    return what


def damages(dtc, plan, data, ref_dir, full, tmp, rng):
    """Damaged checkpoint files: caught by inspect, fallen back from or refused."""
    caught = 0
    for trial in range(DAMAGES):
        folder = os.path.join(tmp, f"damaged-{trial}")
        shutil.copytree(ref_dir, folder)
        rank = rng.randrange(4)
        previous = trial % 4 == 3  # a quarter of the trials damage the previous file
        name = f"checkpoint.rank-{rank}.dtck" + (".previous" if previous else "")
        what = damage(os.path.join(folder, name), rng)
        inspect = run([dtc, "checkpoint", "inspect", folder], expect_ok=False)
        flagged = (inspect.returncode == 1 and
                   any(line.lstrip().startswith(name + " ") and "DAMAGED" in line
                       for line in inspect.stdout.splitlines()))
        resumed = run([dtc, "run", plan, "--data", data, "--steps", str(STEPS + EVERY),
                       "--threads", "1", "--checkpoint", folder, "--resume"], expect_ok=False)
        got = losses(resumed.stdout)
        if previous:  # the last files are whole: resumes from them, no word needed
            ok = resumed.returncode == 0 and got == full[STEPS:]
        else:  # falls back a checkpoint, says so, and goes on as the run would
            ok = (resumed.returncode == 0 and f"rank {rank}: " in resumed.stderr and name in
                  resumed.stderr and "resuming from the previous checkpoint" in resumed.stderr
                  and got == full[STEPS - EVERY:])
        caught += flagged and ok
        check(flagged and ok, f"{name} {what}: inspect names it, the resume "
              + ("is unaffected" if previous else "falls back to step "
                 f"{STEPS - EVERY} with the uninterrupted losses"))
        if not (flagged and ok):
            print(inspect.stdout, resumed.stdout[-2000:], resumed.stderr[-2000:])
    # Both of a rank's files damaged: nothing to resume that rank from.
    folder = os.path.join(tmp, "damaged-both")
    shutil.copytree(ref_dir, folder)
    for name in ("checkpoint.rank-1.dtck", "checkpoint.rank-1.dtck.previous"):
        data_ = bytearray(open(os.path.join(folder, name), "rb").read())
        data_[len(data_) // 2] ^= 0x10
        open(os.path.join(folder, name), "wb").write(bytes(data_))
    resumed = run([dtc, "run", plan, "--data", data, "--steps", str(STEPS + EVERY),
                   "--threads", "1", "--checkpoint", folder, "--resume"], expect_ok=False)
    check(resumed.returncode == 1 and "checkpoint.rank-1.dtck: corrupt checkpoint" in
          resumed.stderr and "rank 1" in resumed.stderr and not losses(resumed.stdout),
          "both of a rank's files damaged: the resume stops, naming the rank and its file")
    return caught, DAMAGES


def disk_full(dtc, plan, data, tmp):
    """A checkpoint write that overruns a file-size limit leaves the previous one."""
    ck = os.path.join(tmp, "ck-full")
    common = [dtc, "run", plan, "--data", data, "--threads", "1", "--checkpoint", ck]
    run(common + ["--steps", str(EVERY)])
    before = files_of(ck)
    size = min(len(b) for b in before.values())

    def limited():
        signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # a write past it fails (EFBIG)
        resource.setrlimit(resource.RLIMIT_FSIZE, (size // 2, size // 2))
    full = subprocess.run(common + ["--steps", str(2 * EVERY), "--resume"], capture_output=True,
                          text=True, preexec_fn=limited)
    said = full.stderr.strip().splitlines()
    check(full.returncode == 1 and "cannot write" in full.stderr and
          "File too large" in full.stderr and
          f"the checkpoint of step {EVERY} in {ck} is intact" in full.stderr,
          "a checkpoint write past a file-size limit fails with a message: " +
          (said[-1] if said else "(nothing said)"))
    check(files_of(ck) == before and not any(n.endswith(".tmp") for n in os.listdir(ck)),
          "the previous checkpoint is intact and no partial file is left")
    again = run(common + ["--steps", str(2 * EVERY), "--resume"], expect_ok=False)
    check(again.returncode == 0 and losses(again.stdout) and
          losses(again.stdout)[0][0] == EVERY + 1, "with room again, the run resumes from it")


def disk_full_ranks(dtc, plan, data, tmp):
    """Four ranks checkpoint onto a small file system (a tmpfs mounted in a
    mount namespace of the test's own) with room for one checkpoint and a
    half: the next fills it. All ranks stop, saying so; the checkpoint
    before is intact."""
    ck, out = os.path.join(tmp, "ck-tmpfs"), os.path.join(tmp, "ck-tmpfs-after")
    os.makedirs(ck)
    probe = os.path.join(tmp, "ck-probe")
    run([dtc, "run", plan, "--data", data, "--threads", "1", "--checkpoint", probe,
         "--steps", "1"])
    room = sum(os.path.getsize(os.path.join(probe, n)) for n in os.listdir(probe)) * 3 // 2
    common = f"{dtc} run {plan} --data {data} --threads 1 --checkpoint {ck}"
    script = (f"mount -t tmpfs -o size={room} tmpfs {ck} && "
              f"{common} --steps {EVERY} > /dev/null && "
              f"{common} --steps {2 * EVERY} --resume > /dev/null; "
              f"echo status $?; cp -r {ck} {out}")
    done = subprocess.run(["unshare", "-m", "sh", "-c", script], capture_output=True, text=True)
    status = [line for line in done.stdout.splitlines() if line.startswith("status ")]
    said = [line for line in done.stderr.splitlines() if "error" in line]
    check(status == ["status 1"] and "No space left on device" in done.stderr and
          f"the checkpoint of step {EVERY} in {ck} is intact" in done.stderr,
          "4 ranks, a full disk: the run stops with a message: " +
          (said[-1] if said else done.stderr.strip()[-300:] or "(nothing said)"))
    inspect = run([dtc, "checkpoint", "inspect", out], expect_ok=False)
    check(inspect.returncode == 0 and f"a resume starts from step {EVERY}" in inspect.stdout and
          not any(n.endswith(".tmp") for n in os.listdir(out)),
          "4 ranks: the checkpoint before is intact, every file verified, no partial file left")
    again = run([dtc, "run", plan, "--data", data, "--threads", "1", "--checkpoint", out,
                 "--steps", str(2 * EVERY), "--resume"], expect_ok=False)
    check(again.returncode == 0 and losses(again.stdout) and
          losses(again.stdout)[0][0] == EVERY + 1, "4 ranks: with room again, the run resumes")


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--dtc", required=True)
    parser.add_argument("--seed", type=int, default=2026)
    args = parser.parse_args()
    dtc = os.path.abspath(args.dtc)
    rng = random.Random(args.seed)
    with tempfile.TemporaryDirectory() as tmp:
        data = next_token_data(os.path.join(tmp, "data"))
        model = os.path.join(tmp, "gpt.onnx")
        onnx.save(generate.MODELS["gpt"](), model)
        plan = os.path.join(tmp, "gpt4.dtcp")
        run([dtc, "compile", model, "--train", "--shape", "batch=8", "--shape", "seq=32",
             "--pp", "2", "--dp", "2", "--zero", "0", "--micro-batches", "2", "-o", plan])
        plan1 = os.path.join(tmp, "gpt1.dtcp")
        run([dtc, "compile", model, "--train", "--shape", "batch=8", "--shape", "seq=32",
             "-o", plan1])

        # The uninterrupted run: its checkpoints, and its losses a checkpoint further.
        ref_dir = os.path.join(tmp, "reference")
        run([dtc, "run", plan, "--data", data, "--steps", str(STEPS), "--threads", "1",
             "--checkpoint", ref_dir, "--checkpoint-every", str(EVERY)])
        reference = files_of(ref_dir)
        full = losses(run([dtc, "run", plan, "--data", data, "--steps", str(STEPS + EVERY),
                           "--threads", "1"]).stdout)
        check(len(reference) == 4 and len(full) == STEPS + EVERY, "the uninterrupted runs")

        survived, recovery = kills(dtc, plan, data, reference, tmp, rng)
        kill_one_rank(dtc, plan1, data, tmp, rng)
        stopped_by_user(dtc, plan, data, tmp)
        nonfinite(dtc, tmp)
        nonfinite_pipelined(dtc, model, data, tmp)
        noticed, hung = hang(dtc, plan, data, tmp, rng)
        caught, tried = damages(dtc, plan, data, ref_dir, full, tmp, rng)
        disk_full(dtc, plan1, data, tmp)
        disk_full_ranks(dtc, plan, data, tmp)
        print(f"figures: {survived} restarts survived; kill to ranks resumed "
              + ", ".join(f"{s:.2f} s" for s in recovery)
              + (f"; a stopped rank noticed after {noticed:.2f} s, the ranks resumed after "
                 f"{hung:.2f} s (--timeout 3)" if noticed and hung else "")
              + f"; damaged checkpoint files caught: {caught} of {tried}")
    finish("fault injection")


if __name__ == "__main__":
    main()
