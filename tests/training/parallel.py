#!/usr/bin/env python3
"""Training split over four MPI ranks equals the single-device run.

For the example MLP, CNN and GPT, and a generated GPT: compile the same
training step for one device and for four ranks split each way (data
parallel, tensor parallel, both on a 2x2 mesh, ZeRO stages 1 and 3, the
search left alone, a vocabulary-parallel loss, with the batch in micro-batches whose gradients
accumulate, with activations recomputed in the backward, and cut into
pipeline stages with each schedule), train 5 steps on the same data, and check that
every loss agrees within 1e-5 relative. Then compile each model for
inference split the same ways (under a memory limit below its weights, so
that the search must split them) and check the outputs of four ranks
against onnxruntime's. `dtc run -n 4` starts the four ranks itself through
mpirun.
"""
import argparse
import os
import re
import sys
import tempfile

import numpy as np
import onnx
import onnxruntime as ort

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "models"))
sys.path.insert(0, os.path.dirname(__file__))
import generate  # noqa: E402
from trainlib import check, check_resume, finish, losses, run  # noqa: E402

STEPS = 5


def save_set(folder, **arrays):
    os.makedirs(folder, exist_ok=True)
    for name, array in arrays.items():
        np.save(os.path.join(folder, f"{name}.npy"), array)
    return folder


