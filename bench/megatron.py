#!/usr/bin/env python3
"""Published Megatron-LM runs: pinned and searched plans, simulated.

For each row of bench/published/scaling/*.json (Narayanan et al. 2021,
Table 1: GPT models from 1.7B to 1T parameters on up to 3072 A100s), builds
the same GPT with dtc's weight-free generator and compiles a bf16 training
step twice:

  pinned    --tp t --pp p --dp d, --recompute full and the interleaved
            schedule where the run used one, as published (ZeRO and what
            tensor parallelism splits still searched)
  searched  --devices n and nothing else: the pipeline stages, the
            micro-batches, the dp x tp shape, the schedule, recomputation
            and the rest all chosen by dtc

the pinned plan with the runs' micro-batches: B / (d x MBS), MBS the
micro-batch size per data-parallel rank in Megatron-LM's launch script for
the table (examples/sc21/run_table_1.sh, with the interleaved schedule's
chunks). Each plan is simulated on the publication's hardware preset (with
as many nodes as the run had), and its per-GPU throughput counted as the
paper counts it (Equation 3), so throughputs compare directly. The pinned
plan is compiled and simulated twice:

  as run    the way Megatron-LM ran it in 2021: compiled with attention's
            scores written out (--attention unfused: flash attention came
            later) and tensor-parallel activations whole along the
            sequence (--no-sequence-parallel: sequence parallelism came
            in 2022), simulated with each collective and transfer waiting
            on the compute stream (dtc simulate
            --no-communication-stream): its tensor-parallel all-reduces
            were synchronous on the compute stream, its data-parallel one
            ran after the backward, its pipeline's sends and receives were
            waited for; overlapping tensor-parallel communication came to
            Megatron-LM years later (--tp-comm-overlap)
  dtc       as dtc runs it on GPUs: collectives and transfers on streams of
            their own, overlapping the compute that does not need them

    published / pinned as run / pinned in dtc / searched in dtc TFLOP/s per
    GPU, the searched configuration, and each compile's wall time.

    python3 bench/megatron.py --dtc build/bin/dtc [--max-gpus N] [--rows 1.7,39.1]

--check exits non-zero when a pinned plan as run simulates more than 15% off
the published throughput or a searched plan is predicted slower than the
pinned one (both as dtc runs them).
"""
import argparse
import glob
import json
import os
import re
import subprocess
import sys
import tempfile
import time

UNITS = {"us": 1e-6, "ms": 1e-3, "s": 1.0}
TOLERANCE = 0.15


def run(cmd):
    began = time.monotonic()
    done = subprocess.run(cmd, capture_output=True, text=True)
    return done, time.monotonic() - began


def equation3_flops(row, seq, vocab):
    """Narayanan et al. 2021, Eq. 3: FLOPs per iteration, recomputation included."""
    b, s, l, h, v = row["batch"], seq, row["layers"], row["hidden"], vocab
    return 96 * b * s * l * h * h * (1 + s / (6 * h) + v / (16 * l * h))


def simulated_seconds(dtc, plan, preset, nodes, blocking=False):
    sim, _ = run([dtc, "simulate", plan, "--preset", preset, "--nodes", str(nodes),
                  *(["--no-communication-stream"] if blocking else [])])
    if sim.returncode != 0:
        return None, sim.stderr.strip()[:160]
    step = re.search(r"step time\s+([0-9.]+) (us|ms|s)", sim.stdout)
    return float(step.group(1)) * UNITS[step.group(2)], ""


