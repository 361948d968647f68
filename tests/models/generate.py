#!/usr/bin/env python3
"""Generate the small end-to-end test models for dtc.

Usage:
    python3 tests/models/generate.py OUT_DIR            # write mlp/gpt/cnn.onnx
    python3 tests/models/generate.py OUT_DIR --check    # ...and run them in onnxruntime

The models are built with onnx.helper only (no torch) so that the test suite
has no heavyweight dependency, but their graph structure deliberately mimics
what torch.onnx.export produces (shape subgraphs feeding Reshape, Split with a
`split` input, Erf-based Gelu, Trilu causal masks, ...) because that is what
the compiler will meet in practice.

Weights come from numpy RandomState(0), so the files are byte-for-byte
reproducible and can be regenerated at build time instead of being checked in.
"""

import argparse
import os
import sys

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

OPSET = 17
IR_VERSION = 8


class GraphBuilder:
    """Tiny helper that hands out unique tensor names and collects nodes.

    Every op call returns the name(s) of its output(s), so model code reads
    like straight-line dataflow instead of a wall of make_node calls.
    """

    def __init__(self, rng):
        self.rng = rng
        self.nodes = []
        self.initializers = []
        self.counter = {}

    def fresh(self, prefix):
        n = self.counter.get(prefix, 0)
        self.counter[prefix] = n + 1
        return f"{prefix}_{n}"

    # -- initializers -----------------------------------------------------
    def weight(self, name, shape, scale=0.05):
        arr = (self.rng.standard_normal(shape) * scale).astype(np.float32)
        return self.const_init(name, arr)

    def const_init(self, name, arr):
        self.initializers.append(numpy_helper.from_array(np.asarray(arr), name))
        return name

    def i64(self, name, values):
        """int64 initializer; a Python int gives a rank-0 tensor."""
        return self.const_init(name, np.array(values, dtype=np.int64))

    # -- nodes ------------------------------------------------------------
    def op(self, op_type, inputs, n_out=1, name_hint=None, **attrs):
        hint = name_hint or op_type.lower()
        outs = [self.fresh(hint) for _ in range(n_out)]
        self.nodes.append(
            helper.make_node(op_type, inputs, outs, name=self.fresh(op_type), **attrs)
        )
        return outs[0] if n_out == 1 else outs

    def constant(self, arr, hint="const"):
        """A Constant *node* (as opposed to an initializer), as torch emits."""
        arr = np.asarray(arr)
        return self.op(
            "Constant", [], name_hint=hint,
            value=numpy_helper.from_array(arr, self.fresh(hint + "_value")),
        )


def finish(builder, name, inputs, outputs):
    graph = helper.make_graph(
        builder.nodes, name, inputs, outputs, initializer=builder.initializers
    )
    model = helper.make_model(
        graph,
        opset_imports=[helper.make_opsetid("", OPSET)],
        ir_version=IR_VERSION,
        producer_name="dtc-tests-generate",
    )
    onnx.checker.check_model(model, full_check=True)
    return model


# ---------------------------------------------------------------------------
# MLP
# ---------------------------------------------------------------------------
def build_mlp():
    b = GraphBuilder(np.random.RandomState(0))
    x = "x"
    # Gemm with transB=1 stores the weight as [out, in], like nn.Linear.
    w1 = b.weight("fc1.weight", (128, 64))
    b1 = b.weight("fc1.bias", (128,))
    h = b.op("Gemm", [x, w1, b1], transB=1)
    h = b.op("Relu", [h])
    # Second layer as MatMul + Add (what torch emits for >2-D-capable Linear).
    w2 = b.weight("fc2.weight_t", (128, 64))
    b2 = b.weight("fc2.bias", (64,))
    h = b.op("MatMul", [h, w2])
    h = b.op("Add", [h, b2])
    h = b.op("Relu", [h])
    w3 = b.weight("fc3.weight", (10, 64))
    b3 = b.weight("fc3.bias", (10,))
    b.nodes.append(helper.make_node("Gemm", [h, w3, b3], ["logits"], name="head", transB=1))
    return finish(
        b, "mlp",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", 64])],
        [helper.make_tensor_value_info("logits", TensorProto.FLOAT, ["batch", 10])],
    )