# How the four ranks split the work, and what compile must say about it.
SPLITS = {
    "dp=4": (["--dp", "4", "--zero", "0"], "mesh: dp=4 (pinned by --dp)"),
    "tp=4": (["--tp", "4"], "mesh: tp=4 (pinned by --tp)"),
    "dp=2 x tp=2": (["--dp", "2", "--tp", "2", "--zero", "0"], "mesh: dp=2 x tp=2"),
    "ZeRO-1": (["--dp", "4", "--zero", "1"], "ZeRO stage 1 pinned"),
    "ZeRO-3": (["--dp", "4", "--zero", "3"], "ZeRO stage 3 pinned"),
    "searched": (["--devices", "4"], "(searched from --devices 4)"),
    "searched 2x2": (["--mesh", "2x2"], "kept by --mesh 2x2"),
    # --devices with micro-batches: pipeline stages searched too (the GPT's
    # on cpu-local: 2 stages of 2 devices; the MLP and CNN, whose few cut
    # places would leave one stage most of the work, stay one stage).
    "searched, 4 micro-batches": (["--devices", "4", "--micro-batches", "4"],
                                  "searched from --devices 4"),
    # Gradient accumulation: the model's batch split into micro-batches, the
    # data-parallel reduction once per step (or, with ZeRO, into shards).
    "1 device, 4 micro-batches": (["--micro-batches", "4"],
                                  "gradients accumulated over 4 micro-batches"),
    "dp=4, 2 micro-batches": (["--dp", "4", "--zero", "0", "--micro-batches", "2"],
                              "gradient all-reduces run once per step"),
    "dp=2 x tp=2, 2 micro-batches": (["--dp", "2", "--tp", "2", "--micro-batches", "2"],
                                     "gradients accumulated over 2 micro-batches"),
    # ZeRO-1 with micro-batches: an accumulator the search leaves whole
    # while its gradient and optimizer shard are split still updates once
    # a step (compiler/AccumulateGradients.cpp).
    "dp=4, ZeRO-1, 2 micro-batches": (["--dp", "4", "--zero", "1", "--micro-batches", "2"],
                                      "ZeRO stage 1"),
    # Recomputation: forward values recomputed in the backward are the same
    # values, so the losses are too.
    "1 device, full recompute": (["--recompute", "full"], "recompute: full"),
    "dp=2 x tp=2, selective recompute": (["--dp", "2", "--tp", "2", "--zero", "0",
                                          "--recompute", "selective"], "recompute: selective"),
    # Pipeline stages: the step cut into stages that pass activations and
    # gradients, over 4 micro-batches in each schedule's order.
    "pp=4 gpipe": (["--pp", "4", "--micro-batches", "4", "--schedule", "gpipe"],
                   "pipeline: 4 stages, gpipe schedule"),
    "pp=4 1f1b": (["--pp", "4", "--micro-batches", "4", "--schedule", "1f1b"],
                  "pipeline: 4 stages, 1f1b schedule"),
    "pp=2 x dp=2": (["--pp", "2", "--dp", "2", "--zero", "0", "--micro-batches", "4"],
                    "pipeline: 2 stages"),
    "pp=2 x tp=2 1f1b": (["--pp", "2", "--tp", "2", "--micro-batches", "4", "--schedule", "1f1b"],
                         "pipeline: 2 stages, 1f1b schedule"),
    # Interleaved: each stage runs two chunks of the layers, micro-batches
    # passing through every stage twice.
    "pp=2 x tp=2 interleaved": (["--pp", "2", "--tp", "2", "--micro-batches", "4", "--schedule",
                                 "interleaved"],
                                "interleaved schedule of 2 virtual stages"),
    "pp=2 x dp=2, full recompute": (["--pp", "2", "--dp", "2", "--zero", "0", "--micro-batches",
                                     "4", "--recompute", "full"], "recompute: full"),
    # Replicated stages: the last stage on two copies, each running every
    # other micro-batch; and every stage on two, under GPipe and 1F1B (each
    # replica warming up by a forward for every copy of the later stages).
    "pp=3, stage replicas 1,1,2": (["--pp", "3", "--stage-replicas", "1,1,2", "--micro-batches",
                                    "4"], "stage 2 runs on 2 replicas of its mesh"),
    "pp=2, stage replicas 2,2": (["--pp", "2", "--stage-replicas", "2,2", "--micro-batches", "4",
                                  "--schedule", "gpipe"], "stage 1 runs on 2 replicas of its mesh"),
    "pp=2, stage replicas 2,2, 1f1b": (["--pp", "2", "--stage-replicas", "2,2", "--micro-batches",
                                        "4"], "stage 0 runs on 2 replicas of its mesh"),
}
# A language model's loss over its vocabulary split across tensor-parallel
# ranks (Megatron's vocabulary-parallel cross-entropy), as the search picks
# for a generated GPT whose head is most of its work.
# Layer norms split by the batch over dp and by the sequence over tp (a
# long sequence): their scale and bias gradients are partial over both
# axes, two all-reduces in a row, both deferred to once a step.
SEQUENCE_SPLITS = {
    "dp=2 x tp=2, sequence-split layer norms, 2 micro-batches": (
        ["--dp", "2", "--tp", "2", "--zero", "0", "--micro-batches", "2"],
        "gradient all-reduces run once per step on the accumulated sums"),
}
VOCAB_SPLITS = {
    "tp=4, vocabulary-parallel loss": (["--tp", "4"], "vocabulary-parallel cross-entropy"),
    "dp=2 x tp=2, vocabulary-parallel loss": (["--dp", "2", "--tp", "2", "--zero", "0"],
                                              "vocabulary-parallel cross-entropy"),
    "pp=2 x tp=2, vocabulary-parallel loss": (["--pp", "2", "--tp", "2", "--micro-batches", "4",
                                               "--schedule", "1f1b"],
                                              "vocabulary-parallel cross-entropy"),
}
# A vocabulary no tensor-parallel size divides (GPT-2's 50257 is odd): the
# step pads it to a multiple of 128 (--pad-classes), the padded classes
# masked out of the loss, so the losses are the unpadded step's. The tied
# table splits by rows too (a vocabulary-parallel embedding).
PAD_SPLITS = {
    "1 device, classes as the model has them": (["--pad-classes", "0"], "loss cross_entropy"),
    "tp=4, padded vocabulary": (["--tp", "4"], "vocabulary-parallel embedding"),
    "dp=2 x tp=2, padded vocabulary": (["--dp", "2", "--tp", "2", "--zero", "1"],
                                       "classes padded to 4224"),
}
# Untied, the token embedding is a weight of its own: padded alike.
UNTIED_PAD_SPLITS = {
    "tp=4, untied padded vocabulary": (["--tp", "4"], "'lm_head.weight' and 'wte' hold 125 more"),
}
RECOMPUTED = tuple(s for s in SPLITS if "recompute" in s)
# Pipelines cut a model between layers: the example GPT's (the MLP and CNN
# have too few places to cut for 4 stages).
PIPELINED = tuple(s for s in SPLITS if s.startswith("pp="))
# Splits that only apply to training; batch norms see micro-batches, not the
# batch, so a CNN's losses differ from the full batch's by design.
MICRO_BATCHED = tuple(s for s in SPLITS if "micro-batches" in s or s.startswith("pp="))
# A searched mesh's plans include every pinned plan on the same mesh shape.
# --devices searches the mesh's shape too: every split of four devices whose
# tensor-parallel groups stay inside a node (cpu-local: 2 devices a node,
# so not --mesh 2x2's tensor x data, whose groups are ranks 0 and 2).
SAME_MESH = {"searched": ("dp=4", "tp=4", "ZeRO-1", "ZeRO-3", "dp=2 x tp=2"),
             "searched 2x2": ("dp=2 x tp=2",)}


