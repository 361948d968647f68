#!/usr/bin/env python3
"""Planning time of the sharding search on GPT-3-sized models.

Compiles a training step of a generated GPT (hidden 12288, 96 heads,
sequence 2048, vocabulary 51200: GPT-3 175B at 96 layers; batch 128, one
sequence per data-parallel rank, so that it fits 80 GB without
recomputation) for 1024 devices with 1, 12, 48 and 96 layers, and prints how long planning
took: the search alone (from compile's notes) and the whole compile (wall
time, including building the graph, partitioning and writing the plan);
then how long `dtc simulate` takes to simulate one step of that plan on all
1024 devices (wall time; target: under one second at 96 layers).

    python3 bench/planning_time.py --dtc build/bin/dtc [--mesh dp128xtp8] [--layers 1,12,48,96]
    python3 bench/planning_time.py --dtc build/bin/dtc --full

--full: GPT-3 175B with Megatron-LM's global batch of 1536 on 1024 A100s,
searched with no strategy flags (--devices 1024: stages, micro-batches, mesh,
schedule, recomputation) and with the published pp8 x dp16 x tp8 and 96
micro-batches pinned (targets: 10 s and 3 s).

--mesh dp128xtp8 pins a data axis of 128 and a tensor axis of 8 (the tensor
axis's splits, ZeRO and recomputation-free memory are still searched);
--mesh 128x8 leaves both axes free.
"""
import argparse
import re
import subprocess
import sys
import tempfile
import time


# The search note: ops, decisions, variables left, how it was solved, its
# seconds, the predicted compute and communication, memory per device.
SEARCH_NOTE = re.compile(r"search: (\d+) ops, (\d+) decisions .*?, (\d+) variables left, "
                         r"(.*?) in ([0-9.]+) s[^;]*; predicted per step (.*?) compute "
                         r"\+ (.*?) communication, (.*?) per device")

GPT3 = "gpt:layers=96,hidden=12288,heads=96,seq=2048,vocab=51200,batch=1536"


def full_search(args):
    """GPT-3 175B on 1024 devices with Megatron-LM's global batch (1536):
    the whole search (--devices 1024: pipeline stages, micro-batches, mesh
    shape, roles, schedule, recomputation) and the published configuration
    pinned (--pp 8 --dp 16 --tp 8 --micro-batches 96). Targets: 10 s and
    3 s."""
    print(f"GPT-3 175B ({GPT3}), bf16 training step, {args.preset}")
    rows = [("searched (--devices 1024)", ["--devices", "1024"], 10.0),
            ("pinned (--pp 8 --dp 16 --tp 8 -m 96)",
             ["--pp", "8", "--dp", "16", "--tp", "8", "--micro-batches", "96"], 3.0)]
    with tempfile.TemporaryDirectory() as tmp:
        for name, flags, target in rows:
            cmd = [args.dtc, "compile", GPT3, "--train", "--precision", "bf16", "--preset",
                   args.preset, *flags, "-o", f"{tmp}/plan.dtcp"]
            start = time.perf_counter()
            done = subprocess.run(cmd, capture_output=True, text=True)
            wall = time.perf_counter() - start
            if done.returncode != 0:
                sys.exit(f"compile failed ({name}):\n{done.stderr}")
            notes = SEARCH_NOTE.findall(done.stdout)
            if not notes:
                sys.exit("compile printed no search note:\n" + done.stdout)
            searches = "; ".join(f"{solver} in {seconds} s" for _, _, _, solver, seconds, *_ in notes)
            stages = re.search(r"pipeline: (\d+) stages", done.stdout)
            micro = re.search(r"gradients accumulated over (\d+) micro-batches", done.stdout)
            simulated = subprocess.run([args.dtc, "simulate", f"{tmp}/plan.dtcp"],
                                       capture_output=True, text=True)
            step = re.search(r"step time\s+(\S+ \S+)", simulated.stdout)
            print(f"  {name:<32} compile {wall:5.2f} s (target {target:.0f} s), "
                  f"{stages.group(1) if stages else 1} stages, "
                  f"{micro.group(1) if micro else 1} micro-batches, simulated step "
                  f"{step.group(1) if step else '?'}; final search: {searches}")


def mesh_flags(mesh):
    pinned = re.fullmatch(r"dp(\d+)xtp(\d+)", mesh)
    if pinned:
        return ["--dp", pinned.group(1), "--tp", pinned.group(2)]
    return ["--mesh", mesh]


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--dtc", required=True)
    ap.add_argument("--mesh", default="dp128xtp8")
    ap.add_argument("--layers", default="1,12,48,96")
    ap.add_argument("--preset", default="a100-80g")
    ap.add_argument("--batch", type=int, default=128)
    ap.add_argument("--full", action="store_true",
                    help="GPT-3 175B with Megatron-LM's batch: the whole search and the "
                         "published configuration pinned, instead of the layer sweep")
    args = ap.parse_args()
    if args.full:
        full_search(args)
        return
    print(f"GPT hidden 12288, 96 heads, seq 2048, vocab 51200, batch {args.batch}; mesh {args.mesh} "
          f"(1024 devices, {args.preset}); bf16 training step with AdamW")
    print(f"{'layers':>6} {'params':>9} {'ops':>7} {'decisions':>9} {'variables':>9} "
          f"{'search s':>9} {'compile s':>9} {'simulate s':>10}  predicted step")
    worst = slowest_simulation = 0.0
    with tempfile.TemporaryDirectory() as tmp:
        for layers in [int(x) for x in args.layers.split(",")]:
            spec = (f"gpt:layers={layers},hidden=12288,heads=96,seq=2048,vocab=51200,"
                    f"batch={args.batch}")
            cmd = [args.dtc, "compile", spec, "--train", "--precision", "bf16", "--preset",
                   args.preset, *mesh_flags(args.mesh), "-o", f"{tmp}/plan.dtcp"]
            start = time.perf_counter()
            done = subprocess.run(cmd, capture_output=True, text=True)
            wall = time.perf_counter() - start
            if done.returncode != 0:
                print(done.stderr, file=sys.stderr)
                sys.exit(f"compile failed for {layers} layers")
            note = SEARCH_NOTE.search(done.stdout)
            if not note:
                sys.exit("compile printed no search note:\n" + done.stdout)
            params = 12 * layers * 12288 ** 2 + 51200 * 12288 * 2 + 2048 * 12288
            ops, decisions, variables, _, search = note.groups()[:5]
            worst = max(worst, wall)
            start = time.perf_counter()
            simulated = subprocess.run([args.dtc, "simulate", f"{tmp}/plan.dtcp", "--preset",
                                        args.preset], capture_output=True, text=True)
            simulation = time.perf_counter() - start
            if simulated.returncode != 0 or "1024 of 1024 devices" not in simulated.stdout:
                sys.exit(f"simulate failed for {layers} layers:\n{simulated.stdout}"
                         f"{simulated.stderr}")
            slowest_simulation = max(slowest_simulation, simulation)
            print(f"{layers:>6} {params / 1e9:>8.1f}B {ops:>7} {decisions:>9} {variables:>9} "
                  f"{float(search):>9.2f} {wall:>9.2f} {simulation:>10.2f}  {note.group(6)} "
                  f"compute + {note.group(7)} communication, {note.group(8)} per device")
    print(f"slowest compile {worst:.2f} s (target: under 10 s at 96 layers); slowest "
          f"simulation {slowest_simulation:.2f} s (target: under 1 s)")


if __name__ == "__main__":
    main()
