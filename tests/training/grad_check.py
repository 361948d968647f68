#!/usr/bin/env python3
"""Finite-difference check of dtc's gradients, one tiny ONNX model per op.

Usage:
    python3 tests/training/grad_check.py [--dtc build/bin/dtc] [-k SUBSTRING]
                                         [--jobs N] [--keep DIR] [--list]

Each case is a small model (opset 17; 20 for Gelu) in which float
initializers of more than one element (the ones dtc trains) feed the op
under test, sometimes with a graph input X. Every input gets a leading batch
dim of 1 (reshaped away inside the model) and the output is reshaped to
[1, -1], so that one sample is one batch for `dtc run --data`.

dtc's gradient: `dtc compile --train --loss mse --optimizer sgd --momentum 0
--lr 1`, one step of `dtc run --no-shuffle --export`, and
g = (W0 - W1) / lr from the exported weights. lr is 1 rather than a small
rate so that reading the gradient back from float32 weights costs at most
half an ulp of the weight (with lr 1e-2 it would cost 100 times that).

The reference: the same model converted to float64 (float initializers,
inputs, outputs, Cast targets and Constant values), the trained initializers
made graph inputs, evaluated with onnxruntime (onnx.reference where
onnxruntime has no float64 kernel), mse loss = mean((out - labels)^2) (or
dtc's cross entropy) in numpy, central differences with eps = 1e-6 max(1, |w|).
A case passes when every gradient element satisfies
|dtc - ref| <= 1e-3 max|ref| + 1e-5 (max over that parameter), and dtc's
reported step-1 loss matches the reference loss to 1e-4 relative.

Inputs are drawn away from the points where an op is not differentiable
(relu/abs at 0, max/min ties, clip bounds, reduce max/min ties).

Prints one line per case; exit status 0 if all passed, 1 otherwise.
"""

import argparse
import concurrent.futures
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.normpath(os.path.join(HERE, "..", ".."))

LR = 1.0
RTOL = 1e-3   # of max|ref| per parameter
ATOL = 1e-5
LOSS_RTOL = 1e-4


# ---------------------------------------------------------------------------
# Cases
# ---------------------------------------------------------------------------

class Case:
    """nodes compute `Y` from params (trained), inputs (graph inputs, no
    batch dim) and consts (initializers that are not trained: ints, scalars)."""

    def __init__(self, name, nodes, params, inputs=None, consts=None, opset=17,
                 loss="mse", out_shape=(1, -1), ignore_index=None):
        self.name = name
        self.nodes = nodes
        self.params = params
        self.inputs = inputs or {}
        self.consts = consts or {}
        self.opset = opset
        self.loss = loss
        self.out_shape = out_shape
        self.ignore_index = ignore_index  # cross_entropy: --ignore-index, some labels set to it


def N(op, ins, outs="Y", **attrs):
    return helper.make_node(op, ins, [outs] if isinstance(outs, str) else outs, **attrs)