def predicted_seconds(note):
    """compute + communication per step, as compile's search note predicts
    (or, when --devices searched pipeline stages, the chosen count's step)."""
    units = {"us": 1e-6, "ms": 1e-3, "s": 1.0}
    m = re.search(r"([0-9.]+) (us|ms|s) \(chosen\)", note)
    if m:
        return float(m.group(1)) * units[m.group(2)]
    m = re.search(r"predicted per step ([0-9.]+) (us|ms|s) compute \+ ([0-9.]+) (us|ms|s) "
                  r"communication", note)
    if not m:  # one device: no search
        return None
    return float(m.group(1)) * units[m.group(2)] + float(m.group(3)) * units[m.group(4)]


def peak_bytes(compile_output):
    """The peak memory compile reports ("peak memory 1.50 MiB")."""
    m = re.search(r"peak memory ([0-9.]+) (B|KiB|MiB|GiB)", compile_output)
    return float(m.group(1)) * {"B": 1, "KiB": 2**10, "MiB": 2**20, "GiB": 2**30}[m.group(2)]


def compare(dtc, tmp, name, model, shapes, data, splits=tuple(SPLITS), lr="0.01"):
    def compile_plan(tag, flags):
        plan = os.path.join(tmp, f"{name}-{tag}.dtcp".replace(" ", ""))
        out = run([dtc, "compile", model, *shapes, "--train", "--loss", "cross_entropy",
                   "--optimizer", "adamw", "--lr", lr, *flags, "-o", plan]).stdout
        return plan, out

    exports = model.endswith(".onnx")  # a generated GPT has no ONNX file to write into

    def export_flags(tag):
        return ["--export", os.path.join(tmp, f"{name}-{tag}.onnx".replace(" ", ""))] \
            if exports else []

    def exported(tag):
        trained = onnx.load(os.path.join(tmp, f"{name}-{tag}.onnx".replace(" ", "")))
        return {t.name: onnx.numpy_helper.to_array(t) for t in trained.graph.initializer}

    single_plan, _ = compile_plan("one", [])
    single = [float(v) for _, v in losses(run([dtc, "run", single_plan, "--data", data,
                                               "--steps", str(STEPS), "--threads", "1",
                                               *export_flags("one")]).stdout)]
    check(len(single) == STEPS, f"{name}: {STEPS} losses from one device")
    predicted = {}
    for split in splits:
        flags, note = {**SPLITS, **VOCAB_SPLITS, **PAD_SPLITS, **UNTIED_PAD_SPLITS,
                       **SEQUENCE_SPLITS}[split]
        plan, out = compile_plan(split, flags)
        predicted[split] = predicted_seconds(out)
        check(note in out, f"{name}, {split}: compile notes '{note}'")
        ranks = "1" if split.startswith("1 device") else "4"
        got = [float(v) for _, v in losses(run([dtc, "run", plan, "-n", ranks, "--data", data,
                                                "--steps", str(STEPS),
                                                *export_flags(split)]).stdout)]
        check(len(got) == STEPS, f"{name}, {split}: {STEPS} losses from {ranks} rank(s)")
        worst = max(abs(a - b) / abs(a) for a, b in zip(single, got))
        print(f"      {name}, {split}: losses {', '.join(f'{v:.5f}' for v in got)}; "
              f"largest relative difference to one device {worst:.1e}")
        check(worst <= 1e-5, f"{name}, {split}: losses equal one device's within 1e-5")
        # Each rank's stage checkpointed, resumed exactly (interleaved too:
        # a stage's virtual stages and its overlapped reductions).
        if split in ("pp=2 x dp=2", "pp=2 x tp=2 interleaved", "pp=3, stage replicas 1,1,2"):
            check_resume(dtc, plan, data, tmp, 2, 4)
        if exports:
            # Weights split over the ranks are gathered into the exported
            # model. Values are compared on the MLP: in the CNN and GPT,
            # AdamW moves parameters with gradients near zero by about lr
            # whatever their size, so last-bit differences flip them.
            one, four = exported("one"), exported(split)
            check(one.keys() == four.keys() and
                  all(one[k].shape == four[k].shape for k in one),
                  f"{name}, {split}: the exported model has every trained weight, whole")
            if name == "mlp":
                gap = max(float(np.max(np.abs(one[k] - four[k]))) /
                          max(float(np.max(np.abs(one[k]))), 1e-30) for k in one)
                check(gap <= 1e-4, f"{name}, {split}: the exported weights equal one device's "
                                   f"(largest difference {gap:.1e} of a tensor's largest)")
    for searched, pinned in SAME_MESH.items():
        for other in (p for p in pinned if p in predicted and searched in predicted):
            check(predicted[searched] <= predicted[other] * (1 + 1e-6),
                  f"{name}: the searched plan ({predicted[searched] * 1e3:.3f} ms) is predicted "
                  f"no slower than {other} ({predicted[other] * 1e3:.3f} ms)")