# ---------------------------------------------------------------------------
# GPT
# ---------------------------------------------------------------------------
VOCAB, HIDDEN, LAYERS, HEADS, MAX_POS = 256, 64, 2, 4, 128


class GptConfig:
    """The GPT's sizes, as build_gpt was given them."""

    def __init__(self, layers, hidden, heads, vocab, max_pos):
        if hidden % heads:
            raise ValueError(f"hidden {hidden} is not a multiple of heads {heads}")
        self.layers, self.hidden, self.heads = layers, hidden, heads
        self.vocab, self.max_pos = vocab, max_pos
        self.head_dim = hidden // heads


def torch_style_shape(b, t, tail):
    """Build [t.shape[0], t.shape[1], *tail] the way torch.onnx exports x.view().

    torch records dynamic dims as Shape -> Gather(scalar index) -> Unsqueeze ->
    Concat rather than a single constant, which is exactly the pattern a
    compiler's shape inference has to see through.
    """
    shape = b.op("Shape", [t])
    dims = []
    for axis in (0, 1):
        d = b.op("Gather", [shape, b.constant(np.array(axis, np.int64), "idx")], axis=0)
        dims.append(b.op("Unsqueeze", [d, b.constant(np.array([0], np.int64), "axes")]))
    tail_c = b.constant(np.array(tail, np.int64), "tail")
    return b.op("Concat", dims + [tail_c], axis=0)


def layer_norm(b, x, prefix, hidden):
    scale = b.const_init(f"{prefix}.weight",
                         (1.0 + b.rng.standard_normal(hidden) * 0.02).astype(np.float32))
    bias = b.weight(f"{prefix}.bias", (hidden,), 0.02)
    return b.op("LayerNormalization", [x, scale, bias], axis=-1, epsilon=1e-5)


def linear(b, x, prefix, n_in, n_out, scale=0.05):
    w = b.weight(f"{prefix}.weight", (n_in, n_out), scale)
    bias = b.weight(f"{prefix}.bias", (n_out,), 0.02)
    return b.op("Add", [b.op("MatMul", [x, w]), bias])


def gelu_erf(b, x):
    # Gelu only became an ONNX op in opset 20; torch emits this formula before.
    div = b.op("Div", [x, b.constant(np.array(np.sqrt(2.0), np.float32))])
    erf = b.op("Erf", [div])
    one_plus = b.op("Add", [erf, b.constant(np.array(1.0, np.float32))])
    xm = b.op("Mul", [x, one_plus])
    return b.op("Mul", [xm, b.constant(np.array(0.5, np.float32))])


def causal_where(b, ids, scores):
    """Mask future positions: Where(tril(ones[seq,seq]) == 0, -1e9, scores)."""
    shape = b.op("Shape", [ids])
    seq = b.op("Gather", [shape, b.constant(np.array(1, np.int64), "idx")], axis=0)
    seq1 = b.op("Unsqueeze", [seq, b.constant(np.array([0], np.int64), "axes")])
    sq = b.op("Concat", [seq1, seq1], axis=0)
    ones = b.op("ConstantOfShape", [sq],
                value=numpy_helper.from_array(np.array([1.0], np.float32), "one"))
    tril = b.op("Trilu", [ones], upper=0)
    mask = b.op("Equal", [tril, b.constant(np.array(0.0, np.float32))])
    neg = b.constant(np.array(-1e9, np.float32), "neg_inf")
    return b.op("Where", [mask, neg, scores])


