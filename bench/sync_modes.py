#!/usr/bin/env python3
"""Synchronous data parallelism against local SGD, side by side.

Usage:
    python3 bench/sync_modes.py [--dtc build/bin/dtc] [--ranks 4] [--steps 400]
                                [--every 2,4,8,16] [--keep DIR]

Needs scikit-learn (its digits data set: 1797 8x8 images, 10 classes). Not
run in CI: it measures convergence, which is a figure, not a test.

Trains the test MLP (tests/models/generate.py: 64 -> 128 -> 64 -> 10) on
the digits, standardised, the first 1437 images for training and the last
360 held out, on RANKS data-parallel ranks (batch 64, AdamW lr 1e-3, the
same data order for every mode), once with the gradients all-reduced every
step (`--sync allreduce`, the reference) and once for each H with local SGD
(`--sync local --average-every H`) and with parameter servers (2 servers,
synchronous and asynchronous with staleness S; an asynchronous run's loss
is rank 0's own part of the batch). For each it prints the training loss at
a quarter, half, three quarters and the end of the run (each the mean over
the 20 steps before), the held-out accuracy of the exported model (run in
onnxruntime), the bytes a rank moves per step (dtc plan: for local SGD the
loss's all-reduce plus the weights' average over H steps) and the time per
step. The last column is the final loss over the reference's.

Then federated averaging (--sync federated) on the digits split non-IID
over the ranks as clients: the held-out accuracy after 5 to 60 rounds and
the rounds needed for 0.85, for one and two local epochs and for half the
clients a round, beside synchronous training on the same images pooled
for as many epochs. Last, dtc simulate's predicted step for a 1.3B GPT on
64 A100s with the gradients all-reduced in f32 or bf16, with local SGD and
with parameter servers (16 to 128 servers on nodes of their own), and which
is fastest. Exit status 1 if a run fails.
"""
import argparse
import os
import re
import subprocess
import sys
import tempfile

import numpy as np
import onnxruntime as ort

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "tests", "models"))
import generate  # noqa: E402

WINDOW = 20


def digits(folder):
    from sklearn.datasets import load_digits
    x, y = load_digits(return_X_y=True)
    x = x.astype(np.float32)
    x = (x - x[:1437].mean(0)) / (x[:1437].std(0) + 1e-6)
    os.makedirs(folder, exist_ok=True)
    np.save(os.path.join(folder, "x.npy"), x[:1437])
    np.save(os.path.join(folder, "labels.npy"), y[:1437].astype(np.int64))
    return x[1437:], y[1437:]


def run(cmd):
    result = subprocess.run(cmd, capture_output=True, text=True)
    if result.returncode != 0:
        sys.exit(f"{' '.join(cmd)} failed:\n{result.stdout}{result.stderr}")
    return result.stdout