def infer(dtc, tmp, name, model, shapes, inputs,
          splits=tuple(s for s in SPLITS if s not in MICRO_BATCHED + RECOMPUTED + PIPELINED)):
    """Outputs of four ranks, split each way, against onnxruntime's. The
    memory limit (what one device's plan needs, less 30% of the weights)
    makes the search split weights even where replicating them would be
    faster; the plan, with its workspace, must fit it (compile checks; a
    limit of 70% of the weights alone left no room for activations)."""
    session = ort.InferenceSession(model, providers=["CPUExecutionProvider"])
    expected = session.run(None, inputs)[0]
    folder = save_set(os.path.join(tmp, f"{name}-inputs"), **inputs)
    weights = sum(np.prod(t.dims) * 4 for t in onnx.load(model).graph.initializer)
    one = run([dtc, "compile", model, *shapes, "-o", os.path.join(tmp, f"{name}-infer-one.dtcp")])
    limit = int(peak_bytes(one.stdout) - 0.3 * weights)
    for split in splits:
        flags, _ = SPLITS[split]
        flags = [f for f in flags if f not in ("--zero", "0")]  # no optimizer state
        if split.startswith("ZeRO"):
            continue
        plan = os.path.join(tmp, f"{name}-infer-{split}.dtcp".replace(" ", ""))
        out = os.path.join(tmp, f"{name}-infer-{split}-out".replace(" ", ""))
        note = run([dtc, "compile", model, *shapes, *flags, "--memory-limit",
                    str(limit), "-o", plan]).stdout
        check(peak_bytes(note) <= limit * 1.005,  # as printed: 3 significant digits
              f"{name} inference, {split}: the plan's peak memory is within the limit")
        split_params = re.search(r"(\d+) of (\d+) parameters split", note)
        run([dtc, "run", plan, "-n", "4", "--inputs", folder, "--outputs", out,
             "--output-format", "npy"])
        got = np.load(os.path.join(out, "output_0.npy"))
        err = np.abs(got - expected).max() / max(np.abs(expected).max(), 1e-6)
        print(f"      {name} inference, {split}: {split_params.group(0) if split_params else '?'}; "
              f"largest difference to onnxruntime {err:.1e} of the largest output")
        if "tp" in split:  # a tensor axis cannot split the batch: weights must split
            check(split_params and int(split_params.group(1)) > 0,
                  f"{name} inference, {split}: the search split some weights")
        check(got.shape == expected.shape and err <= 1e-4,
              f"{name} inference, {split}: outputs equal onnxruntime's")


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--dtc", required=True)
    dtc = ap.parse_args().dtc
    rng = np.random.RandomState(0)
    with tempfile.TemporaryDirectory() as tmp:
        models = {}
        for name in ("mlp", "cnn", "gpt"):
            models[name] = os.path.join(tmp, f"{name}.onnx")
            onnx.save(generate.MODELS[name](), models[name])
        inputs = {n: onnx.load(models[n]).graph.input[0] for n in ("mlp", "cnn")}

        def dims(name):
            return [d.dim_value for d in inputs[name].type.tensor_type.shape.dim[1:]]

        mlp = save_set(os.path.join(tmp, "mlp-data"),
                       **{inputs["mlp"].name: rng.rand(64, *dims("mlp")).astype(np.float32),
                          "labels": rng.randint(0, 10, 64).astype(np.int64)})
        compare(dtc, tmp, "mlp", models["mlp"], ["--shape", "batch=16"], mlp,
                splits=tuple(s for s in SPLITS if s not in PIPELINED))
        cnn = save_set(os.path.join(tmp, "cnn-data"),
                       **{inputs["cnn"].name: rng.rand(32, *dims("cnn")).astype(np.float32),
                          "labels": rng.randint(0, 10, 32).astype(np.int64)})
        compare(dtc, tmp, "cnn", models["cnn"], ["--shape", "batch=8"], cnn,
                splits=tuple(s for s in SPLITS if s not in MICRO_BATCHED + PIPELINED))
        text = os.path.join(tmp, "text.bin")
        np.frombuffer(b"the quick brown fox jumps over the lazy dog. " * 40,
                      np.uint8).astype(np.uint16).tofile(text)
        compare(dtc, tmp, "gpt", models["gpt"], ["--shape", "batch=8", "--shape", "seq=16"], text)
        # GPT-2's head is its token embedding transposed: a weight two
        # pipeline stages read (sent forward each micro-batch, its gradient
        # back), trained and exported like one device's.
        tied = os.path.join(tmp, "tied-gpt.onnx")
        onnx.save(generate.build_gpt(tied=True), tied)
        compare(dtc, tmp, "tied-gpt", tied, ["--shape", "batch=8", "--shape", "seq=16"], text,
                splits=("pp=2 x dp=2", "pp=4 1f1b", "pp=2 x tp=2 interleaved",
                        "searched, 4 micro-batches"))
        # A tied vocabulary of 4099 padded to 4224: the gather reads the
        # padded table; the exported weights have the model's shapes.
        odd = os.path.join(tmp, "odd-vocabulary-gpt.onnx")
        onnx.save(generate.build_gpt(vocab=4099, tied=True), odd)
        compare(dtc, tmp, "odd-vocabulary gpt", odd, ["--shape", "batch=8", "--shape", "seq=16"],
                text, splits=tuple(PAD_SPLITS), lr="0.001")
        untied = os.path.join(tmp, "untied-odd-vocabulary-gpt.onnx")
        onnx.save(generate.build_gpt(vocab=4099, tied=False), untied)
        compare(dtc, tmp, "untied odd-vocabulary gpt", untied,
                ["--shape", "batch=8", "--shape", "seq=16"], text,
                splits=tuple(UNTIED_PAD_SPLITS), lr="0.001")
        for name, model, tags in (("odd-vocabulary gpt", odd, ("one", "tp=4, padded vocabulary")),
                                  ("untied odd-vocabulary gpt", untied,
                                   ("one", "tp=4, untied padded vocabulary"))):
            shapes = {t.name: tuple(t.dims) for t in onnx.load(model).graph.initializer}
            for tag in tags:
                path = os.path.join(tmp, f"{name}-{tag}.onnx".replace(" ", ""))
                trained = onnx.load(path).graph.initializer
                check(all(tuple(t.dims) == shapes.get(t.name, tuple(t.dims)) for t in trained) and
                      tuple(next(t for t in trained if t.name == "wte").dims) == (4099, 64),
                      f"{name}, {tag}: exported with the model's shapes (wte 4099 x 64)")
        infer(dtc, tmp, "mlp", models["mlp"], ["--shape", "batch=16"],
              {inputs["mlp"].name: rng.rand(16, *dims("mlp")).astype(np.float32)})
        infer(dtc, tmp, "cnn", models["cnn"], ["--shape", "batch=8"],
              {inputs["cnn"].name: rng.rand(8, *dims("cnn")).astype(np.float32)})
        ids = onnx.load(models["gpt"]).graph.input[0].name
        infer(dtc, tmp, "gpt", models["gpt"], ["--shape", "batch=8", "--shape", "seq=16"],
              {ids: rng.randint(0, 64, (8, 16)).astype(np.int64)})
        compare(dtc, tmp, "generated gpt", "gpt:layers=2,hidden=32,heads=2,seq=16,vocab=128,batch=8",
                [], text, splits=("dp=2 x tp=2", "searched 2x2"), lr="0.001")
        compare(dtc, tmp, "wide-vocabulary gpt",
                "gpt:layers=2,hidden=64,heads=2,seq=16,vocab=2048,batch=8", [], text,
                splits=tuple(VOCAB_SPLITS), lr="0.001")
        long_seq = "gpt:layers=2,hidden=64,heads=4,seq=256,vocab=128,batch=4"
        compare(dtc, tmp, "long-sequence gpt", long_seq, [], text,
                splits=tuple(SEQUENCE_SPLITS), lr="0.001")
        split_flags = SEQUENCE_SPLITS["dp=2 x tp=2, sequence-split layer norms, 2 micro-batches"][0]
        out = run([dtc, "compile", long_seq, "--train", *split_flags, "-o",
                   os.path.join(tmp, "long-sequence.dtcp")]).stdout
        deferred = re.search(r"(\d+) gradient all-reduces run once per step", out)
        trained = re.search(r"(\d+) of \d+ parameters trained", out)
        check(deferred and trained and int(deferred.group(1)) > int(trained.group(1)),
              "long-sequence gpt: gradients partial over dp and tp (sequence-split layer norms) "
              "all-reduced once per step over each")
    finish("parallel training")


if __name__ == "__main__":
    main()