def attention(b, cfg, ids, x, layer):
    p = f"h.{layer}.attn"
    hidden = cfg.hidden
    qkv = linear(b, x, f"{p}.c_attn", hidden, 3 * hidden)
    split = b.i64(f"{p}.split_sizes", [hidden] * 3)
    q, k, v = b.op("Split", [qkv, split], n_out=3, axis=-1)

    heads = []
    for t, perm in ((q, [0, 2, 1, 3]), (k, [0, 2, 3, 1]), (v, [0, 2, 1, 3])):
        r = b.op("Reshape", [t, torch_style_shape(b, x, [cfg.heads, cfg.head_dim])])
        heads.append(b.op("Transpose", [r], perm=perm))
    qh, kt, vh = heads

    scores = b.op("MatMul", [qh, kt])
    scores = b.op("Div", [scores, b.constant(np.array(np.sqrt(cfg.head_dim), np.float32))])
    scores = causal_where(b, ids, scores)
    probs = b.op("Softmax", [scores], axis=-1)
    ctx = b.op("MatMul", [probs, vh])
    ctx = b.op("Transpose", [ctx], perm=[0, 2, 1, 3])
    ctx = b.op("Reshape", [ctx, torch_style_shape(b, ctx, [hidden])])
    return linear(b, ctx, f"{p}.c_proj", hidden, hidden)


def build_gpt(layers=LAYERS, hidden=HIDDEN, heads=HEADS, vocab=VOCAB, max_pos=MAX_POS,
              tied=False):
    """A GPT-2-style decoder: input_ids [batch, seq] (seq <= max_pos) -> logits.

    The defaults make the test model (tests/models/gpt.onnx); bench/ builds
    bigger ones. tied: the head is the token embedding transposed (as
    GPT-2's is), not a weight of its own.
    """
    cfg = GptConfig(layers, hidden, heads, vocab, max_pos)
    b = GraphBuilder(np.random.RandomState(0))
    ids = "input_ids"
    wte = b.weight("wte", (vocab, hidden), 0.1)
    wpe = b.weight("wpe", (max_pos, hidden), 0.05)

    tok = b.op("Gather", [wte, ids], axis=0)
    shape = b.op("Shape", [ids])
    seq = b.op("Gather", [shape, b.constant(np.array(1, np.int64), "idx")], axis=0)
    pos_ids = b.op("Range", [b.constant(np.array(0, np.int64), "start"), seq,
                             b.constant(np.array(1, np.int64), "delta")])
    pos = b.op("Gather", [wpe, pos_ids], axis=0)
    h = b.op("Add", [tok, pos])

    for layer in range(layers):
        a = attention(b, cfg, ids, layer_norm(b, h, f"h.{layer}.ln_1", hidden), layer)
        h = b.op("Add", [h, a])
        m = linear(b, layer_norm(b, h, f"h.{layer}.ln_2", hidden), f"h.{layer}.mlp.c_fc",
                   hidden, 4 * hidden)
        m = gelu_erf(b, m)
        m = linear(b, m, f"h.{layer}.mlp.c_proj", 4 * hidden, hidden)
        h = b.op("Add", [h, m])

    h = layer_norm(b, h, "ln_f", hidden)
    lm = (b.op("Transpose", [wte], perm=[1, 0]) if tied else
          b.weight("lm_head.weight", (hidden, vocab), 0.1))
    b.nodes.append(helper.make_node("MatMul", [h, lm], ["logits"], name="lm_head"))
    return finish(
        b, "gpt",
        [helper.make_tensor_value_info(ids, TensorProto.INT64, ["batch", "seq"])],
        [helper.make_tensor_value_info("logits", TensorProto.FLOAT,
                                       ["batch", "seq", vocab])],
    )


# ---------------------------------------------------------------------------
# CNN
# ---------------------------------------------------------------------------
def conv(b, x, prefix, c_in, c_out, bias=True):
    w = b.weight(f"{prefix}.weight", (c_out, c_in, 3, 3), 0.1)
    inputs = [x, w]
    if bias:
        inputs.append(b.weight(f"{prefix}.bias", (c_out,), 0.02))
    return b.op("Conv", inputs, kernel_shape=[3, 3], pads=[1, 1, 1, 1], strides=[1, 1])


def batch_norm(b, x, prefix, c):
    scale = b.const_init(f"{prefix}.weight",
                         (1.0 + b.rng.standard_normal(c) * 0.1).astype(np.float32))
    bias = b.weight(f"{prefix}.bias", (c,), 0.05)
    mean = b.weight(f"{prefix}.running_mean", (c,), 0.05)
    # Variance must be positive; keep it near 1 so activations stay O(1).
    var = b.const_init(f"{prefix}.running_var",
                       b.rng.uniform(0.5, 1.5, c).astype(np.float32))
    return b.op("BatchNormalization", [x, scale, bias, mean, var], epsilon=1e-5)