def bytes_per_step(dtc, plan):
    text = run([dtc, "plan", plan])
    units = {"B": 1, "KiB": 1 << 10, "MiB": 1 << 20, "GiB": 1 << 30}
    line = next((l for l in text.splitlines() if "every rank:" in l or "workers:" in l), "")
    total = sum(float(n) * units[u] for n, u in re.findall(r"\(([0-9.]+) (B|KiB|MiB|GiB)\)", line))
    # Local SGD's average of the weights every H steps, a step's share.
    for n, u in re.findall(r"local SGD: .*, ([0-9.]+) (B|KiB|MiB|GiB) a step\)", text):
        total += float(n) * units[u]
    # Parameter servers: a worker's push and pull.
    for m in re.finditer(r"parameter servers: .*?pushes its gradients \(([0-9.]+) (B|KiB|MiB|GiB)\)"
                         r".*?pulls the weights \(([0-9.]+) (B|KiB|MiB|GiB)\)", text):
        total += float(m.group(1)) * units[m.group(2)] + float(m.group(3)) * units[m.group(4)]
    return total


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--dtc", default="build/bin/dtc")
    parser.add_argument("--ranks", type=int, default=4)
    parser.add_argument("--steps", type=int, default=400)
    parser.add_argument("--every", default="2,4,8,16")
    parser.add_argument("--staleness", default="1,4")
    parser.add_argument("--keep")
    args = parser.parse_args()
    work = args.keep or tempfile.mkdtemp(prefix="dtc-sync-")
    os.makedirs(work, exist_ok=True)
    import onnx
    onnx.save(generate.build_mlp(), os.path.join(work, "mlp.onnx"))
    test_x, test_y = digits(os.path.join(work, "digits"))
    modes = ([("allreduce", [])] +
             [(f"local H={h}", ["--sync", "local", "--average-every", h])
              for h in args.every.split(",")] +
             [("ps sync K=2", ["--sync", "ps", "--servers", "2"])] +
             [(f"ps async S={s}", ["--sync", "ps", "--servers", "2", "--staleness", s])
              for s in args.staleness.split(",")])
    print(f"MLP on digits, {args.ranks} data-parallel ranks, batch 64, AdamW lr 1e-3, "
          f"{args.steps} steps")
    marks = [args.steps // 4, args.steps // 2, 3 * args.steps // 4, args.steps]
    print(f"{'mode':<14}" + "".join(f"{'loss@' + str(m):>11}" for m in marks) +
          f"{'held-out':>10}{'bytes/step':>12}{'ms/step':>9}{'final/ref':>11}")
    reference = None
    for name, flags in modes:
        tag = name.replace(" ", "").replace("=", "")
        plan = os.path.join(work, f"{tag}.dtcp")
        run([args.dtc, "compile", os.path.join(work, "mlp.onnx"), "--train", "--shape", "batch=64",
             "--dp", str(args.ranks), "--zero", "0", *flags, "-o", plan])
        exported = os.path.join(work, f"{tag}.onnx")
        out = run([args.dtc, "run", plan, "--data", os.path.join(work, "digits"), "--steps",
                   str(args.steps), "--threads", "1", "--seed", "1", "--export", exported])
        losses = [float(x) for x in re.findall(r"^step \d+ loss (\S+)", out, re.M)]
        times = [float(x) for x in re.findall(r"^step \d+ loss \S+ lr \S+ time (\S+) ms", out, re.M)]
        at = [float(np.mean(losses[m - WINDOW:m])) for m in marks]
        session = ort.InferenceSession(exported, providers=["CPUExecutionProvider"])
        logits = session.run(None, {session.get_inputs()[0].name: test_x})[0]
        accuracy = float((logits.argmax(1) == test_y).mean())
        reference = reference or at[-1]
        print(f"{name:<14}" + "".join(f"{x:>11.4f}" for x in at) + f"{accuracy:>10.3f}"
              f"{bytes_per_step(args.dtc, plan):>12.0f}{np.median(times):>9.3f}"
              f"{at[-1] / reference:>11.3f}")
    federated(args, work)
    simulated(args, work)


def held_out(model, x, y):
    session = ort.InferenceSession(model, providers=["CPUExecutionProvider"])
    return float((session.run(None, {session.get_inputs()[0].name: x})[0].argmax(1) == y).mean())


def federated(args, work):
    """Rounds FedAvg needs for 0.85 held-out accuracy on the digits split
    non-IID over the ranks (tests/tools-cli/Inputs/digits_clients.py: each
    client a few digits), against synchronous data parallelism on the same
    1437 images after as many epochs."""
    split = os.path.join(work, "noniid")
    run([sys.executable, os.path.join(os.path.dirname(__file__), "..", "tests", "tools-cli",
                                      "Inputs", "digits_clients.py"), split,
         "--shards", ",".join(["2"] * args.ranks)])
    test_x, test_y = np.load(os.path.join(split, "test_x.npy")), np.load(os.path.join(split, "test_y.npy"))
    mlp = os.path.join(work, "mlp.onnx")
    fed = os.path.join(work, "fed.dtcp")
    run([args.dtc, "compile", mlp, "--train", "--shape", "batch=64", "--dp", str(args.ranks),
         "--sync", "federated", "-o", fed])
    sync = os.path.join(work, "sync.dtcp")
    run([args.dtc, "compile", mlp, "--train", "--shape", "batch=64", "--dp", str(args.ranks),
         "--zero", "0", "-o", sync])
    print(f"\nFedAvg on the digits split non-IID over {args.ranks} clients (2 of "
          f"{2 * args.ranks} label-sorted shards each), batch 16 a client, AdamW lr 1e-3; "
          f"held-out accuracy after R rounds (epochs of the 1437 images)")
    variants = [("FedAvg E=1", ["--local-epochs", "1"]),
                ("FedAvg E=2", ["--local-epochs", "2"]),
                ("FedAvg E=1, half the clients", ["--clients-per-round", str(max(1, args.ranks // 2))])]
    rounds = [5, 10, 20, 30, 40, 60]
    print(f"{'':<30}" + "".join(f"{'R=' + str(r):>8}" for r in rounds) + f"{'R for 0.85':>12}")
    steps_per_epoch = 1437 // 64
    rows = [("sync (IID, all-reduce)", None)] + variants
    for name, flags in rows:
        accuracies, reached = [], None
        for r in rounds:
            model = os.path.join(work, "fed-model.onnx")
            if flags is None:
                # the same images pooled and shuffled: the epochs FedAvg E=1 sees
                data = os.path.join(work, "digits")
                run([args.dtc, "run", sync, "--data", data, "--steps", str(r * steps_per_epoch),
                     "--threads", "1", "--export", model])
            else:
                run([args.dtc, "run", fed, "--data", os.path.join(split, "data"), "--rounds",
                     str(r), "--threads", "1", *flags, "--export", model])
            accuracies.append(held_out(model, test_x, test_y))
            if reached is None and accuracies[-1] >= 0.85:
                reached = r
        print(f"{name:<30}" + "".join(f"{a:>8.3f}" for a in accuracies) +
              f"{reached if reached else '> ' + str(rounds[-1]):>12}")


def simulated(args, work):
    """Each option's predicted step for a 1.3B GPT on 64 A100s (8 nodes),
    from dtc simulate, and which the fastest is."""
    gpt = "gpt:layers=24,hidden=2048,heads=16,seq=2048,vocab=51200,batch=512"
    base = ["--train", "--preset", "a100-80g", "--dp", "64", "--zero", "0",
            "--micro-batches", "8", "--recompute", "full"]
    options = [("all-reduce f32", []),
               ("all-reduce bf16 (--compress-gradients)", ["--compress-gradients", "bf16"]),
               ("PowerSGD rank 4", ["--compress-gradients", "powersgd:4"]),
               ("local SGD H=4", ["--sync", "local", "--average-every", "4"]),
               ("local SGD H=16", ["--sync", "local", "--average-every", "16"]),
               ("parameter servers K=16", ["--sync", "ps", "--servers", "16"]),
               ("parameter servers K=64", ["--sync", "ps", "--servers", "64"]),
               ("parameter servers K=128", ["--sync", "ps", "--servers", "128"]),
               ("parameter servers K=64 async S=4",
                ["--sync", "ps", "--servers", "64", "--staleness", "4"])]
    print(f"\n1.3B GPT ({gpt}) on 64 A100s (a100-80g: 8 nodes of 8), data parallel, "
          f"8 micro-batches, full recomputation, fp32: dtc simulate")
    steps = []
    for name, flags in options:
        plan = os.path.join(work, "gpt13.dtcp")
        run([args.dtc, "compile", gpt, *base, *flags, "-o", plan])
        out = run([args.dtc, "simulate", plan])
        step = re.search(r"step time +([0-9.]+) (ms|s) \(per rank on average: compute ([0-9.]+ \S+), "
                         r"communication ([0-9.]+ [a-z]+)", out)
        seconds = float(step.group(1)) * (1e-3 if step.group(2) == "ms" else 1)
        steps.append((seconds, name))
        print(f"  {name:<40} step {step.group(1)} {step.group(2)}  (compute {step.group(3)}, "
              f"communication {step.group(4)})")
    best = min(steps)
    print(f"  fastest: {best[1]}")
    # Where parameter servers win: an embedding's sparse gradient (a
    # 512,000-token vocabulary at batch 64: a worker's 128 tokens touch 128
    # rows), which an all-reduce moves whole.
    sparse = "gpt:layers=2,hidden=512,heads=8,seq=128,vocab=512000,batch=64"
    print(f"\n{sparse} on 64 A100s (8 nodes), data parallel: dtc simulate")
    for name, flags in [("all-reduce", []),
                        ("parameter servers K=64", ["--sync", "ps", "--servers", "64"]),
                        ("parameter servers K=128", ["--sync", "ps", "--servers", "128"])]:
        plan = os.path.join(work, "sparse.dtcp")
        run([args.dtc, "compile", sparse, "--train", "--preset", "a100-80g", "--dp", "64",
             "--zero", "0", *flags, "-o", plan])
        out = run([args.dtc, "simulate", plan])
        step = re.search(r"step time +([0-9.]+ m?s)", out).group(1)
        versus = re.search(r"a step of ([0-9.]+ m?s), parameter servers ([0-9.]+ m?s)", out)
        print(f"  {name:<40} step {step}" +
              (f"  (the same with all-reduce: {versus.group(1)})" if versus else ""))
    # What --sync auto picks given 128 server ranks and local SGD every 4
    # steps allowed: local SGD on the sparse embedding (its table averaged
    # every 4th step beats both; with --servers alone, the servers), the
    # all-reduce on the dense 1.3B GPT above.
    for title, model, extra in [("the sparse embedding", sparse, []),
                                ("the 1.3B GPT, 8 micro-batches", gpt,
                                 ["--micro-batches", "8", "--recompute", "full"])]:
        plan = os.path.join(work, "sync-auto.dtcp")
        out = run([args.dtc, "compile", model, "--train", "--preset", "a100-80g", "--dp", "64",
                   "--zero", "0", *extra, "--sync", "auto", "--servers", "128",
                   "--average-every", "4", "-o", plan])
        note = re.search(r"synchronisation: (.*) chosen by --sync auto \(predicted step: (.*)\)",
                         out)
        print(f"  --sync auto --servers 128 --average-every 4 on {title}: {note.group(1)} "
              f"({note.group(2)})")
    # What --compress-gradients auto picks, here and where the network is
    # the limit: the same A100 nodes joined by 10 Gb/s Ethernet (1.25 GB/s
    # a GPU), one sample a GPU.
    import json
    ethernet = os.path.join(work, "a100-ethernet.json")
    cluster = json.loads(open(os.path.join(os.path.dirname(__file__), "..", "tests", "tools-cli",
                                           "Inputs", "cluster.json")).read())
    cluster["name"] = "a100-10GbE"
    cluster["links"]["inter_node"] = {"latency": 30e-6, "bandwidth": 1.25e9}
    json.dump(cluster, open(ethernet, "w"))
    small = "gpt:layers=24,hidden=2048,heads=16,seq=2048,vocab=51200,batch=64"
    for title, model, cluster_flags, extra in [
            ("a100-80g, batch 512 in 8 micro-batches", gpt, ["--preset", "a100-80g"],
             ["--micro-batches", "8"]),
            ("A100 nodes over 10 Gb/s Ethernet, batch 64", small, ["--cluster", ethernet], [])]:
        plan = os.path.join(work, "auto.dtcp")
        out = run([args.dtc, "compile", model, "--train", "--dp", "64", "--zero", "0",
                   "--recompute", "full", *cluster_flags, *extra, "--compress-gradients", "auto",
                   "-o", plan])
        note = re.search(r"gradient compression: (\S+) chosen by --compress-gradients auto "
                         r"\(predicted step: ([^)]*)\)", out)
        print(f"  --compress-gradients auto on {title}: {note.group(1)} ({note.group(2)})")


if __name__ == "__main__":
    main()
