#!/usr/bin/env python3
"""Inference latency: dtc's CPU runtime against onnxruntime on the same models.

Usage:
    python3 bench/inference.py [--dtc build/bin/dtc] [--threads N] [--repeat R]
                               [--rounds K] [--keep DIR]

Builds two models with tests/models/generate.py:
  gpt  4 layers, hidden 256, 4 heads, vocab 1024; input_ids batch 1, seq 128
  cnn  the test CNN at batch 8 (3x32x32 images)
and times each in both engines on N threads (default: all cores):
  onnxruntime  CPUExecutionProvider, intra_op_num_threads=N, inter_op=1,
               sequential execution, default graph optimizations
               (ORT_ENABLE_ALL); session.run timed R times after 5 warm-up
               runs, median taken;
  dtc          `dtc run PLAN --threads N --repeat R` (one untimed run, then
               R timed ones; the median it prints).
The engines alternate for K rounds (default 3) and each keeps its best
median, which damps the noise of a shared machine. dtc's outputs must match
onnxruntime's (np.allclose, rtol 1e-4, atol 1e-5), else the benchmark fails:
timing wrong answers is worthless.

Exit status: 0 when every model matched, 1 otherwise.
"""

import argparse
import os
import statistics
import sys
import tempfile
import time

import numpy as np
import onnx
import onnxruntime as ort

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "tests", "models"))
sys.path.insert(0, os.path.join(ROOT, "tests", "numerics"))
import generate  # noqa: E402
from dtc_cli import ATOL, RTOL, Comparison, DtcCli, DtcError, read_outputs, write_tensor  # noqa: E402

GPT = dict(layers=4, hidden=256, heads=4, vocab=1024, max_pos=128)
GPT_BATCH, GPT_SEQ = 1, 128
CNN_BATCH = 8


def models(rng):
    """[(label, model, --shape bindings, feeds)]."""
    ids = rng.randint(0, GPT["vocab"], (GPT_BATCH, GPT_SEQ)).astype(np.int64)
    images = rng.standard_normal((CNN_BATCH, 3, 32, 32)).astype(np.float32)
    return [
        (f"gpt L{GPT['layers']} H{GPT['hidden']} heads{GPT['heads']} "
         f"b{GPT_BATCH} s{GPT_SEQ}", generate.build_gpt(**GPT),
         [f"input_ids={GPT_BATCH}x{GPT_SEQ}"], {"input_ids": ids}),
        (f"cnn b{CNN_BATCH} 3x32x32", generate.build_cnn(),
         [f"batch={CNN_BATCH}"], {"image": images}),
    ]


def ort_session(path, threads):
    opts = ort.SessionOptions()
    opts.intra_op_num_threads = threads
    opts.inter_op_num_threads = 1
    opts.execution_mode = ort.ExecutionMode.ORT_SEQUENTIAL
    opts.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
    return ort.InferenceSession(path, opts, providers=["CPUExecutionProvider"])


def ort_median_ms(sess, feeds, repeat):
    for _ in range(5):
        sess.run(None, feeds)
    ms = []
    for _ in range(repeat):
        start = time.perf_counter()
        sess.run(None, feeds)
        ms.append((time.perf_counter() - start) * 1e3)
    return statistics.median(ms)


def bench_model(dtc, work, label, model, shapes, feeds, args):
    """Returns (ort ms, dtc ms, error or None)."""
    tag = label.split()[0]
    path = os.path.join(work, f"{tag}.onnx")
    onnx.save(model, path)
    plan = os.path.join(work, f"{tag}.dtcp")
    inputs = os.path.join(work, f"{tag}_in")
    outputs = os.path.join(work, f"{tag}_out")
    os.makedirs(inputs, exist_ok=True)
    for i, vi in enumerate(model.graph.input):
        write_tensor(os.path.join(inputs, f"input_{i}.pb"), feeds[vi.name], vi.name)
    dtc.compile(path, plan, shapes)

    sess = ort_session(path, args.threads)
    want = sess.run(None, feeds)
    best_ort = best_dtc = float("inf")
    for _ in range(args.rounds):
        best_ort = min(best_ort, ort_median_ms(sess, feeds, args.repeat))
        best_dtc = min(best_dtc, dtc.run(plan, inputs, outputs, threads=args.threads,
                                         repeat=args.repeat))
    got = read_outputs(outputs, len(want))
    errors = [f"output {i}: {c.error}" for i, c in
              enumerate(Comparison(g, w) for g, w in zip(got, want)) if c.error]
    return best_ort, best_dtc, "; ".join(errors) or None


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--dtc", default=os.path.join(ROOT, "build", "bin", "dtc"))
    ap.add_argument("--threads", type=int, default=os.cpu_count() or 1)
    ap.add_argument("--repeat", type=int, default=50, help="timed runs per round")
    ap.add_argument("--rounds", type=int, default=3,
                    help="alternations of the two engines; the best median counts")
    ap.add_argument("--keep", metavar="DIR", help="work in DIR and keep models and plans")
    args = ap.parse_args()
    if args.threads < 1 or args.repeat < 1 or args.rounds < 1:
        ap.error("--threads, --repeat and --rounds must be at least 1")

    dtc = DtcCli(args.dtc, timeout=600)
    print(f"{args.threads} threads, {args.repeat} runs x {args.rounds} rounds per engine; "
          f"onnxruntime {ort.__version__}")
    print(f"{'model':<32} {'onnxruntime ms':>14} {'dtc ms':>9} {'dtc/ort':>8}  outputs")
    failed = False
    with tempfile.TemporaryDirectory(prefix="dtc-bench-") as tmp:
        work = args.keep or tmp
        os.makedirs(work, exist_ok=True)
        for label, model, shapes, feeds in models(np.random.RandomState(0)):
            try:
                ort_ms, dtc_ms, error = bench_model(dtc, work, label, model, shapes, feeds,
                                                    args)
            except DtcError as e:
                print(f"{label:<32} {'':>14} {'':>9} {'':>8}  FAILED: {e}")
                failed = True
                continue
            verdict = "match" if error is None else f"MISMATCH: {error}"
            failed |= error is not None
            print(f"{label:<32} {ort_ms:>14.3f} {dtc_ms:>9.3f} {dtc_ms / ort_ms:>8.2f}  "
                  f"{verdict}")
    print(f"(outputs compared by np.allclose rtol={RTOL:g} atol={ATOL:g})")
    sys.exit(1 if failed else 0)


if __name__ == "__main__":
    main()