def compile_and_simulate(dtc, tmp, tag, spec, flags, preset, nodes, blocking=False):
    plan = os.path.join(tmp, f"{tag}.dtcp")
    done, seconds = run([dtc, "compile", spec, "--train", "--precision", "bf16", "--preset",
                         preset, *flags, "-o", plan])
    if done.returncode != 0:
        return {"error": (done.stderr or done.stdout).strip().splitlines()[0][:160],
                "compile_s": seconds}
    notes = done.stdout
    step_s, error = simulated_seconds(dtc, plan, preset, nodes, blocking)
    if step_s is None:
        return {"error": error, "compile_s": seconds}
    mesh = re.search(r"mesh: ([^ ;(]+(?: x [^ ;(]+)*)", notes)
    stages = re.search(r"pipeline: (\d+) stages?", notes)
    recompute = re.search(r"recompute: (\w+)", notes)
    micro = re.search(r"gradients accumulated over (\d+) micro-batches", notes)
    return {"step_s": step_s, "compile_s": seconds,
            "mesh": mesh.group(1) if mesh else "one device",
            "stages": int(stages.group(1)) if stages else 1,
            "recompute": recompute.group(1) if recompute else "none",
            "micro": int(micro.group(1)) if micro else 1}


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--dtc", required=True)
    ap.add_argument("--max-gpus", type=int, default=1536,
                    help="skip rows with more GPUs (default 1536: the 1.7B..145.6B rows)")
    ap.add_argument("--rows", default="", help="only these sizes in billions, e.g. 1.7,39.1")
    ap.add_argument("--no-search", action="store_true", help="pinned plans only")
    ap.add_argument("--check", action="store_true")
    args = ap.parse_args()
    here = os.path.dirname(os.path.abspath(__file__))
    wanted = {float(r) for r in args.rows.split(",") if r}
    failed = False
    header = (f"{'model':>7} {'GPUs':>5} {'t,p,d':>9} {'mb':>4} | {'TFLOP/s per GPU':^31} | "
              f"{'pin/pub':>7} | {'searched configuration':<40} | {'compile s':>13}")
    print(header)
    print(f"{'':>7} {'':>5} {'':>9} {'':>4} | {'pub':>7} {'as run':>7} {'pin dtc':>7} "
          f"{'search':>7} | {'as run':>7} | {'':<40} | {'pin':>6} {'search':>6}")
    with tempfile.TemporaryDirectory() as tmp:
        for path in sorted(glob.glob(os.path.join(here, "published", "scaling", "*.json"))):
            data = json.load(open(path))
            seq, vocab, preset = data["seq"], data["vocab"], data["preset"]
            for row in data["results"]:
                if row["gpus"] > args.max_gpus or (wanted and row["params_billion"] not in wanted):
                    continue
                t, p, n = row["tensor"], row["pipeline"], row["gpus"]
                d = n // (t * p)
                # The runs' micro-batch size per data-parallel rank, and
                # their interleaved schedule's chunks (run_script).
                micro = row["batch"] // d // row["micro_batch"]
                virtual = row.get("virtual_stages", 1)
                schedule = (["--schedule", "interleaved", "--virtual-stages", str(virtual)]
                            if virtual > 1 else [])
                nodes = (n + 7) // 8
                spec = (f"gpt:layers={row['layers']},hidden={row['hidden']},heads={row['heads']},"
                        f"seq={seq},vocab={vocab},batch={row['batch']}")
                published = [*(["--tp", str(t)] if t > 1 else []),
                             *(["--pp", str(p)] if p > 1 else []), "--dp", str(d),
                             "--recompute", "full", *schedule, "--micro-batches", str(micro)]
                # As run: attention as Megatron-LM computed it in 2021 (its
                # scores written out; flash attention came later), its
                # tensor-parallel activations whole along the sequence
                # (sequence parallelism came in 2022), every collective on
                # the compute stream.
                as_run = compile_and_simulate(args.dtc, tmp, "as-run", spec,
                                              [*published, "--attention", "unfused",
                                               "--no-sequence-parallel"], preset,
                                              nodes, blocking=True)
                pinned = compile_and_simulate(args.dtc, tmp, "pinned", spec, published, preset,
                                              nodes)
                searched = ({"error": "not run"} if args.no_search else compile_and_simulate(
                    args.dtc, tmp, "searched", spec, ["--devices", str(n)], preset, nodes))
                flops = equation3_flops(row, seq, vocab) / n / 1e12

                def tflops(result, key="step_s"):
                    return flops / result[key] if result.get(key) else float("nan")

                pub = row["tflops_per_gpu"]
                ratio = tflops(as_run) / pub
                config = (f"pp{searched['stages']} {searched['mesh']} mb{searched['micro']} "
                          f"rc={searched['recompute']}"
                          if "step_s" in searched else searched["error"][:40])
                print(f"{row['params_billion']:>6}B {n:>5} {f'{t},{p},{d}':>9} {micro:>4} | "
                      f"{pub:>7.0f} {tflops(as_run):>7.1f} {tflops(pinned):>7.1f} "
                      f"{tflops(searched):>7.1f} | "
                      f"{ratio:>7.2f} | {config:<40} | {pinned['compile_s']:>6.1f} "
                      f"{searched.get('compile_s', float('nan')):>6.1f}", flush=True)
                for tag, result in (("as run", as_run), ("pinned", pinned)):
                    if "error" in result:
                        print(f"        {tag}: {result['error']}")
                if "step_s" in pinned:
                    print(f"        pinned plan: {pinned['mesh']}, {pinned['stages']} stages, "
                          f"recompute {pinned['recompute']}")
                if args.check:
                    failed |= not as_run.get("step_s") or abs(ratio - 1) > TOLERANCE
                    failed |= (not args.no_search and
                               ("step_s" not in searched or
                                searched["step_s"] > pinned.get("step_s", 0) * (1 + 1e-9)))
            print(f"  source: {data['source']}")
            for note in data.get("notes", []):
                print(f"  note: {note}")
    if failed:
        sys.exit(1)


if __name__ == "__main__":
    main()
