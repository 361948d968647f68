#!/usr/bin/env python3
"""End-to-end numerics: dtc's outputs against onnxruntime's on the test models.

Usage:
    python3 tests/numerics/compare_models.py --dtc build/bin/dtc [--keep DIR]

Generates mlp, gpt and cnn (tests/models/generate.py) into a temporary
directory, takes GPT-2, Llama, BERT, ViT, ResNet, a MiniLM, a packaged ViT, BART, Whisper's encoder and Mistral as PyTorch exports them (committed in
tests/models/exported/), and for two shapes of each: draws inputs (fixed seed), compiles the
model with `dtc compile`, runs the plan with `dtc run` at --threads 1 and 2,
once with inputs and outputs as ONNX TensorProto files (input_<i>.pb) and
once as NumPy files named after the inputs (<name>.npy), and compares every
output with onnxruntime's (CPUExecutionProvider) by np.allclose(rtol=1e-4,
atol=1e-5). Prints one line per case with the largest absolute and relative
errors.

Exit status: 0 if every case matched, 1 if any did not.
"""

import argparse
import os
import sys
import tempfile

import numpy as np
import onnx
import onnxruntime as ort

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "models"))
sys.path.insert(0, HERE)
import generate  # noqa: E402  (tests/models/generate.py)
from dtc_cli import ATOL, RTOL, Comparison, DtcCli, DtcError, read_outputs, write_tensor  # noqa: E402

# Committed exports (tests/models/exported/), not generated.
EXPORTED = os.path.join(HERE, "..", "models", "exported")


def padded(batch, seq):
    """An attention mask whose later rows pad more and more of the end."""
    mask = np.ones((batch, seq), np.int64)
    for b in range(batch):
        mask[b, seq - b:] = 0
    return mask


def cases(rng):
    """model -> [(label, --shape bindings, {input name: array})]."""
    image = lambda n: rng.standard_normal((n, 3, 32, 32)).astype(np.float32)  # noqa: E731
    ids = lambda b, s: rng.randint(0, generate.VOCAB, (b, s)).astype(np.int64)  # noqa: E731
    return {
        "mlp": [("batch=2", ["batch=2"], {"x": rng.standard_normal((2, 64)).astype(np.float32)}),
                ("batch=5", ["batch=5"], {"x": rng.standard_normal((5, 64)).astype(np.float32)})],
        "gpt": [("batch=2 seq=16", ["batch=2", "seq=16"], {"input_ids": ids(2, 16)}),
                ("batch=1 seq=7", ["input_ids=1x7"], {"input_ids": ids(1, 7)})],
        "cnn": [("batch=2", ["batch=2"], {"image": image(2)}),
                ("batch=1", ["image=1x3x32x32"], {"image": image(1)})],
        # Exported by torch.onnx.export's default (dynamo) exporter from
        # transformers with a dynamic batch (tests/models/export_hf.py):
        # GPT-2's positions use CumSum, its attention and BERT's GatherND.
        "gpt2": [("batch=3", ["batch=3"], {"input_ids": rng.randint(0, 64, (3, 8))}),
                 ("batch=1", ["batch=1"], {"input_ids": rng.randint(0, 64, (1, 8))})],
        # Llama with a static shape: mask and rotary tables as initializers.
        "llama": [("static", [], {"input_ids": rng.randint(0, 64, (2, 16))})],
        # ... and with dynamic batch and sequence: rotary tables by Sin, Cos.
        "llama_dynamic": [
            ("batch=3 seq=16", ["batch=3", "seq=16"], {"input_ids": rng.randint(0, 64, (3, 16))}),
            ("batch=1 seq=7", ["batch=1", "seq=7"], {"input_ids": rng.randint(0, 64, (1, 7))})],
        "bert": [("batch=3", ["batch=3"], {"input_ids": rng.randint(0, 64, (3, 8)),
                                          "attention_mask": padded(3, 8)})],
        "vit": [("batch=3", ["batch=3"], {"pixel_values": image(3)})],
        # ... and by the older exporter (dynamo=False): shape arithmetic on
        # Shape/Gather, GELU in Erf form.
        "vit_legacy": [("batch=3", ["batch=3"], {"pixel_values": image(3)})],
        "resnet": [("batch=3", ["batch=3"], {"pixel_values": image(3)})],
        # A sentence-embedding MiniLM as sentence-transformers packages one
        # (mean pooling, ReduceL2), dynamic batch and sequence.
        "minilm": [("batch=3 seq=8", ["batch=3", "seq=8"],
                    {"input_ids": rng.randint(0, 64, (3, 8)), "attention_mask": padded(3, 8),
                     "token_type_ids": np.zeros((3, 8), np.int64)}),
                   ("batch=1 seq=5", ["batch=1", "seq=5"],
                    {"input_ids": rng.randint(0, 64, (1, 5)), "attention_mask": padded(1, 5),
                     "token_type_ids": np.zeros((1, 5), np.int64)})],
        # A ViT classifier called with interpolate_pos_encoding=True, by
        # both exporters (the older one: Pow and a bicubic Resize).
        "vit_packaged": [("batch=3", ["batch=3"], {"pixel_values": image(3)})],
        "vit_packaged_legacy": [("batch=3", ["batch=3"], {"pixel_values": image(3)})],
        # BART (decoder inputs shifted right: ScatterND, ScatterElements),
        # Whisper's audio encoder, Mistral's sliding-window attention.
        "bart": [("batch=3", ["batch=3"], {"input_ids": rng.randint(0, 64, (3, 8))})],
        "whisper_audio": [("batch=3", ["batch=3"],
                           {"input_features": rng.standard_normal((3, 8, 32)).astype(np.float32)})],
        "mistral": [("batch=3", ["batch=3"], {"input_ids": rng.randint(0, 64, (3, 8))})],
    }