def make_cases(seed=0):
    rng = np.random.RandomState(seed)

    def rand(*shape, lo=-1.0, hi=1.0):
        return rng.uniform(lo, hi, shape).astype(np.float32)

    def away(shape, points, gap, lo=-1.0, hi=1.0):
        """Uniform in [lo, hi], at least `gap` from each of `points`."""
        x = rand(*shape, lo=lo, hi=hi)
        for p in points:
            bad = np.abs(x - p) < gap
            while bad.any():
                x[bad] = rng.uniform(lo, hi, bad.sum())
                bad = np.abs(x - p) < gap
        return x.astype(np.float32)

    def apart(a_shape, b, gap=0.2):
        """An array of a_shape that differs from b (broadcast) by >= gap."""
        sign = np.where(rng.rand(*a_shape) < 0.5, -1.0, 1.0)
        return (b + sign * rng.uniform(gap, 1.0, a_shape)).astype(np.float32)

    def distinct(*shape):
        """Values with no ties (gaps of >= 0.1): for reduce max/min."""
        n = int(np.prod(shape))
        return (rng.permutation(n) * 0.1 - 0.05 * n).reshape(shape).astype(np.float32)

    def i64(*values):
        return np.array(values, dtype=np.int64)

    def f32(v):
        return np.array(v, dtype=np.float32)

    cases = []
    add = cases.append

    # Unary elementwise.
    unary = [
        ("neg", "Neg", rand(3, 4)),
        ("abs", "Abs", away((3, 4), [0.0], 0.1)),
        ("exp", "Exp", rand(3, 4)),
        ("log", "Log", rand(3, 4, lo=0.5, hi=2.0)),
        ("sqrt", "Sqrt", rand(3, 4, lo=0.5, hi=2.0)),
        ("reciprocal", "Reciprocal", rand(3, 4, lo=0.5, hi=2.0)),
        ("tanh", "Tanh", rand(3, 4, lo=-2, hi=2)),
        ("erf", "Erf", rand(3, 4, lo=-2, hi=2)),
        ("sin", "Sin", rand(3, 4, lo=-4, hi=4)),
        ("cos", "Cos", rand(3, 4, lo=-4, hi=4)),
        ("sigmoid", "Sigmoid", rand(3, 4, lo=-3, hi=3)),
        ("relu", "Relu", away((3, 4), [0.0], 0.1)),
    ]
    for name, op, w in unary:
        add(Case(name, [N(op, ["W"])], {"W": w}))
    add(Case("gelu", [N("Gelu", ["W"])], {"W": rand(3, 4, lo=-3, hi=3)}, opset=20))
    add(Case("gelu tanh", [N("Gelu", ["W"], approximate="tanh")],
             {"W": rand(3, 4, lo=-3, hi=3)}, opset=20))
    add(Case("clip", [N("Clip", ["W", "lo", "hi"])], {"W": away((3, 5), [-0.5, 0.5], 0.1)},
             consts={"lo": f32(-0.5), "hi": f32(0.5)}))
    add(Case("clip (max only)", [N("Clip", ["W", "", "hi"])],
             {"W": away((3, 5), [0.25], 0.1)}, consts={"hi": f32(0.25)}))
    add(Case("cast f32->f64->f32", [N("Cast", ["W"], "D", to=TensorProto.DOUBLE),
                                    N("Exp", ["D"], "E"),
                                    N("Cast", ["E"], "Y", to=TensorProto.FLOAT)],
             {"W": rand(3, 4)}))

    # Binary elementwise, broadcasting.
    add(Case("add [3,4]+[4]", [N("Add", ["A", "B"])], {"A": rand(3, 4), "B": rand(4)}))
    add(Case("sub [3,1]-[2,3,4]", [N("Sub", ["B", "A"])], {"A": rand(2, 3, 4), "B": rand(3, 1)}))
    add(Case("mul [2,3,4]*[3,1]", [N("Mul", ["A", "B"])], {"A": rand(2, 3, 4), "B": rand(3, 1)}))
    add(Case("mul x*x (reuse)", [N("Mul", ["A", "A"])], {"A": rand(3, 4)}))
    add(Case("div [3,4]/[4]", [N("Div", ["A", "B"])],
             {"A": rand(3, 4), "B": away((4,), [0.0], 0.5, lo=-2, hi=2)}))
    add(Case("div X/[3,4]", [N("Div", ["X", "B"])],
             {"B": rand(3, 4, lo=0.5, hi=2.0)}, inputs={"X": rand(3, 4)}))
    add(Case("pow [3,4]^[4]", [N("Pow", ["A", "B"])],
             {"A": rand(3, 4, lo=0.5, hi=2.0), "B": rand(4, lo=-1.5, hi=2.5)}))
    add(Case("pow x^2 (const exponent)", [N("Pow", ["A", "two"])],
             {"A": rand(3, 4, lo=-2, hi=2)}, consts={"two": f32(2.0)}))
    x = rand(3, 4)
    add(Case("max W,X", [N("Max", ["A", "X"])], {"A": apart((3, 4), x)}, inputs={"X": x}))
    add(Case("min X,W", [N("Min", ["X", "A"])], {"A": apart((3, 4), x)}, inputs={"X": x}))
    b = rand(4)
    add(Case("max [3,4],[4]", [N("Max", ["A", "B"])], {"A": apart((3, 4), b), "B": b}))
    add(Case("min [4],[3,4]", [N("Min", ["B", "A"])], {"A": apart((3, 4), b), "B": b}))
    add(Case("where", [N("Greater", ["X", "zero"], "C"), N("Where", ["C", "A", "B"])],
             {"A": rand(3, 4), "B": rand(4)}, inputs={"X": rand(3, 4)},
             consts={"zero": f32(0.0)}))

    # Matrix products.
    add(Case("matmul X[2,3] W[3,4]", [N("MatMul", ["X", "W"])], {"W": rand(3, 4)},
             inputs={"X": rand(2, 3)}))
    add(Case("matmul A[2,3] B[3,4]", [N("MatMul", ["A", "B"])], {"A": rand(2, 3), "B": rand(3, 4)}))
    add(Case("matmul 3-D x 2-D", [N("MatMul", ["A", "B"])], {"A": rand(2, 3, 4), "B": rand(4, 5)}))
    add(Case("matmul 3-D x transposed 2-D", [N("Transpose", ["B"], "Bt", perm=[1, 0]),
                                             N("MatMul", ["A", "Bt"])],
             {"A": rand(2, 3, 4), "B": rand(5, 4)}))
    add(Case("matmul 2-D x 3-D", [N("MatMul", ["A", "B"])], {"A": rand(3, 4), "B": rand(2, 4, 5)}))
    add(Case("matmul [1,3,4] x [2,4,5]", [N("MatMul", ["A", "B"])],
             {"A": rand(1, 3, 4), "B": rand(2, 4, 5)}))
    add(Case("matmul X[2,2,3] W[2,3,4]", [N("MatMul", ["X", "W"])], {"W": rand(2, 3, 4)},
             inputs={"X": rand(2, 2, 3)}))
    add(Case("gemm transB + bias", [N("Gemm", ["X", "W", "C"], transB=1)],
             {"W": rand(4, 3), "C": rand(4)}, inputs={"X": rand(2, 3)}))
    add(Case("gemm transA", [N("Gemm", ["A", "W"], transA=1)],
             {"A": rand(3, 2), "W": rand(3, 4)}))
    add(Case("gemm transA transB alpha beta", [N("Gemm", ["A", "W", "C"], transA=1, transB=1,
                                                 alpha=0.5, beta=2.0)],
             {"A": rand(3, 2), "W": rand(4, 3), "C": rand(2, 4)}))

    # Reductions and normalisations.
    add(Case("reduce_sum axis 1", [N("ReduceSum", ["W", "ax"], keepdims=0)], {"W": rand(3, 4)},
             consts={"ax": i64(1)}))
    add(Case("reduce_sum all (keepdims) * W", [N("ReduceSum", ["W"], "S", keepdims=1),
                                                N("Mul", ["S", "W"])], {"W": rand(3, 4)}))
    add(Case("reduce_mean axis 0", [N("ReduceMean", ["W"], axes=[0], keepdims=1)],
             {"W": rand(3, 4)}))
    add(Case("reduce_mean axes 0,2", [N("ReduceMean", ["W"], axes=[0, 2], keepdims=0)],
             {"W": rand(2, 3, 4)}))
    add(Case("reduce_max axis 1", [N("ReduceMax", ["W"], axes=[1], keepdims=0)],
             {"W": distinct(3, 4)}))
    add(Case("reduce_min axes 0,1", [N("ReduceMin", ["W"], axes=[0, 1], keepdims=1)],
             {"W": distinct(3, 4, 2)}))
    # A max taken twice: central differences see half the slope at each of
    # the two, which is dtc's rule (ties share the gradient equally).
    tied = distinct(3, 4)
    tied[:, 3] = tied.max(axis=1)
    add(Case("reduce_max ties (pairs share)", [N("ReduceMax", ["W"], axes=[1], keepdims=1)],
             {"W": tied}))
    add(Case("softmax axis -1", [N("Softmax", ["W"], axis=-1)], {"W": rand(3, 4, lo=-2, hi=2)}))
    add(Case("softmax axis 0", [N("Softmax", ["W"], axis=0)], {"W": rand(3, 4, lo=-2, hi=2)}))
    add(Case("log_softmax axis -1", [N("LogSoftmax", ["W"], axis=-1)],
             {"W": rand(3, 4, lo=-2, hi=2)}))
    add(Case("layer_norm axis -1 + bias", [N("LayerNormalization", ["W", "S", "B"], axis=-1)],
             {"W": rand(2, 3, 5, lo=-2, hi=2), "S": rand(5, lo=0.5, hi=1.5), "B": rand(5)}))
    add(Case("layer_norm axis 1, no bias", [N("LayerNormalization", ["W", "S"], axis=1,
                                              epsilon=1e-3)],
             {"W": rand(2, 3, 4, lo=-2, hi=2), "S": rand(3, 4, lo=0.5, hi=1.5)}))
    add(Case("layer_norm of X (scale, bias)", [N("LayerNormalization", ["X", "S", "B"], axis=-1)],
             {"S": rand(6, lo=0.5, hi=1.5), "B": rand(6)}, inputs={"X": rand(3, 6, lo=-2, hi=2)}))

    # RMSNorm written out as PyTorch exports it: dtc-fuse-rms-norm makes it
    # one rms layer_norm, whose gradient this checks.
    def rms_norm(x):
        return [N("Pow", [x, "two"], "sq"), N("ReduceMean", ["sq"], "ms", axes=[-1], keepdims=1),
                N("Add", ["ms", "eps"], "shifted"), N("Sqrt", ["shifted"], "root"),
                N("Reciprocal", ["root"], "inv"), N("Mul", [x, "inv"], "normed"),
                N("Mul", ["S", "normed"])]
    rms_consts = {"two": f32(2.0), "eps": f32(1e-5)}
    add(Case("rms_norm written out (scale)", rms_norm("W"),
             {"W": rand(2, 3, 5, lo=-2, hi=2), "S": rand(5, lo=0.5, hi=1.5)}, consts=rms_consts))
    add(Case("rms_norm of X written out (scale)", rms_norm("X"), {"S": rand(6, lo=0.5, hi=1.5)},
             inputs={"X": rand(3, 6, lo=-2, hi=2)}, consts=rms_consts))

    # Data movement.
    add(Case("gather axis 0 (embedding)", [N("Gather", ["W", "idx"], axis=0)],
             {"W": rand(5, 3)}, consts={"idx": i64(0, 2, 4, 2, -1, 1).reshape(2, 3)}))
    add(Case("gather axis 1", [N("Gather", ["W", "idx"], axis=1)],
             {"W": rand(2, 5, 3)}, consts={"idx": i64(4, 0, 4)}))
    add(Case("gather input ids (i32)", [N("Cast", ["X"], "I", to=TensorProto.INT32),
                                        N("Gather", ["W", "I"], axis=0)],
             {"W": rand(6, 4)}, inputs={"X": f32([[1, 5, 1], [0, 3, 3]])}))
    add(Case("gathernd", [N("GatherND", ["W", "idx"])], {"W": rand(3, 4, 2)},
             consts={"idx": i64(0, 1, 2, -1, 0, 1, 2, 3).reshape(4, 2)}))
    add(Case("gathernd batch_dims 1", [N("GatherND", ["W", "idx"], batch_dims=1)],
             {"W": rand(2, 5, 3)}, consts={"idx": i64(4, 1, 0, 4).reshape(2, 2, 1)}))
    add(Case("gather elements axis 1", [N("GatherElements", ["W", "idx"], axis=1)],
             {"W": rand(3, 4)}, consts={"idx": i64(0, 3, -1, 1, 1, 2).reshape(3, 2)}))
    add(Case("softmax cross entropy loss (none, ignore_index)",
             [N("SoftmaxCrossEntropyLoss", ["W", "lab"], reduction="none", ignore_index=2)],
             {"W": rand(4, 3, 2)}, consts={"lab": i64(0, 2, 1, 1, 2, 0, 1, 0).reshape(4, 2)}))
    add(Case("nll loss (mean, weights)",
             [N("NegativeLogLikelihoodLoss", ["W", "lab", "w"], reduction="mean")],
             {"W": rand(5, 3)}, consts={"lab": i64(0, 2, 1, 1, 2), "w": f32([0.5, 1.0, 2.0])}))
    add(Case("cumsum", [N("CumSum", ["W", "ax"])], {"W": rand(3, 5)},
             consts={"ax": i64(1).reshape(())}))
    add(Case("cumsum exclusive reverse", [N("CumSum", ["W", "ax"], exclusive=1, reverse=1)],
             {"W": rand(6, 2)}, consts={"ax": i64(0).reshape(())}))
    add(Case("reshape", [N("Reshape", ["W", "shape"])], {"W": rand(3, 4)},
             consts={"shape": i64(2, 6)}))
    add(Case("transpose", [N("Transpose", ["W"], perm=[2, 0, 1])], {"W": rand(2, 3, 4)}))
    add(Case("squeeze/unsqueeze", [N("Squeeze", ["W", "ax1"], "S"),
                                   N("Unsqueeze", ["S", "ax0"], "U"),
                                   N("Mul", ["U", "U"])],
             {"W": rand(3, 1, 4)}, consts={"ax1": i64(1), "ax0": i64(0)}))
    add(Case("expand", [N("Expand", ["W", "shape"])], {"W": rand(3, 1)},
             consts={"shape": i64(2, 3, 4)}))
    add(Case("concat axis 1", [N("Concat", ["A", "B", "A"], axis=1)],
             {"A": rand(2, 3), "B": rand(2, 2)}))
    add(Case("concat axis -3", [N("Concat", ["A", "X", "B"], axis=-3)],
             {"A": rand(1, 2, 3), "B": rand(2, 2, 3)}, inputs={"X": rand(1, 2, 3)}))
    add(Case("split axis 0 (both used)", [N("Split", ["W", "sizes"], ["P", "Q"], axis=0),
                                          N("Mul", ["P", "Q"])],
             {"W": rand(4, 3)}, consts={"sizes": i64(2, 2)}))
    add(Case("split axis 1 (middle unused)",
             [N("Split", ["W", "sizes"], ["P", "Q", "R"], axis=1),
              N("Concat", ["R", "P"], axis=1)],
             {"W": rand(3, 6)}, consts={"sizes": i64(1, 2, 3)}))
    add(Case("slice unit strides", [N("Slice", ["W", "st", "en"])], {"W": rand(4, 5)},
             consts={"st": i64(1, 1), "en": i64(3, 4)}))
    add(Case("slice one dim from 0", [N("Slice", ["W", "st", "en", "ax"])], {"W": rand(4, 5)},
             consts={"st": i64(0), "en": i64(2), "ax": i64(1)}))
    add(Case("slice of a large parameter (its zero block filled at load)",
             [N("Slice", ["W", "st", "en"])], {"W": rand(40, 40)},
             consts={"st": i64(30, 0), "en": i64(40, 40)}))
    add(Case("slice stride 2", [N("Slice", ["W", "st", "en", "ax", "sp"])], {"W": rand(5, 6)},
             consts={"st": i64(0, 1), "en": i64(5, 6), "ax": i64(0, 1), "sp": i64(2, 2)}))
    add(Case("slice stride 3 (trimmed end)", [N("Slice", ["W", "st", "en", "ax", "sp"])],
             {"W": rand(2, 6)}, consts={"st": i64(1), "en": i64(6), "ax": i64(1),
                                        "sp": i64(3)}))
    add(Case("slice stride 3 (zeros after)", [N("Slice", ["W", "st", "en", "ax", "sp"])],
             {"W": rand(2, 8)}, consts={"st": i64(1), "en": i64(6), "ax": i64(1),
                                        "sp": i64(3)}))
    add(Case("slice stride -1", [N("Slice", ["W", "st", "en", "ax", "sp"])], {"W": rand(4, 3)},
             consts={"st": i64(3), "en": i64(0), "ax": i64(0), "sp": i64(-1)}))
    add(Case("slice stride -2", [N("Slice", ["W", "st", "en", "ax", "sp"])], {"W": rand(3, 7)},
             consts={"st": i64(5), "en": i64(-9), "ax": i64(1), "sp": i64(-2)}))
    add(Case("trilu upper", [N("Trilu", ["W"], upper=1)], {"W": rand(3, 4)}))
    add(Case("trilu lower k=1", [N("Trilu", ["W", "k"], upper=0)], {"W": rand(2, 3, 3)},
             consts={"k": i64(1)}))
    add(Case("trilu upper k=-1", [N("Trilu", ["W", "k"], upper=1)], {"W": rand(4, 3)},
             consts={"k": i64(-1)}))

    # Convolution and pooling (NCHW).
    add(Case("conv 3x3 pad 1 + bias", [N("Conv", ["X", "W", "B"], pads=[1, 1, 1, 1])],
             {"W": rand(4, 3, 3, 3), "B": rand(4)}, inputs={"X": rand(2, 3, 5, 5)}))
    add(Case("conv of a parameter, stride 2, asymmetric pads, dilation",
             [N("Conv", ["A", "W"], strides=[2, 1], pads=[1, 0, 0, 2], dilations=[2, 1])],
             {"A": rand(1, 2, 7, 6), "W": rand(3, 2, 2, 3)}))
    add(Case("conv groups 2", [N("Conv", ["A", "W"], group=2, pads=[1, 1, 1, 1])],
             {"A": rand(2, 4, 4, 4), "W": rand(6, 2, 3, 3)}))
    add(Case("conv depthwise stride 2", [N("Conv", ["A", "W", "B"], group=3, strides=[2, 2])],
             {"A": rand(1, 3, 6, 5), "W": rand(3, 1, 2, 2), "B": rand(3)}))
    add(Case("conv 1x1", [N("Conv", ["A", "W"])], {"A": rand(2, 3, 3, 4), "W": rand(5, 3, 1, 1)}))
    add(Case("pad reflect", [N("Pad", ["A", "p"], mode="reflect")], {"A": rand(2, 4, 5)},
             consts={"p": np.array([0, 2, 1, 0, 1, 3], np.int64)}))
    add(Case("pad edge and wrap crop", [N("Pad", ["A", "p"], "E", mode="edge"),
                                        N("Pad", ["E", "q"], mode="wrap")], {"A": rand(3, 4)},
             consts={"p": np.array([1, 2, 0, 1], np.int64), "q": np.array([-1, 3, 2, 0], np.int64)}))
    # TopK: graph.top_k's indices, the values gathered (GatherElements' gradient).
    add(Case("top_k 3 of 6 along axis 1",
             [N("TopK", ["A", "k"], ["Y", "I"], axis=1)],
             {"A": distinct(2, 6, 3)}, consts={"k": np.array([3], np.int64)}))
    # ScatterND / ScatterElements with constant indices: a gather of the
    # updates where written (data's gradient masked), scatter_add for add,
    # layers of max for a position written twice.
    add(Case("scatter_nd rows of a parameter by updates",
             [N("ScatterND", ["A", "i", "U"])], {"A": rand(4, 3), "U": rand(2, 3)},
             consts={"i": np.array([[3], [1]], np.int64)}))
    add(Case("scatter_elements add along axis 1",
             [N("ScatterElements", ["A", "i", "U"], axis=1, reduction="add")],
             {"A": rand(2, 4), "U": rand(2, 3)},
             consts={"i": np.array([[0, 2, 2], [3, 1, 0]], np.int64)}))
    add(Case("scatter_elements max, a position written twice",
             [N("ScatterElements", ["A", "i", "U"], axis=0, reduction="max")],
             {"A": distinct(3, 2), "U": distinct(2, 2) + 0.05},
             consts={"i": np.array([[1, 0], [1, 2]], np.int64)}))
    # Attention (opset 23): matmuls, softmax, the mask and the causal triangle.
    add(Case("attention 4-D grouped-query causal softcap",
             [N("Attention", ["Q", "K", "V"], is_causal=1, softcap=2.0)],
             {"Q": rand(1, 4, 3, 2), "K": rand(1, 2, 5, 2), "V": rand(1, 2, 5, 3)}, opset=23))
    add(Case("attention 3-D heads, bool mask",
             [N("Attention", ["Q", "K", "V", "m"], q_num_heads=2, kv_num_heads=2, scale=0.3)],
             {"Q": rand(2, 3, 4), "K": rand(2, 4, 4), "V": rand(2, 4, 6)},
             consts={"m": np.array([[True, True, False, True]] * 3)}, opset=23))
    # RotaryEmbedding (opset 23): slices, a gather and elementwise ops; the
    # input's gradient rotated back (a partial rotation, interleaved pairs).
    add(Case("rotary embedding 4-D interleaved, partial, position ids",
             [N("RotaryEmbedding", ["A", "c", "s", "p"], interleaved=1, rotary_embedding_dim=4)],
             {"A": rand(1, 2, 3, 6)},
             consts={"c": np.cos(np.arange(10)[:, None] * np.array([0.3, 0.7])).astype(np.float32),
                     "s": np.sin(np.arange(10)[:, None] * np.array([0.3, 0.7])).astype(np.float32),
                     "p": np.array([[4, 1, 7]], np.int64)}, opset=23))
    add(Case("rotary embedding 3-D halves",
             [N("RotaryEmbedding", ["A", "c", "s"], num_heads=2)],
             {"A": rand(2, 3, 8)},
             consts={"c": np.cos(np.arange(6).reshape(2, 3, 1) * np.ones(2)).astype(np.float32),
                     "s": np.sin(np.arange(6).reshape(2, 3, 1) * np.ones(2)).astype(np.float32)},
             opset=23))
    # Einsum: sums, transposes and batched matmuls.
    for equation, shapes in [("bij,bjk->bik", [(2, 3, 4), (2, 4, 5)]),
                             ("bhqd,bhkd->bhqk", [(1, 2, 3, 4), (1, 2, 5, 4)]),
                             ("i,j->ij", [(3,), (4,)]),
                             ("ij->ji", [(3, 4)]),
                             ("ij->", [(3, 4)]),
                             ("...ij,...jk->...ik", [(2, 3, 4), (2, 4, 2)]),
                             ("abc,cd,de->abe", [(2, 3, 4), (4, 5), (5, 2)]),
                             ("ij,jk", [(3, 4), (4, 2)]),
                             ("ijk,ik->j", [(2, 3, 4), (2, 4)])]:
        names = [f"E{i}" for i in range(len(shapes))]
        add(Case(f"einsum {equation}", [N("Einsum", names, equation=equation)],
                 {n: rand(*s) for n, s in zip(names, shapes)}))
    # Resize: constant-index gathers and weights per axis.
    add(Case("resize linear x2 (half_pixel)",
             [N("Resize", ["A", "", "s"], mode="linear")],
             {"A": rand(1, 2, 3, 4)}, consts={"s": np.array([1, 1, 2, 2], np.float32)}))
    add(Case("resize cubic to sizes (align_corners)",
             [N("Resize", ["A", "", "", "z"], mode="cubic",
                coordinate_transformation_mode="align_corners")],
             {"A": rand(1, 1, 4, 4)}, consts={"z": np.array([1, 1, 6, 3], np.int64)}))
    add(Case("resize linear antialiased down x0.5",
             [N("Resize", ["A", "", "s"], mode="linear", antialias=1)],
             {"A": rand(1, 1, 4, 8)}, consts={"s": np.array([1, 1, 0.5, 0.5], np.float32)}))
    add(Case("resize tf_crop_and_resize (extrapolated)",
             [N("Resize", ["A", "r", "", "z"], mode="linear",
                coordinate_transformation_mode="tf_crop_and_resize", extrapolation_value=2.0)],
             {"A": rand(1, 1, 4, 5)},
             consts={"r": np.array([0, 0, -0.2, 0.1, 1, 1, 1.1, 0.8], np.float32),
                     "z": np.array([1, 1, 5, 3], np.int64)}))
    # ConvTranspose: conv2d_backward_input, differentiated as conv2d's adjoint.
    add(Case("conv_transpose stride 2 pads output_padding + bias",
             [N("ConvTranspose", ["A", "W", "B"], strides=[2, 2], pads=[1, 0, 0, 1],
                output_padding=[1, 0])],
             {"A": rand(2, 3, 3, 4), "W": rand(3, 2, 3, 2), "B": rand(2)}))
    # (groups: onnx.reference's grouped ConvTranspose fails; the forward is
    # matched against onnxruntime in tests/frontends/onnx/conv_transpose.onnxtxt.)
    add(Case("conv_transpose dilation", [N("ConvTranspose", ["A", "W"], dilations=[2, 1])],
             {"A": rand(1, 2, 3, 3), "W": rand(2, 3, 2, 2)}))
    add(Case("max_pool 2x2 stride 2", [N("MaxPool", ["A"], kernel_shape=[2, 2], strides=[2, 2])],
             {"A": distinct(2, 2, 4, 6)}))
    add(Case("max_pool 3x3 stride 2 pad 1 (overlapping)",
             [N("MaxPool", ["A"], kernel_shape=[3, 3], strides=[2, 2], pads=[1, 1, 1, 1])],
             {"A": distinct(1, 2, 5, 5)}))
    add(Case("max_pool ceil_mode, dilation", [N("MaxPool", ["A"], kernel_shape=[2, 2],
                                                strides=[2, 2], dilations=[1, 2], ceil_mode=1)],
             {"A": distinct(1, 1, 5, 7)}))
    add(Case("avg_pool 2x2 stride 2", [N("AveragePool", ["A"], kernel_shape=[2, 2],
                                         strides=[2, 2])], {"A": rand(2, 3, 4, 4)}))
    add(Case("avg_pool 3x3 pad 1 (pads excluded)",
             [N("AveragePool", ["A"], kernel_shape=[3, 3], pads=[1, 1, 1, 1])],
             {"A": rand(1, 2, 4, 5)}))
    add(Case("avg_pool 3x3 stride 2 pad 1 count_include_pad ceil_mode",
             [N("AveragePool", ["A"], kernel_shape=[3, 3], strides=[2, 2], pads=[1, 1, 1, 1],
                count_include_pad=1, ceil_mode=1)], {"A": rand(1, 2, 6, 6)}))
    # 3-D windows: a 2-D pooling per depth slice, then one over depth.
    add(Case("max_pool 3-D 2x2x2 stride 2 pad", [N("MaxPool", ["A"], kernel_shape=[2, 2, 2],
                                                   strides=[2, 2, 2], pads=[1, 0, 0, 0, 1, 0])],
             {"A": distinct(1, 2, 3, 4, 5)}))
    add(Case("avg_pool 3-D 3x2x2 pads excluded, ceil_mode",
             [N("AveragePool", ["A"], kernel_shape=[3, 2, 2], strides=[2, 2, 1],
                pads=[1, 0, 1, 1, 0, 0], ceil_mode=1)], {"A": rand(1, 2, 4, 4, 3)}))
    add(Case("global average pool", [N("GlobalAveragePool", ["A"])], {"A": rand(2, 3, 3, 2)}))
    add(Case("batch_norm training mode", [N("BatchNormalization", ["A", "S", "B", "m", "v"],
                                            training_mode=1, epsilon=1e-3)],
             {"A": rand(3, 2, 3, 2, lo=-2, hi=2), "S": rand(2, lo=0.5, hi=1.5), "B": rand(2)},
             consts={"m": rand(2), "v": rand(2, lo=0.5, hi=1.5)}, opset=15))
    add(Case("conv -> batch_norm -> relu -> max_pool",
             [N("Conv", ["X", "W"], "C", pads=[1, 1, 1, 1]),
              N("BatchNormalization", ["C", "S", "B", "m", "v"], "D", training_mode=1),
              N("Relu", ["D"], "R"),
              N("MaxPool", ["R"], kernel_shape=[2, 2], strides=[2, 2])],
             {"W": rand(3, 2, 3, 3), "S": rand(3, lo=0.5, hi=1.5), "B": rand(3, lo=0.5, hi=1.0)},
             inputs={"X": rand(2, 2, 4, 4)},
             consts={"m": np.zeros(3, np.float32), "v": np.ones(3, np.float32)}, opset=15))

    # A small attention block: every op's gradient in one graph, values used
    # several times (summed gradients), a causal mask, layer norm, gelu.
    s, d = 4, 6
    add(Case("attention block", [
        N("LayerNormalization", ["X", "ln_s", "ln_b"], "H", axis=-1),
        N("MatMul", ["H", "Wq"], "Q"),
        N("MatMul", ["H", "Wk"], "K"),
        N("MatMul", ["H", "Wv"], "V"),
        N("Transpose", ["K"], "Kt", perm=[1, 0]),
        N("MatMul", ["Q", "Kt"], "S0"),
        N("Mul", ["S0", "scale"], "S1"),
        N("Trilu", ["ones"], "M0", upper=0),
        N("Equal", ["M0", "zero"], "M"),
        N("Where", ["M", "neg", "S1"], "S2"),
        N("Softmax", ["S2"], "P", axis=-1),
        N("MatMul", ["P", "V"], "A"),
        N("Add", ["A", "X"], "R"),
        N("Gemm", ["R", "W1", "b1"], "F0", transB=1),
        N("Gelu", ["F0"], "F1", approximate="tanh"),
        N("MatMul", ["F1", "W2"], "F2"),
        N("Add", ["F2", "R"], "Y"),
    ], {"ln_s": rand(d, lo=0.5, hi=1.5), "ln_b": rand(d, lo=-0.2, hi=0.2),
        "Wq": rand(d, d), "Wk": rand(d, d), "Wv": rand(d, d),
        "W1": rand(8, d), "b1": rand(8), "W2": rand(8, d)},
        inputs={"X": rand(s, d, lo=-2, hi=2)},
        consts={"scale": f32(1 / np.sqrt(d)), "ones": np.ones((s, s), np.float32),
                "zero": f32(0.0), "neg": f32(-1e4)}, opset=20))
    add(Case("cross_entropy head", [N("MatMul", ["X", "W"], "L"),
                                    N("LogSoftmax", ["L"], "Y", axis=-1)],
             {"W": rand(4, 5)}, inputs={"X": rand(3, 4, lo=-2, hi=2)},
             loss="cross_entropy", out_shape=(1, 3, 5)))
    add(Case("cross_entropy head, --ignore-index", [N("MatMul", ["X", "W"], "Y")],
             {"W": rand(4, 5)}, inputs={"X": rand(3, 4, lo=-2, hi=2)},
             loss="cross_entropy", out_shape=(1, 3, 5), ignore_index=-100))
    return cases