def build_cnn():
    b = GraphBuilder(np.random.RandomState(0))
    h = conv(b, "image", "conv1", 3, 16)
    h = b.op("Relu", [batch_norm(b, h, "bn1", 16)])
    h = b.op("MaxPool", [h], kernel_shape=[2, 2], strides=[2, 2])
    h = conv(b, h, "conv2", 16, 32, bias=False)  # bias folded into BN, as usual
    h = b.op("Relu", [batch_norm(b, h, "bn2", 32)])
    h = b.op("AveragePool", [h], kernel_shape=[2, 2], strides=[2, 2])
    h = b.op("Relu", [conv(b, h, "conv3", 32, 32)])
    h = b.op("GlobalAveragePool", [h])
    h = b.op("Flatten", [h], axis=1)
    w = b.weight("fc.weight", (10, 32), 0.1)
    bias = b.weight("fc.bias", (10,), 0.02)
    b.nodes.append(helper.make_node("Gemm", [h, w, bias], ["logits"], name="fc", transB=1))
    return finish(
        b, "cnn",
        [helper.make_tensor_value_info("image", TensorProto.FLOAT, ["batch", 3, 32, 32])],
        [helper.make_tensor_value_info("logits", TensorProto.FLOAT, ["batch", 10])],
    )


MODELS = {"mlp": build_mlp, "gpt": build_gpt, "cnn": build_cnn}


# ---------------------------------------------------------------------------
# --check: run the written files in onnxruntime
# ---------------------------------------------------------------------------
def check_models(out_dir):
    import onnxruntime as ort

    opts = ort.SessionOptions()
    opts.intra_op_num_threads = 1  # these are tiny; don't hog a shared machine
    opts.inter_op_num_threads = 1

    def session(name):
        return ort.InferenceSession(os.path.join(out_dir, f"{name}.onnx"), opts,
                                    providers=["CPUExecutionProvider"])

    rng = np.random.RandomState(1)
    feeds = {
        "mlp": ({"x": rng.standard_normal((2, 64)).astype(np.float32)}, (2, 10)),
        "gpt": ({"input_ids": rng.randint(0, VOCAB, (2, 16)).astype(np.int64)},
                (2, 16, VOCAB)),
        "cnn": ({"image": rng.standard_normal((2, 3, 32, 32)).astype(np.float32)},
                (2, 10)),
    }
    ok = True
    for name, (feed, want_shape) in feeds.items():
        (out,) = session(name).run(None, feed)
        good = out.shape == want_shape and np.isfinite(out).all() and out.std() > 0
        ok &= bool(good)
        print(f"check {name}: shape {out.shape} (want {want_shape}), "
              f"finite={np.isfinite(out).all()}, std={out.std():.4g} "
              f"{'OK' if good else 'BAD'}")

    # The causal mask is the easiest part of the GPT to get subtly wrong, so
    # verify it behaviourally: changing the last token must not move any
    # earlier position's logits.
    ids = feeds["gpt"][0]["input_ids"].copy()
    sess = session("gpt")
    (a,) = sess.run(None, {"input_ids": ids})
    ids[:, -1] = (ids[:, -1] + 1) % VOCAB
    (c,) = sess.run(None, {"input_ids": ids})
    causal = np.allclose(a[:, :-1], c[:, :-1], atol=1e-5) and not np.allclose(a[:, -1], c[:, -1])
    ok &= bool(causal)
    print(f"check gpt causality: {'OK' if causal else 'BAD'}")
    return ok


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("out_dir")
    ap.add_argument("--check", action="store_true",
                    help="run each model in onnxruntime (batch=2, seq=16)")
    args = ap.parse_args()

    os.makedirs(args.out_dir, exist_ok=True)
    for name, build in MODELS.items():
        path = os.path.join(args.out_dir, f"{name}.onnx")
        model = build()
        onnx.save(model, path)
        print(f"wrote {path} ({len(model.graph.node)} nodes, "
              f"{os.path.getsize(path)} bytes)")

    if args.check and not check_models(args.out_dir):
        sys.exit(1)


if __name__ == "__main__":
    main()