# (input/output file format, --threads)
RUNS = [("pb", 1), ("pb", 2), ("npy", 1), ("npy", 2)]


def reference(model_path, feeds):
    opts = ort.SessionOptions()
    opts.intra_op_num_threads = 1
    opts.inter_op_num_threads = 1
    sess = ort.InferenceSession(model_path, opts, providers=["CPUExecutionProvider"])
    return sess.run(None, feeds)


def write_inputs(directory, model, feeds, fmt):
    """.pb files are positional (input_<i>.pb), .npy files named after the input."""
    os.makedirs(directory, exist_ok=True)
    for i, vi in enumerate(model.graph.input):
        stem = f"input_{i}" if fmt == "pb" else vi.name
        write_tensor(os.path.join(directory, f"{stem}.{fmt}"), feeds[vi.name], vi.name)


def check_case(dtc, work, name, model_path, label, shapes, feeds):
    """Prints one line per run; returns the number of failed runs."""
    model = onnx.load(model_path)
    want = reference(model_path, feeds)
    tag = label.replace(" ", "_").replace("=", "")
    case_dir = os.path.join(work, f"{name}_{tag}")
    plan = os.path.join(case_dir, "plan.dtcp")
    os.makedirs(case_dir, exist_ok=True)
    try:
        dtc.compile(model_path, plan, shapes)
    except DtcError as e:
        print(f"FAIL {name} {label}: {e}")
        return len(RUNS)
    failures = 0
    for fmt, threads in RUNS:
        run = f"{name} {label} {fmt} threads={threads}"
        inputs = os.path.join(case_dir, f"in_{fmt}")
        outputs = os.path.join(case_dir, f"out_{fmt}_{threads}")
        if not os.path.isdir(inputs):
            write_inputs(inputs, model, feeds, fmt)
        try:
            dtc.run(plan, inputs, outputs, threads=threads, output_format=fmt)
            got = read_outputs(outputs, len(want), fmt)
        except DtcError as e:
            print(f"FAIL {run}: {e}")
            failures += 1
            continue
        errors, worst_abs, worst_rel = [], 0.0, 0.0
        for i, (g, w) in enumerate(zip(got, want)):
            c = Comparison(g, w)
            worst_abs, worst_rel = max(worst_abs, c.max_abs), max(worst_rel, c.max_rel)
            if c.error:
                errors.append(f"output {i} ({model.graph.output[i].name}): {c.error}")
        status = "FAIL" if errors else "ok  "
        print(f"{status} {run:<36} max abs err {worst_abs:.2e}, max rel err {worst_rel:.2e}")
        for e in errors:
            print(f"     {e}")
        failures += bool(errors)
    return failures


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--dtc", required=True, help="path to the dtc binary")
    ap.add_argument("--keep", metavar="DIR",
                    help="work in DIR and keep the models, plans and tensors")
    args = ap.parse_args()

    dtc = DtcCli(args.dtc)
    with tempfile.TemporaryDirectory(prefix="dtc-numerics-") as tmp:
        work = args.keep or tmp
        os.makedirs(work, exist_ok=True)
        rng = np.random.RandomState(2024)
        failed = total = 0
        for name, model_cases in cases(rng).items():
            model_path = os.path.join(work, f"{name}.onnx")
            if name in generate.MODELS:
                onnx.save(generate.MODELS[name](), model_path)
            else:
                model_path = os.path.join(EXPORTED, f"{name}.onnx")
            for label, shapes, feeds in model_cases:
                failed += check_case(dtc, work, name, model_path, label, shapes, feeds)
                total += len(RUNS)
    print(f"numerics vs onnxruntime (rtol {RTOL:g}, atol {ATOL:g}): "
          f"{total - failed} of {total} runs matched")
    sys.exit(1 if failed else 0)


if __name__ == "__main__":
    main()