# ---------------------------------------------------------------------------
# Models
# ---------------------------------------------------------------------------

def build_model(case):
    """The float32 model: inputs X_in [1, *shape] reshaped to X; Y reshaped to `out`."""
    nodes, inits, graph_inputs = [], [], []
    for name, value in case.inputs.items():
        graph_inputs.append(helper.make_tensor_value_info(name + "_in", TensorProto.FLOAT,
                                                          (1,) + value.shape))
        inits.append(numpy_helper.from_array(np.array(value.shape, np.int64), name + "_shape"))
        nodes.append(helper.make_node("Reshape", [name + "_in", name + "_shape"], [name]))
    nodes += case.nodes
    inits.append(numpy_helper.from_array(np.array(case.out_shape, np.int64), "out_shape"))
    nodes.append(helper.make_node("Reshape", ["Y", "out_shape"], ["out"]))
    for name, value in list(case.params.items()) + list(case.consts.items()):
        inits.append(numpy_helper.from_array(np.asarray(value), name))
    graph = helper.make_graph(nodes, "grad_check", graph_inputs,
                              [helper.make_tensor_value_info("out", TensorProto.FLOAT, None)],
                              inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", case.opset)])
    model.ir_version = 8 if case.opset < 20 else 9
    return model


def to_double(model, trained):
    """The model in float64, with the `trained` initializers as graph inputs."""
    m = onnx.ModelProto()
    m.CopyFrom(model)
    g = m.graph
    kept = []
    for init in g.initializer:
        array = numpy_helper.to_array(init)
        if array.dtype == np.float32:
            array = array.astype(np.float64)
        if init.name in trained:
            g.input.append(helper.make_tensor_value_info(init.name, TensorProto.DOUBLE,
                                                         array.shape))
        else:
            kept.append(numpy_helper.from_array(array, init.name))
    del g.initializer[:]
    g.initializer.extend(kept)
    for v in list(g.input) + list(g.output) + list(g.value_info):
        if v.type.tensor_type.elem_type == TensorProto.FLOAT:
            v.type.tensor_type.elem_type = TensorProto.DOUBLE
    for node in g.node:
        for a in node.attribute:
            if node.op_type in ("Cast", "CastLike") and a.name == "to" and a.i == TensorProto.FLOAT:
                a.i = TensorProto.DOUBLE
            if node.op_type == "Constant" and a.name == "value" and \
                    a.t.data_type == TensorProto.FLOAT:
                a.t.CopyFrom(numpy_helper.from_array(
                    numpy_helper.to_array(a.t).astype(np.float64), a.t.name))
    return m


def float64_ops():
    """onnx.reference ops that would compute in float32 (Erf) or need shape
    inference first (Gelu, a function): float64 versions."""
    import math
    from onnx.reference.op_run import OpRun

    erf = np.vectorize(math.erf, otypes=[np.float64])

    class Erf(OpRun):
        op_domain = ""

        def _run(self, x):
            return (erf(x).astype(x.dtype),)

    class Gelu(OpRun):
        op_domain = ""

        def _run(self, x, approximate=None):
            if approximate == "tanh":
                y = 0.5 * x * (1 + np.tanh(np.sqrt(2 / np.pi) * (x + 0.044715 * x ** 3)))
            else:
                y = 0.5 * x * (1 + erf(x / np.sqrt(2)))
            return (y.astype(x.dtype),)

    return [Erf, Gelu]


class Reference:
    """Evaluates the float64 model: onnxruntime, or onnx.reference where
    onnxruntime has no float64 kernel for some op."""

    def __init__(self, model):
        self.engine = "onnxruntime"
        try:
            import onnxruntime as ort
            opts = ort.SessionOptions()
            opts.intra_op_num_threads = 1
            opts.inter_op_num_threads = 1
            opts.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
            sess = ort.InferenceSession(model.SerializeToString(), opts,
                                        providers=["CPUExecutionProvider"])
            self.run = lambda feeds: sess.run(["out"], feeds)[0]
        except Exception as e:  # noqa: BLE001 (NOT_IMPLEMENTED: no float64 kernel)
            from onnx.reference import ReferenceEvaluator
            m = re.search(r"implementation for (\w+)\(", str(e))
            self.engine = "onnx.reference: onnxruntime has no float64 " + \
                (m.group(1) if m else str(e).splitlines()[0][:80])
            ev = ReferenceEvaluator(model, new_ops=float64_ops())
            self.run = lambda feeds: ev.run(["out"], feeds)[0]


def loss_of(out, labels, kind, ignore_index=None):
    if kind == "mse":
        return float(np.mean((out - labels) ** 2))
    # cross entropy: mean over positions of -log_softmax(logits)[label],
    # positions labelled ignore_index left out
    logits = out.reshape(-1, out.shape[-1])
    shifted = logits - logits.max(axis=1, keepdims=True)
    logp = shifted - np.log(np.exp(shifted).sum(axis=1, keepdims=True))
    flat = labels.reshape(-1)
    kept = flat != ignore_index if ignore_index is not None else np.ones(len(flat), bool)
    picked = logp[np.arange(len(logits))[kept], flat[kept]]
    return float(-picked.sum() / max(kept.sum(), 1))


def reference_gradients(case, model, labels):
    params = {k: v.astype(np.float64) for k, v in case.params.items()}
    ref = Reference(to_double(model, set(params)))
    feeds = {k + "_in": v[None].astype(np.float64) for k, v in case.inputs.items()}

    def loss(values):
        return loss_of(ref.run({**feeds, **values}), labels, case.loss, case.ignore_index)

    base = loss(params)
    grads = {}
    for name, w in params.items():
        grad = np.zeros_like(w)
        for i in np.ndindex(w.shape):
            eps = 1e-6 * max(1.0, abs(w[i]))
            plus, minus = w.copy(), w.copy()
            plus[i] += eps
            minus[i] -= eps
            grad[i] = (loss({**params, name: plus}) - loss({**params, name: minus})) / (2 * eps)
        grads[name] = grad
    return base, grads, ref.engine


# ---------------------------------------------------------------------------
# dtc
# ---------------------------------------------------------------------------

def run_dtc(dtc, args, timeout=60):
    p = subprocess.run([dtc] + args, capture_output=True, text=True, errors="replace",
                       timeout=timeout)
    if p.returncode != 0:
        lines = [l for l in (p.stderr + p.stdout).splitlines() if l.strip()]
        raise RuntimeError(f"dtc {args[0]} (exit {p.returncode}): " +
                           (" | ".join(lines[:3]) or "no output"))
    return p.stdout


def dtc_gradients(dtc, case, model, labels, work):
    model_path = os.path.join(work, "model.onnx")
    onnx.save(model, model_path)
    data = os.path.join(work, "data")
    os.makedirs(data, exist_ok=True)
    for name, value in case.inputs.items():
        np.save(os.path.join(data, name + "_in.npy"), value[None].astype(np.float32))
    np.save(os.path.join(data, "labels.npy"), labels)
    plan = os.path.join(work, "train.dtcp")
    ignore = [] if case.ignore_index is None else ["--ignore-index", str(case.ignore_index)]
    run_dtc(dtc, ["compile", model_path, "--train", "--loss", case.loss, "--optimizer", "sgd",
                  "--momentum", "0", "--lr", repr(LR), "-o", plan] + ignore)
    exported = os.path.join(work, "trained.onnx")
    out = run_dtc(dtc, ["run", plan, "--data", data, "--steps", "1", "--no-shuffle",
                        "--threads", "1", "--export", exported])
    m = re.search(r"step 1 loss (\S+)", out)
    loss = float(m.group(1)) if m else float("nan")
    trained = {i.name: numpy_helper.to_array(i) for i in onnx.load(exported).graph.initializer}
    return loss, {name: (w0.astype(np.float64) - trained[name].astype(np.float64)) / LR
                  for name, w0 in case.params.items()}


def labels_for(case, model, rng):
    ref = Reference(to_double(model, set()))
    out = ref.run({k + "_in": v[None].astype(np.float64) for k, v in case.inputs.items()})
    if case.loss == "mse":
        return rng.uniform(-1, 1, out.shape).astype(np.float32)
    labels = rng.randint(0, out.shape[-1], out.shape[:-1]).astype(np.int64)
    if case.ignore_index is not None:
        labels.reshape(-1)[::2] = case.ignore_index  # every other position left out
    return labels


def check(dtc, case, index, keep):
    start = time.time()
    rng = np.random.RandomState(1000 + index)
    model = build_model(case)
    work = os.path.join(keep, re.sub(r"[^A-Za-z0-9]+", "_", case.name)) if keep \
        else tempfile.mkdtemp(prefix="grad_check_")
    os.makedirs(work, exist_ok=True)
    try:
        try:
            labels = labels_for(case, model, rng)
            ref_loss, ref, engine = reference_gradients(case, model, labels)
        except Exception as e:  # noqa: BLE001 (a broken case must not hide the others)
            return False, f"FAIL  {case.name:34s} reference: {type(e).__name__}: " + \
                str(e).splitlines()[0][:200]
        try:
            loss, got = dtc_gradients(dtc, case, model, labels, work)
        except RuntimeError as e:
            return False, f"FAIL  {case.name:34s} {e}"
        except Exception as e:  # noqa: BLE001 (timeout, unreadable export, ...)
            return False, f"FAIL  {case.name:34s} dtc: {type(e).__name__}: {e}"
        worst, failed = [], False
        for name, r in ref.items():
            err = np.abs(got[name] - r)
            scale = float(np.abs(r).max())
            bad = err > RTOL * scale + ATOL
            failed |= bool(bad.any())
            worst.append((float(err.max()), scale, name, int(bad.sum()), r.size))
        loss_ok = abs(loss - ref_loss) <= LOSS_RTOL * max(abs(ref_loss), 1e-6)
        err, scale, name, nbad, size = max(worst)
        status = "ok  " if not failed and loss_ok else "FAIL"
        line = (f"{status}  {case.name:34s} max|err| {err:.2e} (max|ref| {scale:.2e}, "
                f"{name}) over {len(ref)} param(s)  {time.time() - start:.2f}s")
        if failed:
            line += "  " + ", ".join(f"{n}: {b}/{s} elements off" for _, _, n, b, s in worst if b)
        if not loss_ok:
            line += f"  loss {loss:.7g} vs reference {ref_loss:.7g}"
        if engine != "onnxruntime":
            line += f"  [reference: {engine}]"
        return status == "ok  ", line
    finally:
        if not keep:
            shutil.rmtree(work, ignore_errors=True)


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--dtc", default=os.environ.get("DTC", os.path.join(ROOT, "build", "bin", "dtc")))
    ap.add_argument("-k", dest="filter", help="only cases whose name contains this")
    ap.add_argument("--jobs", type=int, default=min(4, os.cpu_count() or 1))
    ap.add_argument("--keep", help="keep each case's model, data and plan under this directory")
    ap.add_argument("--list", action="store_true", help="list the cases and exit")
    args = ap.parse_args()
    cases = make_cases()
    if args.filter:
        cases = [c for c in cases if args.filter in c.name]
    if args.list:
        for c in cases:
            print(c.name)
        return 0
    if not cases:
        print("no case matches", file=sys.stderr)
        return 1
    dtc = os.path.abspath(args.dtc)
    if not os.access(dtc, os.X_OK):
        print(f"error: no dtc at {dtc} (--dtc PATH)", file=sys.stderr)
        return 1
    start = time.time()
    with concurrent.futures.ThreadPoolExecutor(max_workers=args.jobs) as pool:
        results = list(pool.map(lambda ic: check(dtc, ic[1], ic[0], args.keep),
                                enumerate(cases)))
    for _, line in results:
        print(line)
    failed = sum(not ok for ok, _ in results)
    print(f"{len(cases) - failed} of {len(cases)} gradient checks passed "
          f"({time.time() - start:.1f} s)")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
